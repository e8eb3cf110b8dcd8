"""HTTP plumbing for forethought's servers: running a Starlette app under uvicorn, and streaming SSE bodies.

:func:`serve_in_process` binds a socket on ``127.0.0.1`` port 0 itself (so the port is known before the
server starts and nothing races for it), runs uvicorn as a task on the current event loop, yields the base
URL (``http://127.0.0.1:PORT``), and shuts the server down on exit. Tests, the bench and the demo use it
to talk to real servers over real HTTP. :func:`serve_forever` is the blocking form for ``forethought
serve-model`` and the gateway. :class:`EventStream` is the SSE response both servers stream with.

:class:`ServerLimits` are uvicorn's own bounds where it has them (``limit_concurrency``: answers 503 past
that many connections; ``timeout_keep_alive``: idle kept-alive connections closed) plus the one it lacks: a
header read timeout (``header_timeout_s``), so a client that opens a connection and never finishes its
request headers is disconnected instead of holding a file descriptor forever.

Request bodies: :func:`read_body` reads one whole, bounded in size and time (:class:`BodyRefused` 413 or 408;
:func:`read_capped` is its size bound alone), for the gateway's routes and the daemon's alike;
:func:`buffered_request` reads one in an ASGI app that must look at it before it passes the request on.
:func:`pump_until_disconnect` sends a streamed body only while the client is there (:class:`EventStream`
and the daemon's pass-through).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 5.0
_POLL_S = 0.005


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Connection bounds of a server: ``None`` for no bound (see the module docstring)."""

    limit_concurrency: int | None = None
    header_timeout_s: float | None = None
    timeout_keep_alive: int = 5

    def __post_init__(self) -> None:
        if self.limit_concurrency is not None and self.limit_concurrency < 1:
            raise ValueError("limit_concurrency must be >= 1")
        if self.header_timeout_s is not None and not self.header_timeout_s > 0:
            raise ValueError("header_timeout_s must be > 0")

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"limit_concurrency": self.limit_concurrency,
                                   "timeout_keep_alive": self.timeout_keep_alive}
        if self.header_timeout_s is not None:
            options["http"] = header_timeout_protocol(self.header_timeout_s)
        return options


class _HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers do not arrive in time.

    The clock starts when the connection opens, or when the first byte of a next request on a kept-alive
    connection arrives; trickling bytes does not restart it. Once the headers are in, the request runs
    without this bound (the application bounds its body read).
    """

    header_timeout_s = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the headers are in: a request is being served
        else:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()


def header_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """The h11 protocol class with a header read timeout of ``seconds``."""
    return type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,), {"header_timeout_s": seconds})


@contextlib.asynccontextmanager
async def serve_in_process(app: Any, host: str = LOOPBACK, port: int = 0, log_level: str = "warning",
                           limits: ServerLimits | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (port 0: a free one) while the block runs; yield the base URL."""
    # proto must be IPPROTO_TCP: asyncio only disables Nagle (TCP_NODELAY) on sockets that say they are TCP,
    # and without it every response waits ~40 ms on delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1, ws="none", **(limits or ServerLimits()).uvicorn_options())
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped before it started")
                await asyncio.sleep(_POLL_S)
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_TIMEOUT_S)
        except TimeoutError:
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        sock.close()


def serve_forever(app: Any, host: str = LOOPBACK, port: int = 8000, log_level: str = "info",
                  limits: ServerLimits | None = None) -> None:
    """Serve ``app`` until interrupted (blocking; for command-line use)."""
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="off",
                **(limits or ServerLimits()).uvicorn_options())


class StreamCut(enum.Enum):
    """How a stream may end early on purpose (fault injection): connection closed, or body ended cleanly."""

    DROP = "drop_stream"
    END = "stream_ends_early"


StreamChunks = AsyncGenerator[bytes | StreamCut, None]
"""The body of an :class:`EventStream`: byte chunks, optionally ended by a :class:`StreamCut`."""


class EventStream(Response):
    """A server-sent-events response that stops its generator when the client disconnects.

    Starlette's ``StreamingResponse`` keeps generating for a client that went away (ASGI 2.4 servers); here
    a watcher on ``receive`` cancels the generation, so its ``finally`` (e.g. releasing a batch slot) runs
    at once. A :data:`StreamCut.DROP` item closes the connection without finishing the body.
    """

    media_type = "text/event-stream"

    def __init__(self, chunks: StreamChunks) -> None:
        super().__init__(headers={"cache-control": "no-cache"})
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
        error = await pump_until_disconnect(self._pump(send), receive)
        if error is not None:
            raise error

    async def _pump(self, send: Send) -> None:
        try:
            async for data in self.chunks:
                if data is StreamCut.DROP:
                    return
                if data is StreamCut.END:
                    break
                if isinstance(data, bytes):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.chunks.aclose()


async def pump_until_disconnect(pump: Coroutine[Any, Any, None], receive: Receive) -> BaseException | None:
    """Run ``pump`` (a response's body being sent) until it ends or the client disconnects, whichever comes
    first: the other is cancelled and awaited. Returns the error ``pump`` ended with (``None``: none)."""
    pumping = asyncio.ensure_future(pump)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({pumping, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, watch):
            task.cancel()
        await asyncio.gather(pumping, watch, return_exceptions=True)
    return pumping.exception() if pumping.done() and not pumping.cancelled() else None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class BodyRefused(Exception):
    """A request body a server refuses: ``status`` and ``code`` for its answer, the message as its text."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The request body, or ``None`` once it exceeds ``limit`` bytes (read no further; a larger declared
    ``content-length`` is not read at all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
    return b"".join(parts)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole request body within ``timeout_s``; :class:`BodyRefused` 413 past ``limit`` bytes, 408 when late."""
    try:
        async with asyncio.timeout(timeout_s):
            raw = await read_capped(request, limit)
    except TimeoutError:
        raise BodyRefused(408, f"request body not received within {timeout_s:g} s", "body_timeout") from None
    if raw is None:
        raise BodyRefused(413, f"request body exceeds {limit} bytes", "too_large")
    return raw


async def buffered_request(receive: Receive) -> tuple[bytes, Receive]:
    """An ASGI request's whole body, and a ``receive`` for the app it is passed on to: the body once, as one
    message, then whatever ``receive`` says next (a disconnect)."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(parts)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
