"""Reading a relayed response beside the relay: one parse, never on the path of the client's bytes.

The relay hands every chunk it forwards to :meth:`ResponseObserver.feed`, which only queues it (no parsing
on the relay's path); a task of the observer's own decodes the queue once: content decoding (identity,
``gzip`` or ``deflate``), the one SSE parser (:class:`~forethought.llm.sse.SSEDecoder`), one JSON parse per
event and the API's decoder (:mod:`forethought.daemon.wire`). Each event goes to a :class:`Watcher` in order:
the moment a call's arguments close, the watcher knows.

A response the observer cannot read (an encoding it does not know, a malformed event, an ``error`` event, a
body cut off before the message ended) is reported once as *unreadable*: the watcher must then assume the
message may hold any call (:mod:`forethought.daemon.dispatch` fails closed). The relay is never told: what
the client receives is whatever the upstream sent. A client that leaves before the message ended is reported
as *left* instead: the relay queues each chunk before it sends it, so the observer has read everything the
client received (and reports what it could not read as unreadable), and the client never got the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zlib
from collections.abc import Awaitable
from typing import Any, Protocol

from forethought.daemon.wire import Wire, decoder_for, stream_ended, whole_events
from forethought.errors import ForethoughtError
from forethought.llm.events import LLMEvent, MessageDone
from forethought.llm.sse import DONE, SSEDecoder, parse_json_data

__all__ = ["ResponseObserver", "Watcher"]

log = logging.getLogger(__name__)
MAX_WHOLE_BODY = 64 << 20
"""A non-streamed body larger than this is not read (the relay still passes it on)."""
_END = object()
_LEFT = object()


class Watcher(Protocol):
    """Who is told what one response says, in order."""

    def event(self, event: LLMEvent) -> None:
        """One event of the message (a call started, its arguments closed, the message done, ...)."""

    def unreadable(self, why: str) -> None:
        """The response could not be read to its end (``why`` names the cause, never its content)."""

    def left(self, why: str) -> None:
        """The client left before the message ended, having received only what was read so far."""


class ResponseObserver:
    """Decodes one relayed response off the relay's path and tells a :class:`Watcher` what it says."""

    def __init__(self, wire: Wire, watcher: Watcher, *, streamed: bool, content_encoding: str = "",
                 ready: Awaitable[Any] | None = None) -> None:
        self.wire = wire
        self.watcher = watcher
        self.streamed = streamed
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ready = ready
        self._encoding = content_encoding.strip().lower()
        self._task: asyncio.Task[None] | None = None
        self.failed: str | None = None
        """Why the response was unreadable (``None``: read to its end, or not yet)."""
        self.finished = False
        """Whether the message ended normally (its terminal event, or a whole body read)."""

    def start(self) -> None:
        """Start decoding (the relay may feed before or after)."""
        self._task = asyncio.create_task(self._run())

    def feed(self, chunk: bytes) -> None:
        """A chunk the relay forwarded (queued only: decoding happens in the observer's own task)."""
        if chunk:
            self._queue.put_nowait(chunk)

    def end(self, complete: bool, client_left: bool = False) -> None:
        """The relayed body ended: ``complete`` when the upstream finished it, ``False`` when it broke or (with
        ``client_left``) the client left first."""
        self._queue.put_nowait(_END if complete else _LEFT if client_left else None)

    async def wait(self) -> None:
        """Until every queued chunk has been read (for tests and for a step's end)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # --- decoding -------------------------------------------------------------------------------------

    async def _run(self) -> None:
        if self._ready is not None:
            await self._ready
        try:
            inflate = _inflater(self._encoding)
        except ValueError as exc:
            self._fail(str(exc))
            await self._drain()
            return
        try:
            if self.streamed:
                await self._read_stream(inflate)
            else:
                await self._read_whole(inflate)
        except (ForethoughtError, ValueError, TypeError, KeyError, AttributeError, zlib.error) as exc:
            self._fail(f"{type(exc).__name__} while reading the response")
            await self._drain()
        except Exception as exc:  # a watcher's bug must never reach the relay
            log.warning("forethought serve: reading a response failed: %s", type(exc).__name__)
            self._fail(type(exc).__name__)
            await self._drain()

    async def _drain(self) -> None:
        while (await self._queue.get()) not in (_END, None, _LEFT):
            pass

    def _fail(self, why: str) -> None:
        if self.failed is None and not self.finished:
            self.failed = why
            self.watcher.unreadable(why)

    async def _read_stream(self, inflate: Any) -> None:
        decoder = decoder_for(self.wire)
        sse = SSEDecoder()
        while True:
            chunk = await self._queue.get()
            if chunk is None or chunk is _END or chunk is _LEFT:
                self._emit(stream_ended(decoder))
                if not decoder.done:
                    if chunk is _LEFT:
                        self._left("the client left before the message ended")
                    else:
                        self._fail("the stream ended before its message did" if chunk is _END else "the stream broke")
                return
            if decoder.done:
                continue
            data = inflate(chunk) if inflate is not None else chunk
            for event in sse.feed(data):
                if event.data == DONE:
                    self._emit(stream_ended(decoder))
                    continue
                parsed = parse_json_data(event.data)
                if self.wire is Wire.CHAT and parsed.get("error"):
                    raise ValueError("an error chunk")
                self._emit(decoder.feed(parsed))
                if decoder.done:
                    break

    async def _read_whole(self, inflate: Any) -> None:
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await self._queue.get()
            if chunk is None:
                self._fail("the body broke")
                return
            if chunk is _LEFT:  # it may have had the whole body before its end reached us: fail closed
                self._fail("the client left before the body ended")
                return
            if chunk is _END:
                break
            data = inflate(chunk) if inflate is not None else chunk
            size += len(data)
            if size > MAX_WHOLE_BODY:
                self._fail("the body is too large to read")
                await self._drain()
                return
            parts.append(data)
        body = json.loads(b"".join(parts))
        if not isinstance(body, dict):
            raise ValueError("the body is not a JSON object")
        self._emit(whole_events(self.wire, body))

    def _left(self, why: str) -> None:
        if self.failed is None and not self.finished:
            self.failed = why
            self.watcher.left(why)

    def _emit(self, events: list[LLMEvent]) -> None:
        for event in events:
            if isinstance(event, MessageDone):
                self.finished = True
            self.watcher.event(event)


def _inflater(encoding: str) -> Any:
    """A function inflating one chunk of a body in ``encoding`` (``None``: nothing to inflate)."""
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS).decompress
    raise ValueError(f"content encoding {encoding!r} cannot be read")
