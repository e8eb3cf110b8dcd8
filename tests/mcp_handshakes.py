"""Clients that open a session each way the ``mcp`` SDK can, directly and through an in-process proxy.

``legacy``: the ``initialize`` handshake (the 2025 revisions). ``discover``: ``server/discover`` (the
2026-07-28 revision). ``auto``: ``server/discover``, and ``initialize`` where the server refuses it (what the
SDK's ``Client`` does by default). ``pinned``: no handshake at all, the client adopts the 2026-07-28 revision
and stamps every request with it (``Client(mode="2026-07-28")``).
Built only on the proxy's public seams (``Proxy``, ``ProxyConfig``, ``serve_session``, ``settled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import DiscoverResult, ServerCapabilities

from forethought.mcp.effects import McpPolicy
from forethought.mcp.proxy import Proxy, ProxyConfig
from forethought.mcp.stats import ProxyStats

HANDSHAKES = ("legacy", "discover", "pinned")
"""The three ways the SDK opens a session (``auto`` is discover, then legacy where that is refused)."""
MODERN = "2026-07-28"


async def open_session(session: ClientSession, handshake: str) -> None:
    if handshake == "legacy":
        await session.initialize()
    elif handshake == "discover":
        await session.discover()
    elif handshake == "auto":
        try:
            await session.discover()
        except MCPError:
            await session.initialize()
    else:
        session.adopt(DiscoverResult(supported_versions=[MODERN], capabilities=ServerCapabilities(),
                                     result_type="complete", ttl_ms=0, cache_scope="public"))


@contextlib.asynccontextmanager
async def direct(command: Sequence[str], handshake: str, **session_options: Any) -> AsyncIterator[ClientSession]:
    """``session_options``: more arguments of the ``ClientSession`` (a logging callback, a log level)."""
    params = StdioServerParameters(command=command[0], args=list(command[1:]))
    async with stdio_client(params) as (read, write), ClientSession(read, write, **session_options) as session:
        await open_session(session, handshake)
        yield session


class Handle:
    """The proxy of a session; ``stats`` and ``speculated`` are set when the session has ended."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.stats = ProxyStats()
        self.speculated: list[str] = []


def _after(session: ClientSession, method: str, wait: Callable[[], Awaitable[None]]) -> None:
    plain = getattr(session, method)

    async def waited(*args: Any, **kwargs: Any) -> Any:
        result = await plain(*args, **kwargs)
        await asyncio.wait_for(wait(), 60)
        return result

    setattr(session, method, waited)


def free_guesses(policy: McpPolicy) -> McpPolicy:
    """``policy`` pricing guesses as costing nothing beyond the server's work, with a slack of one request in
    the upstream bound. The test servers answer in a millisecond or two, faster than a guess costs, so the
    calibration would (rightly) never guess them, and the sessions are too short to earn a guess under the
    default bound; tests of the mechanics (keys, clocks, progress, races) need guesses. Tests of the pricing
    and the bound themselves do not use this."""
    settings = policy.settings
    return replace(policy, settings=replace(settings, guess_overhead_ms=0.0,
                                            upstream_slack=max(settings.upstream_slack, 1)))


@contextlib.asynccontextmanager
async def proxied(command: Sequence[str], policy: McpPolicy, handshake: str, store: Path | None = None,
                  name: str | None = None, predictor_for: Any = None, settle: bool = True, priced: bool = False,
                  **session_options: Any) -> AsyncIterator[tuple[ClientSession, Handle]]:
    """A client session through an in-process proxy; with ``settle`` each call returns once the proxy has
    made the guesses its answer owes (and each listing once its predictor is ready). Guesses are priced
    free (:func:`free_guesses`) unless ``priced``."""
    proxy = Proxy(ProxyConfig(command=tuple(command), policy=policy if priced else free_guesses(policy), store=store,
                              name=name), predictor_for=predictor_for)
    handle = Handle(proxy)
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    try:
        async with ClientSession(from_proxy, to_proxy, **session_options) as session:
            await open_session(session, handshake)
            if settle:
                _after(session, "list_tools", proxy.ready)
                _after(session, "call_tool", proxy.settled)
            yield session, handle
    finally:
        to_proxy.close()
        handle.stats = await asyncio.wait_for(serving, 30)
        handle.speculated = list(proxy.links[-1].speculative_tools) if proxy.links else []
        proxy.close()


@contextlib.asynccontextmanager
async def http_upstream(server: Path, log: Path) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``server`` (a test server script that takes ``LOG PORT``) on streamable HTTP at a free loopback port,
    once it listens; yields its ``/mcp`` URL and its process (stopped at the end, if still running)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    process = await asyncio.create_subprocess_exec(sys.executable, str(server), str(log), str(port),
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient() as http:
            for _ in range(400):  # until it listens
                try:
                    await http.get(url)
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
        yield url, process
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 10)


@contextlib.asynccontextmanager
async def proxied_url(url: str, handshake: str) -> AsyncIterator[tuple[ClientSession, asyncio.Task[ProxyStats]]]:
    """A client session (opened by ``handshake``) through an in-process proxy in front of the HTTP upstream at
    ``url``, trusting it; yields the session and the task serving it (its stats once the client left)."""
    proxy = Proxy(ProxyConfig(url=url, policy=McpPolicy().trusting()))
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    try:
        async with ClientSession(from_proxy, to_proxy) as session:
            await open_session(session, handshake)
            yield session, serving
    finally:
        to_proxy.close()
        await asyncio.wait_for(asyncio.shield(serving), 30)
        proxy.close()
