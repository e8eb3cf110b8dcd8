"""The upstream's name, learnt under every handshake the ``mcp`` SDK speaks: what the policy's
``[servers.NAME]`` tables are matched against.

A server says its name in its handshake's answer: ``serverInfo`` of an ``initialize`` result (the 2025
revisions), or the ``io.modelcontextprotocol/serverInfo`` stamp in the ``_meta`` of a ``server/discover``
result (the 2026-07-28 revision, whose servers may stamp every result so). A client of the newest revision may
also skip the handshake altogether and send every request with its protocol version in ``_meta``; the proxy
then asks the upstream itself, with a ``server/discover`` of its own (same protocol version, the client's own
info and capabilities), before it relays that first request. It never sends a handshake of its own to a
connection the client has not yet opened in the newest revision: a 2026 server that has answered
``server/discover`` refuses ``initialize``.

:class:`ServerName` also keeps what else the two sides say of themselves there, for better guesses where the
proxy sees little: the server's ``instructions`` and the client's name (from ``clientInfo``), and the
server's own info (``serverInfo``: its own name, which a proxy linked to the daemon registers beside ``--name``).

:class:`ServerName` watches the client's requests and the upstream's answers and settles once: on the name,
or on :data:`~forethought._core.policy.UNKNOWN_SERVER` when the handshake answered without one or the
client's first request neither opened a handshake nor named a protocol version. A name given on the command
line (``--name``) wins and settles at once. The policy is resolved with what it settled on (the core fails
closed for an unknown server where the policy has tables for named servers, and says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId

from forethought._core.policy import UNKNOWN_SERVER, Server

log = logging.getLogger(__name__)

INITIALIZE = "initialize"
DISCOVER = "server/discover"
PING = "ping"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


def info_in(method: str, result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The server's info (``name``, ``version``, ...) in a handshake's result (``method``: ``initialize`` or
    ``server/discover``)."""
    if method == INITIALIZE:
        info = result.get("serverInfo")
    else:
        meta = result.get("_meta")
        info = meta.get(SERVER_INFO_KEY) if isinstance(meta, Mapping) else None
    return info if isinstance(info, Mapping) else None


def name_in(method: str, result: Mapping[str, Any]) -> str | None:
    """The server's name in a handshake's result (``method``: ``initialize`` or ``server/discover``)."""
    info = info_in(method, result)
    name = info.get("name") if info is not None else None
    return name if isinstance(name, str) and name else None


class ServerName:
    """What the proxy knows of its upstream's name (see the module docstring)."""

    def __init__(self, given: str | None = None) -> None:
        self._settled: Server | None = given
        self.how = "given on the command line" if given is not None else ""
        """How the name was learnt (or why not), once settled."""
        self._asked: dict[RequestId, tuple[str, bool]] = {}
        """Handshake requests in flight: id -> (method, whether it is the proxy's own probe)."""
        self._first_seen = False
        self._waiters: list[asyncio.Future[Server]] = []
        self.client = ""
        """The client's name, as its ``clientInfo`` gives it (empty until seen)."""
        self.instructions = ""
        """The server's ``instructions`` from its handshake answer (empty if it gave none)."""
        self.server_info: Mapping[str, Any] = {}
        """The server's info as its handshake answer gave it (its own ``name`` even where ``--name`` settled the
        policy's; empty until seen)."""

    @property
    def settled(self) -> Server | None:
        """The name, :data:`~forethought._core.policy.UNKNOWN_SERVER`, or ``None`` while not yet known."""
        return self._settled

    def _settle(self, name: Server, how: str) -> None:
        if self._settled is not None:
            return
        self._settled, self.how = name, how
        if name is UNKNOWN_SERVER:
            log.info("forethought mcp-proxy: the upstream's name is unknown (%s)", how)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(name)
        self._waiters.clear()

    def client_request(self, message: JSONRPCRequest, new_id: Callable[[], str]) -> JSONRPCRequest | None:
        """A client's request, before it is relayed: returns a ``server/discover`` of the proxy's own to send
        upstream first, when only that can learn the name."""
        params = message.params or {}
        if not self.client:
            meta = params.get("_meta")
            info = params.get("clientInfo") if message.method == INITIALIZE else (
                meta.get(CLIENT_INFO_KEY) if isinstance(meta, Mapping) else None)
            if isinstance(info, Mapping) and isinstance(info.get("name"), str):
                self.client = info["name"]
        method = message.method
        if method in (INITIALIZE, DISCOVER):
            self._asked[message.id] = (method, False)
            self._first_seen = True
            return None
        if self._settled is not None or method == PING or self._first_seen:
            return None
        self._first_seen = True
        meta = (message.params or {}).get("_meta")
        version = meta.get(VERSION_KEY) if isinstance(meta, Mapping) else None
        if not isinstance(version, str):
            self._settle(UNKNOWN_SERVER, "the client opened no handshake and named no protocol version")
            return None
        assert isinstance(meta, Mapping)
        envelope = {k: meta[k] for k in (VERSION_KEY, CLIENT_INFO_KEY, CAPABILITIES_KEY) if k in meta}
        probe = JSONRPCRequest(jsonrpc="2.0", id=new_id(), method=DISCOVER, params={"_meta": envelope})
        self._asked[probe.id] = (DISCOVER, True)
        return probe

    def upstream_answered(self, message: JSONRPCResponse | JSONRPCError) -> None:
        """An answer from the upstream (any): settles the name if it answers a handshake, or carries the
        server's stamp (the 2026-07-28 revision stamps results with it)."""
        if message.id is None or (not self._asked and self._settled is not None):
            return
        asked = self._asked.pop(message.id, None)
        if asked is not None and isinstance(message, JSONRPCResponse):
            instructions = message.result.get("instructions")
            if isinstance(instructions, str) and not self.instructions:
                self.instructions = instructions
            info = info_in(asked[0], message.result)
            if info is not None and not self.server_info:
                self.server_info = dict(info)
        if self._settled is not None:
            return
        if asked is None:
            if isinstance(message, JSONRPCResponse):
                name = name_in(DISCOVER, message.result)
                if name is not None:
                    self.server_info = self.server_info or dict(info_in(DISCOVER, message.result) or {})
                    self._settle(name, "from the stamp of a result")
            return
        method, own = asked
        if isinstance(message, JSONRPCError):
            if own:
                self._settle(UNKNOWN_SERVER, "the upstream refused the proxy's server/discover")
            return  # a client's refused discover is followed by its initialize: wait for that
        name = name_in(method, message.result)
        self._settle(name if name is not None else UNKNOWN_SERVER,
                     f"from its {method} answer" if name is not None else f"its {method} answer named no server")

    def give_up(self, why: str) -> None:
        """Settle as unknown (the upstream is gone, or the wait for the name is over)."""
        self._settle(UNKNOWN_SERVER, why)

    async def wait(self, timeout_s: float) -> Server:
        """The name once settled, or :data:`~forethought._core.policy.UNKNOWN_SERVER` after ``timeout_s``."""
        if self._settled is not None:
            return self._settled
        waiter: asyncio.Future[Server] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                return await waiter
        except TimeoutError:
            self.give_up(f"not learnt within {timeout_s:g} s")
            settled = self._settled
            return settled if settled is not None else UNKNOWN_SERVER
