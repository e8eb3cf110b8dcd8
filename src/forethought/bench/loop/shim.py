"""A linked shim for the bench and the tests (the bench's daemon arms have not moved to ``forethought mcp-proxy
--daemon`` yet).

:class:`FakeShim` stands where the real shim will: it holds an ``mcp`` SDK client session to a real MCP
server (started as a subprocess on stdio) and a :class:`~forethought.mcp.daemon_link.DaemonLink` to the
daemon. A client's call goes ``shim.call_tool(name, arguments)`` -> the link's claim -> the daemon's early
result, or the server (the client's own call). Jobs the daemon sends run on the same session under the SDK's
own request ids. It is not an MCP server itself (the client calls it in-process), and it records every
``tools/call`` the server received, early or not, so a run can count early runs of non-read tools.

:func:`answer_text` is how every arm renders a server's answer for comparison: the result (or error) as
key-sorted JSON, exactly as the SDK gave it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from forethought.mcp.daemon_link import DaemonLink, LinkAnswer

__all__ = ["FakeShim", "ServerCall", "answer_text", "call_server", "open_server"]


def answer_text(answer: LinkAnswer) -> str:
    """An answer as compared between arms: its JSON, keys sorted."""
    return json.dumps(answer.to_json(), sort_keys=True)


@dataclass(frozen=True, slots=True)
class ServerCall:
    """One ``tools/call`` the server received: the tool, and whether it was an early run."""

    tool: str
    early: bool


async def call_server(session: ClientSession, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
    """One ``tools/call`` through the SDK, as an answer (a JSON-RPC error becomes the answer's error)."""
    try:
        result = await session.call_tool(name, dict(arguments))
    except MCPError as exc:
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.data is not None:
            error["data"] = exc.data
        return LinkAnswer(error=error)
    return LinkAnswer(result=result.model_dump(mode="json", by_alias=True, exclude_none=True))


@contextlib.asynccontextmanager
async def open_server(command: Sequence[str], env: Mapping[str, str] | None = None,
                      cwd: str | None = None) -> AsyncIterator[tuple[ClientSession, list[dict[str, Any]], str]]:
    """A client session to a stdio MCP server (started with ``env``, default this process's environment, as a
    client starts it; its stderr discarded): the session, its tools/list entries, its own name."""
    params = StdioServerParameters(command=command[0], args=list(command[1:]),
                                   env=dict(env if env is not None else os.environ), cwd=cwd)
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - opening /dev/null does not block
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
            yield session, tools, init.server_info.name


@dataclass(eq=False)
class FakeShim:
    """A client's MCP server, linked to the daemon (see the module docstring)."""

    session: ClientSession
    tools: list[dict[str, Any]]
    names: tuple[str, ...]
    link: DaemonLink | None = None
    calls: list[ServerCall] = field(default_factory=list)

    async def _early(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        self.calls.append(ServerCall(name, True))
        return await call_server(self.session, name, arguments)

    async def _own(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        self.calls.append(ServerCall(name, False))
        return await call_server(self.session, name, arguments)

    async def connect(self, url: str, token: str) -> bool:
        """Link to the daemon at ``url`` (``False``: it could not; calls then go to the server only)."""
        self.link = DaemonLink(url, token, self._early)
        return await self.link.register(self.names, self.tools)

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        """The client's call: the daemon's early result, or the server's answer to the call itself."""
        if self.link is None:
            return await self._own(name, arguments)
        return (await self.link.call(name, arguments, lambda: self._own(name, arguments))).answer

    async def aclose(self) -> None:
        if self.link is not None:
            await self.link.aclose()

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, command: Sequence[str], name: str, *, daemon: tuple[str, str] | None = None,
                      env: Mapping[str, str] | None = None, cwd: str | None = None) -> AsyncIterator[FakeShim]:
        """Start the server, list its tools, and (with ``daemon=(url, token)``) link it under ``name``."""
        async with open_server(command, env, cwd) as (session, tools, own_name):
            shim = cls(session, tools, (name, own_name))
            try:
                if daemon is not None:
                    await shim.connect(*daemon)
                yield shim
            finally:
                await shim.aclose()
