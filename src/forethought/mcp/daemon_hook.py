"""``forethought mcp-proxy --daemon URL``: one client session of the proxy, linked to ``forethought serve``.

The daemon (docs/daemon.md) reads the model's stream, so it knows a call the moment its arguments close and
guesses from the whole conversation; the proxy sees only calls and results. So while a session is linked the
daemon guesses and the proxy is its hands on the server. A :class:`DaemonHook` joins one relay session to a
:class:`~forethought.mcp.daemon_link.DaemonLink`:

* **Registration.** Once a ``tools/list`` has passed in full (the client's, or one relayed during warm-up and
  adopted at the handoff), the server is registered under its names (``--name``, the client's key for it,
  first; then the name its handshake gave) with its ``tools/list`` entries, annotations included. On
  ``notifications/tools/list_changed`` the proxy lists the tools itself (its own ids) and registers them again;
  a client's listing that differs from the registered one is registered too.
* **Jobs.** An early run the daemon asks for is sent upstream exactly as a guess of the proxy's own is
  (:meth:`~forethought.mcp.speculation.SessionSpeculator.guess_request`: its own id and progress token; a
  withdrawn job is cancelled upstream; counted as a speculative call).
* **Calls.** A client's ``tools/call`` is offered to the daemon first. ``hit``: the early run's result is the
  answer. ``run``: the client's request goes upstream verbatim through the proxy's usual path
  (:meth:`~forethought.mcp.speculation.SessionSpeculator.call`, so the proxy's write clock sees it), and its
  answer is reported. A call that claims and carries more than ``name``, ``arguments`` and ``_meta`` (a
  task-augmented call, say) is never answered from an early run: it is sent upstream whatever the daemon says.
* **Fallback.** While the daemon is in charge (linking, or linked) the proxy's own guesser is off. When the
  link is down (never up, or gone: one warning line), the session goes on as a plain speculative proxy.

:func:`daemon_address` reads ``--daemon`` and the daemon file (the link token) before anything starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp_types import JSONRPCRequest

from forethought.mcp.daemon_link import DaemonLink, LinkAnswer, daemon_file, read_daemon_file
from forethought.mcp.errors import McpProxyError
from forethought.mcp.guessmeta import sent_meta
from forethought.mcp.listing import list_tools
from forethought.mcp.seams import CallReport
from forethought.mcp.speculation import SessionSpeculator
from forethought.mcp.upstream import Answer, Kind

__all__ = ["LOOPBACK", "DaemonAddress", "DaemonHook", "daemon_address", "parse_daemon_url"]

log = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
"""The hosts a daemon URL may name: the daemon binds the loopback interface only, and its token goes nowhere
else."""
_CALL_KEYS = frozenset({"name", "arguments", "_meta"})

Plain = Callable[[JSONRPCRequest], Awaitable[CallReport]]
"""The proxy's own answer to a client's call (:meth:`SessionSpeculator.call`)."""


@dataclass(frozen=True, slots=True)
class DaemonAddress:
    """Where the daemon listens and its link token (never shown)."""

    url: str
    token: str = field(repr=False)


def parse_daemon_url(url: str) -> str:
    """``url`` as a daemon's base URL, ``http://HOST:PORT`` with a loopback host; :class:`McpProxyError` (one
    line) for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise McpProxyError(f"--daemon {url!r} is not a URL (give http://127.0.0.1:PORT)") from None
    host = parts.hostname or ""
    if parts.scheme != "http" or host not in LOOPBACK or not port:
        raise McpProxyError(f"--daemon {url!r}: give the daemon's http://127.0.0.1:PORT (it serves the loopback "
                            "interface only)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise McpProxyError(f"--daemon {url!r}: give the daemon's base URL, http://127.0.0.1:PORT, nothing after it")
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def daemon_address(url: str, path: Path | None = None) -> DaemonAddress:
    """The daemon at ``url`` and its token from its file (``path``, default :func:`daemon_file`): what
    ``--daemon`` and ``--daemon-file`` give. :class:`McpProxyError` (one line) when ``url`` is not a daemon's
    URL, the file cannot be read, or it announces a daemon on another port."""
    base = parse_daemon_url(url)
    where = path or daemon_file()
    try:
        announced, token = read_daemon_file(where)
    except OSError as exc:
        raise McpProxyError(f"--daemon {base}: cannot read the daemon file {where} ({exc.strerror or exc}); is "
                            "forethought serve running? (--daemon-file names another file)") from None
    except ValueError as exc:
        raise McpProxyError(f"--daemon {base}: the daemon file {where} is not usable ({exc})") from None
    try:
        announced_base = parse_daemon_url(announced)
    except McpProxyError:
        raise McpProxyError(f"--daemon {base}: the daemon file {where} names no loopback URL") from None
    if urlsplit(announced_base).port != urlsplit(base).port:
        raise McpProxyError(f"--daemon {base}: the daemon file {where} is for the daemon at {announced_base} "
                            "(another port: update the client's configuration, or give that daemon's file)")
    return DaemonAddress(base, token)


class DaemonHook:
    """One client session's link to the daemon (see the module docstring)."""

    def __init__(self, address: DaemonAddress, speculator: SessionSpeculator, name: str | None = None,
                 name_wait_s: float = 5.0) -> None:
        """``name``: the server's key in the client's configuration (``--name``), registered first."""
        self._speculator = speculator
        self._name = name
        self._name_wait_s = name_wait_s
        self.link = DaemonLink(address.url, address.token, self._early)
        self._tools: list[dict[str, Any]] | None = None
        """The tool list last handed to the registration (``None``: none listed yet)."""
        self._registering: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        speculator.daemon = self

    @property
    def in_charge(self) -> bool:
        """Whether the daemon guesses for this session: until the link is known to be down."""
        return not self._closed and self.link.gone_reason is None

    @property
    def names(self) -> list[str]:
        """The server's names: ``--name`` first, then the name it gives itself."""
        own = self._speculator.name.server_info.get("name")
        return list(dict.fromkeys(n for n in (self._name, own) if isinstance(n, str) and n))

    # --- registration ---------------------------------------------------------------------------------

    def listed(self, listing: Mapping[str, Mapping[str, Any]]) -> None:
        """A complete tool list passed (or the proxy's own listing came back): register it if it is new."""
        tools = [dict(entry) for entry in listing.values()]
        if not self.in_charge or tools == self._tools:
            return
        self._tools = tools
        if self._registering is None or self._registering.done():
            self._registering = self._spawn(self._register())  # (a running one registers the latest list too)

    async def _register(self) -> None:
        await self._speculator.name.wait(self._name_wait_s)  # the server's own name, from its handshake
        sent: list[dict[str, Any]] | None = None
        while self.in_charge and self._tools is not None and self._tools is not sent:
            sent = self._tools
            if self.link.shim is None:
                await self.link.register(self.names, sent, self._speculator.name.server_info)
            else:
                await self.link.tools_changed(sent, self.names)

    def tools_changed(self) -> None:
        """The upstream says its tools changed: list them (under the proxy's own ids) and register them again."""
        if self.in_charge and self._tools is not None:
            self._spawn(self._relist())

    async def _relist(self) -> None:
        listed = await list_tools(self._speculator.link, self._speculator.envelope)
        if listed is None:
            log.info("forethought mcp-proxy: the upstream's tools/list failed; the daemon keeps the last list")
            return
        self.listed(listed[0])

    # --- the daemon's jobs, the client's calls ----------------------------------------------------------

    async def _early(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        """A job of the daemon's, sent upstream as a guess of the proxy's own is."""
        request = self._speculator.guess_request(name, arguments)
        answer = await self._speculator.link.request(request, Kind.GUESS)
        return LinkAnswer(result=answer.result, error=answer.error)

    async def call(self, request: JSONRPCRequest, plain: Plain) -> CallReport:
        """Answer a client's ``tools/call``: the daemon's early result, or ``plain`` (the client's request sent
        upstream verbatim through the proxy's usual path), reported to the daemon."""
        registering = self._registering
        if registering is not None and not registering.done():
            await asyncio.wait({registering})  # a call of a server being registered is the daemon's to see
        params = request.params or {}
        name, arguments = params.get("name"), params.get("arguments", {})
        if not self.link.linked or not isinstance(name, str) or not isinstance(arguments, dict):
            return await plain(request)
        reports: list[CallReport] = []

        async def forward() -> LinkAnswer:
            report = await plain(request)
            reports.append(report)
            return LinkAnswer(result=report.answer.result, error=report.answer.error)

        result = await self.link.call(name, arguments, forward)
        if not result.hit:
            return reports[-1] if reports else CallReport(Answer(result.answer.result, result.answer.error), "miss")
        if not set(params) <= _CALL_KEYS or sent_meta(params) != dict(self._speculator.envelope):
            return await plain(request)  # another shape, or a _meta the early run was not sent with
        self._speculator.served_early(request)
        return CallReport(Answer(result.answer.result, result.answer.error), "hit")

    # --- the end --------------------------------------------------------------------------------------

    def _spawn(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        async def guarded() -> None:
            try:
                await job
            except Exception:  # the link never hurts the session
                log.warning("forethought mcp-proxy: a step of the daemon link failed", exc_info=True)

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """The session ended: stop registering, withdraw from the daemon (it drops the shim)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.link.aclose()
