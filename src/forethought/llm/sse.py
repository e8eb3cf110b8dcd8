"""Server-sent events: one parser for every streamed body forethought reads (the client and the gateway).

Three layers, each usable alone:

* :class:`SSEDecoder` (no I/O) turns bytes, fed in pieces of any size, into :class:`SSEEvent` values, per
  the WHATWG event-stream rules: lines end in LF, CR or CRLF (also when the CR and the LF arrive in
  different pieces); a line starting with ``:`` is a comment; ``data`` lines of one event are joined with
  ``\\n``; an empty line dispatches the event (nothing is dispatched without data); a leading BOM is
  dropped; an event not closed by an empty line when the body ends is discarded. Lines are split on the
  bytes, before decoding, so characters such as U+2028 or U+0085 inside a JSON string do not break a line
  (a text-level ``splitlines`` would). No line may exceed ``max_line_bytes`` (terminator excluded); a
  longer one raises :class:`~forethought.errors.UpstreamError` as soon as the limit is passed, so a
  stream without line ends cannot grow the buffer without bound.
* :func:`aiter_events` reads an ``httpx2`` response's body through a decoder. A transport failure
  mid-body raises :class:`~forethought.errors.StreamDroppedError`; any other HTTP failure while reading
  raises :class:`~forethought.errors.UpstreamError`.
* :func:`aiter_json` is the OpenAI-style stream: each event's data is one JSON object, up to the
  ``[DONE]`` sentinel (or the body's end). Data that is not JSON, or not an object, raises
  :class:`~forethought.errors.UpstreamError`. Each chunk comes with its data text, so a relay can forward
  an unchanged chunk as it came; :func:`json_events` gives the objects alone. An ``error`` field is left
  to the caller (the client raises, the gateway forwards it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2

from forethought.errors import StreamDroppedError, UpstreamError

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
"""Generous: a gateway chunk carries a whole tool output on one line."""

DONE = "[DONE]"
"""The data of the event that ends an OpenAI-style stream."""

_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\n", b"\r")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its data lines joined by ``\\n``, its ``event`` type and last ``id`` if sent."""

    data: str
    event: str | None = None
    id: str | None = None


class SSEDecoder:
    """Incremental event-stream decoder: :meth:`feed` bytes as they come, then :meth:`close` at the end."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._pending: list[bytes] = []  # the start of a line whose end has not arrived
        self._pending_len = 0
        self._skip_lf = False  # the last piece ended in CR: an LF that starts the next one ends no line
        self._started = False  # a leading BOM has been looked for
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._closed = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events that ``chunk`` completes (often none, sometimes several)."""
        if self._closed:
            raise ValueError("feed() after close()")
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
                if not chunk:
                    return []
        complete = chunk.endswith(_LINE_ENDS)
        if not complete and b"\n" not in chunk and b"\r" not in chunk:
            self._hold(chunk)
            return []
        if self._pending:
            chunk = b"".join((*self._pending, chunk))
            self._pending.clear()
            self._pending_len = 0
        if not self._started:
            self._started = True
            chunk = chunk.removeprefix(_BOM)
        lines = chunk.splitlines()  # on bytes: LF, CR and CRLF only
        if complete:
            self._skip_lf = chunk.endswith(b"\r")
        else:
            self._hold(lines.pop())
        events: list[SSEEvent] = []
        data, limit = self._data, self.max_line_bytes
        for raw in lines:  # one loop, common cases first: this is the client's per-chunk cost
            if len(raw) > limit:
                self._check(len(raw))
            if raw.startswith(b"data: "):
                data.append(raw[6:].decode("utf-8", "replace"))
            elif not raw:
                if data:
                    events.append(SSEEvent("\n".join(data), self._event or None, self._id))
                    data.clear()
                self._event = None
            elif raw.startswith(b"data:"):
                data.append(raw[5:].decode("utf-8", "replace"))
            elif not raw.startswith(b":"):  # a line starting with ':' is a comment (keep-alive)
                self._field(raw.decode("utf-8", "replace"))
        return events

    def close(self) -> list[SSEEvent]:
        """End of the body: an unfinished last line and an undispatched event are discarded (always ``[]``)."""
        if self._closed:
            return []
        self._closed = True
        self._pending.clear()  # an unfinished line can only add to an event that no empty line closes
        self._pending_len = 0
        self._data.clear()
        return []

    def _hold(self, part: bytes) -> None:
        self._pending.append(part)
        self._pending_len += len(part)
        self._check(self._pending_len)

    def _check(self, length: int) -> None:
        if length > self.max_line_bytes:
            raise UpstreamError(f"stream line longer than {self.max_line_bytes} bytes (max_line_bytes)")

    def _field(self, line: str) -> None:
        """A line other than ``data:``, an empty line or a comment."""
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":  # "data" without a colon: an empty data line
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        # ``retry`` and unknown fields are ignored: nothing here reconnects



async def aiter_events(response: httpx2.Response, *,
                       max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> AsyncIterator[SSEEvent]:
    """The events of ``response``'s body (content-decoded), read as it arrives."""
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    with _read_errors():
        async for chunk in response.aiter_bytes():
            for event in decoder.feed(chunk):
                yield event
    for event in decoder.close():
        yield event


@contextmanager
def _read_errors() -> Iterator[None]:
    """Failures reading a body, as forethought's errors (a consumer's own exceptions never pass here)."""
    try:
        yield
    except httpx2.TransportError as exc:
        raise StreamDroppedError(f"stream dropped mid-response: {exc!r}") from exc
    except httpx2.HTTPError as exc:
        raise UpstreamError(f"unreadable stream: {exc!r}") from exc


def parse_json_data(data: str) -> dict[str, Any]:
    """One event's data as a JSON object, or :class:`~forethought.errors.UpstreamError`."""
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise UpstreamError(f"unparsable stream chunk: {exc} in {data[:200]!r}") from exc
    if not isinstance(chunk, dict):
        raise UpstreamError(f"stream chunk is not a JSON object: {data[:200]!r}")
    return chunk


DRAIN_TIMEOUT_S = 0.25
MAX_DRAIN_BYTES = 64 << 10
"""What is read of a body after its ``[DONE]`` at most: the rest of a well-formed body is a few bytes, and
reading it to its end lets the HTTP connection go back to the pool (else it is closed and the next request
pays a new connection)."""


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a body after its ``[DONE]`` (bounded in bytes and time), so the connection can be
    reused; a server that keeps the body open past it is left (the connection is then closed, as before)."""
    drained = 0
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            async for chunk in chunks:
                drained += len(chunk)
                if drained > MAX_DRAIN_BYTES:
                    return
    except TimeoutError:
        return


async def aiter_json(response: httpx2.Response, *,
                     max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> AsyncIterator[tuple[dict[str, Any], str]]:
    """The JSON objects of an OpenAI-style stream up to ``[DONE]``, each with its data text."""
    # the decoder is driven here rather than through aiter_events: one generator less per chunk (the
    # client's per-request cost is mostly this loop)
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    with _read_errors():
        chunks = response.aiter_bytes()
        async for chunk in chunks:
            for event in decoder.feed(chunk):
                if event.data == DONE:
                    await _drain(chunks)
                    return
                yield parse_json_data(event.data), event.data


async def json_events(response: httpx2.Response, *,
                      max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> AsyncIterator[dict[str, Any]]:
    """:func:`aiter_json` without the data text: the JSON objects up to ``[DONE]`` or the body's end."""
    async for chunk, _ in aiter_json(response, max_line_bytes=max_line_bytes):
        yield chunk
