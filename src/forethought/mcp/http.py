"""Serving clients over streamable HTTP (``--listen 127.0.0.1:PORT``), with ``/metrics`` beside ``/mcp``.

Each client session gets its own ``mcp`` SDK :class:`StreamableHTTPServerTransport` (the SDK's session id,
DNS-rebinding protection for localhost) and its own :meth:`Proxy.serve_session`, so one upstream connection
and one runtime session per client session. Prometheus metrics are served at ``/metrics`` by
prometheus-client's ASGI app.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from forethought.mcp.errors import McpProxyError
from forethought.mcp.metrics import metrics_app
from forethought.mcp.proxy import Proxy

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_PORT = 65535


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (loopback only: the proxy carries the user's tools; a port from 0 to 65535, 0 for any free
    one)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if host not in LOCAL_HOSTS:
        raise McpProxyError(f"--listen {text!r}: the proxy only listens on loopback (127.0.0.1)")
    try:
        number = int(port)
    except ValueError:
        raise McpProxyError(f"--listen {text!r}: expected HOST:PORT") from None
    if not 0 <= number <= MAX_PORT:
        raise McpProxyError(f"--listen {text!r}: the port must be from 0 to {MAX_PORT}")
    return host, number


def _security() -> TransportSecuritySettings:
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


def _closed_streams(exc: BaseException) -> bool:
    """Whether ``exc`` is only the session's streams closed under it (every exception of a group), as the SDK
    closes them when the client ends its session (``DELETE``): a normal end, not a failure."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(anyio.ClosedResourceError)[1] is None
    return isinstance(exc, anyio.ClosedResourceError)


class SessionRouter:
    """Routes each HTTP request to its client session's transport, opening a session on a first request."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self._sessions: dict[str, StreamableHTTPServerTransport] = {}
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                self._group = None

    async def _session(self, transport: StreamableHTTPServerTransport, *,
                       task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        session_id = transport.mcp_session_id or ""
        try:
            async with transport.connect() as (read, write):
                task_status.started()
                try:
                    await self.proxy.serve_session(read, write)
                finally:
                    await write.aclose()
        except Exception as exc:
            if not (transport.is_terminated and _closed_streams(exc)):  # the client's DELETE is a normal end
                log.warning("client session %s failed", session_id[:8], exc_info=True)
                return
        finally:
            self._sessions.pop(session_id, None)
        log.debug("client session %s ended", session_id[:8])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if session_id is not None:
            transport = self._sessions.get(session_id)
            if transport is None:
                await PlainTextResponse("Session not found", status_code=404)(scope, receive, send)
                return
            await transport.handle_request(scope, receive, send)
            return
        if self._group is None:
            await PlainTextResponse("Shutting down", status_code=503)(scope, receive, send)
            return
        transport = StreamableHTTPServerTransport(mcp_session_id=uuid4().hex, security_settings=_security())
        assert transport.mcp_session_id is not None
        self._sessions[transport.mcp_session_id] = transport
        await self._group.start(self._session, transport)
        await transport.handle_request(scope, receive, send)


class _AsgiEndpoint:
    """A plain ASGI app as a Starlette route endpoint (a function endpoint would be called with a Request)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def app_for(proxy: Proxy) -> Starlette:
    """The ASGI app: ``/mcp`` (streamable HTTP) and ``/metrics``."""
    router = SessionRouter(proxy)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with router.running():
            yield

    return Starlette(routes=[Route(MCP_PATH, endpoint=router, methods=["GET", "POST", "DELETE"]),
                             Route("/metrics", endpoint=_AsgiEndpoint(metrics_app(proxy.current)), methods=["GET"])],
                     lifespan=lifespan)


async def serve_http(proxy: Proxy, host: str, port: int) -> None:
    """Serve until interrupted."""
    import uvicorn

    config = uvicorn.Config(app_for(proxy), host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
