"""``forethought doctor``: is the daemon there, which servers are linked, is the upstream reachable, what runs early.

Each check is a :class:`Check` (a name, whether it passed, one line of detail) and none of them ever shows a
credential: the token is read from the daemon file and sent, never printed; upstreams are probed without any
credential (any HTTP answer means reachable). The checks, in order:

1. the daemon file: present, readable by the user only, holding a URL and a token;
2. the daemon: ``/health`` answers, and the link API accepts the token;
3. the upstreams the daemon relays to: each answers HTTP;
4. the linked servers: their names and tools, and per tool whether it would run early (and why not).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from forethought.mcp.daemon_link import LINK_PREFIX, TOKEN_HEADER, daemon_file, read_daemon_file

__all__ = ["Check", "run_doctor"]

TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome (``ok=None``: not applicable)."""

    name: str
    ok: bool | None
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)


def _file_check(path: Path) -> tuple[Check, tuple[str, str] | None]:
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        url, token = read_daemon_file(path)
    except FileNotFoundError:
        return Check("daemon file", False, f"{path} does not exist: is `forethought serve` running?"), None
    except (OSError, ValueError) as exc:
        return Check("daemon file", False, f"{path} is unusable ({type(exc).__name__})"), None
    if mode & 0o077:
        return Check("daemon file", False, f"{path} is readable by others (mode {mode:o}): its token is not "
                                           "private; restart the daemon"), (url, token)
    return Check("daemon file", True, f"{path} (mode {mode:o}) names {url}"), (url, token)


def run_doctor(path: Path | None = None, http: httpx2.Client | None = None) -> list[Check]:
    """Every check, in order (later ones are skipped once one they need has failed)."""
    client = http or httpx2.Client(timeout=TIMEOUT_S)
    try:
        return _checks(path or daemon_file(), client)
    finally:
        if http is None:
            client.close()


def _checks(path: Path, client: httpx2.Client) -> list[Check]:
    checks: list[Check] = []
    file_check, found = _file_check(path)
    checks.append(file_check)
    if found is None:
        return checks
    url, token = found
    try:
        health = client.get(f"{url}/health")
        checks.append(Check("daemon", health.status_code == 200,
                            f"{url} answers (version {health.json().get('version', '?')})"
                            if health.status_code == 200 else f"{url} answered HTTP {health.status_code}"))
    except (httpx2.HTTPError, ValueError) as exc:
        checks.append(Check("daemon", False, f"{url} does not answer ({type(exc).__name__}): is it running?"))
        return checks
    try:
        response = client.get(f"{url}{LINK_PREFIX}/status", headers={TOKEN_HEADER: token})
    except httpx2.HTTPError as exc:
        checks.append(Check("link", False, f"the link API does not answer ({type(exc).__name__})"))
        return checks
    if response.status_code != 200:
        checks.append(Check("link", False, f"the link API refused the token (HTTP {response.status_code}): the "
                                           "daemon file belongs to another daemon"))
        return checks
    status = response.json()
    checks.append(Check("link", True, "the token opens the link API", {"status": status}))
    for provider, upstream in sorted((status.get("upstreams") or {}).items()):
        if not upstream:
            checks.append(Check(f"upstream {provider}", None, "not relayed"))
            continue
        try:
            answered = client.get(upstream)
            checks.append(Check(f"upstream {provider}", True, f"{upstream} answers HTTP ({answered.status_code})"))
        except httpx2.HTTPError as exc:
            checks.append(Check(f"upstream {provider}", False, f"{upstream} does not answer ({type(exc).__name__})"))
    servers = status.get("servers") or []
    if not servers:
        checks.append(Check("servers", None, "no MCP server is linked yet (start your client: its shims link)"))
    for server in servers:
        tools = server.get("tools") or []
        early = [t["name"] for t in tools if t.get("early")]
        names = "/".join(server.get("names") or ["?"])
        detail = (f"{len(tools)} tools; run early: {', '.join(early) if early else 'none'}"
                  + "".join(f"\n    {t['name']}: {t['why']}" for t in tools if not t.get("early")))
        checks.append(Check(f"server {names}", True, detail, {"tools": tools}))
    return checks
