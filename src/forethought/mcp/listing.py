"""The upstream's tool list, asked by the proxy itself (when the list it has may no longer hold).

A server may change what a tool does or says of itself (its ``readOnlyHint``, its schema). Under the 2025
revisions it says so (``notifications/tools/list_changed``); under the 2026 revision a change notification
reaches only a client that opened a ``subscriptions/listen`` stream, and each ``tools/list`` answer says how
long it may be trusted instead (``ttlMs``, 0 by the SDK's default: stale at once). A client is free never to
list the tools again, so the proxy does not wait for it: :func:`list_tools` asks for every page under the
proxy's own request ids (their answers are consumed, never relayed) with the client's latest
``io.modelcontextprotocol/*`` metadata, and returns the complete list and how long it holds, or ``None`` when
the upstream is gone or answers something that is not a tool list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import JSONRPCRequest

from forethought.mcp.errors import UpstreamClosedError
from forethought.mcp.upstream import Kind, UpstreamLink

MAX_PAGES = 1000
"""A server that pages without end is not followed past this many pages."""


def page_ttl_s(result: Mapping[str, Any]) -> float | None:
    """How long one ``tools/list`` page may be trusted, in seconds: its ``ttlMs`` (the 2026 revision's caching
    directive: 0 is stale at once), or ``None`` (an older revision: until the server says the tools changed)."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0:
        return None
    return float(ttl) / 1000.0


async def list_tools(link: UpstreamLink, envelope: Mapping[str, Any]
                     ) -> tuple[dict[str, Mapping[str, Any]], float | None] | None:
    """Every page of the upstream's ``tools/list``, merged (tool name -> entry), with the shortest of the
    pages' :func:`page_ttl_s`; ``None`` when the upstream is gone or answered something else."""
    pages: dict[str, Mapping[str, Any]] = {}
    ttl_s: float | None = None
    cursor: Any = None
    for _ in range(MAX_PAGES):
        params: dict[str, Any] = {"_meta": dict(envelope)} if envelope else {}
        if cursor is not None:
            params["cursor"] = cursor
        request = JSONRPCRequest(jsonrpc="2.0", id=link.new_id(), method="tools/list", params=params or None)
        try:
            answer = await link.request(request, Kind.PROBE)
        except UpstreamClosedError:
            return None
        result = answer.result or {}
        entries = result.get("tools")
        if not isinstance(entries, list):
            return None
        pages.update((e["name"], e) for e in entries if isinstance(e, Mapping) and isinstance(e.get("name"), str))
        page_ttl = page_ttl_s(result)
        if page_ttl is not None:
            ttl_s = page_ttl if ttl_s is None else min(ttl_s, page_ttl)
        cursor = result.get("nextCursor")
        if cursor is None:
            return pages, ttl_s
    return None
