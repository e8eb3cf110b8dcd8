"""HTTP plumbing for forethought's servers: running a Starlette app under uvicorn, and streaming SSE bodies.

:func:`serve_in_process` binds a socket on ``127.0.0.1`` port 0 itself (so the port is known before the
server starts and nothing races for it), runs uvicorn as a task on the current event loop, yields the base
URL (``http://127.0.0.1:PORT``), and shuts the server down on exit. Tests, the bench and the demo use it
to talk to real servers over real HTTP. :func:`serve_forever` is the blocking form for ``forethought
serve-model`` and the gateway. :class:`EventStream` is the SSE response both servers stream with.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import uvicorn
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 5.0
_POLL_S = 0.005


@contextlib.asynccontextmanager
async def serve_in_process(app: Any, host: str = LOOPBACK, port: int = 0,
                           log_level: str = "warning") -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (port 0: a free one) while the block runs; yield the base URL."""
    # proto must be IPPROTO_TCP: asyncio only disables Nagle (TCP_NODELAY) on sockets that say they are TCP,
    # and without it every response waits ~40 ms on delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1, ws="none")
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


def serve_forever(app: Any, host: str = LOOPBACK, port: int = 8000, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (blocking; for command-line use)."""
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="off")


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
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(self._watch(receive))
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, watch):
                task.cancel()
            await asyncio.gather(pump, watch, return_exceptions=True)
        error = pump.exception() if pump.done() and not pump.cancelled() else None
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

    @staticmethod
    async def _watch(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
