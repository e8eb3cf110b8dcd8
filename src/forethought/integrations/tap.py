"""A tap for your own loop: wrap the stream you already have, get its events unchanged, calls started early.

::

    stream = await client.chat.completions.create(model=..., messages=..., tools=..., stream=True)
    tapped = tap(stream, session)
    async for chunk in tapped:      # the SDK's own chunks, unchanged
        ...                         # your code, as before
    for call in tapped.calls:       # the message's calls in the model's order
        result = await session.execute(call)   # served from the early run when it matched

:func:`tap` accepts the ``openai`` SDK's streamed Chat Completions (``ChatCompletionChunk`` values, or
the ``chat.completions.stream()`` helper's events), its Responses API stream events (``create(stream=
True)`` or ``responses.stream()``), and the ``anthropic`` SDK's Messages stream (``create(stream=True)``
or ``messages.stream()``); plain JSON dicts of the same shapes work too. The format is recognised from
the first event.

Each event is decoded (by the same decoders the forethought clients use) into call starts and closes,
and an :class:`~forethought.llm.dispatch.EarlyDispatch` in speculating mode (the agent's ordering logic,
``authoritative=False``) starts every closed call as a speculation at the moment its arguments close:
effects, snapshots and write epochs keep it equivalent to serial. Your ``session.execute(call)`` claims
it. A stream that raises, ends without finishing, or that you stop reading drops every speculation of the
turn (``session.end_turn``), as a serial run that never saw the message end would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought.llm.anthropic import AnthropicDecoder
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.dispatch import EarlyDispatch
from forethought.llm.events import LLMEvent, MessageDone, TextDelta, ToolCallClosed, ToolCallStarted
from forethought.llm.responses import ResponsesDecoder, field

_ANTHROPIC_TYPES = frozenset({"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                              "message_delta", "message_stop", "ping", "text", "input_json", "citation",
                              "thinking", "signature"})


@dataclass(frozen=True, slots=True)
class TappedCall:
    """One tool call of the tapped message: its id and name, and its ``call`` (``None`` when malformed)."""

    index: int
    id: str
    name: str
    call: ToolCall | None
    raw: str
    error: str | None = None


class _ChatDecoder:
    """Chat Completions chunks (SDK objects or dicts) -> events; the message ends when the stream does."""

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.done = False

    def feed(self, chunk: Any) -> list[LLMEvent]:
        if field(chunk, "type") == "chunk":  # the ``chat.completions.stream()`` helper wraps each chunk
            chunk = field(chunk, "chunk")
        elif field(chunk, "type") is not None:
            return []  # the helper's derived events repeat what the chunk said
        events: list[LLMEvent] = []
        for choice in field(chunk, "choices") or ():
            if (field(choice, "index") or 0) != 0:
                continue
            delta = field(choice, "delta")
            if delta is not None:
                content = field(delta, "content")
                if content:
                    events += self._assembler.add_text(content)
                for tool in field(delta, "tool_calls") or ():
                    function = field(tool, "function")
                    events += self._assembler.add_tool_delta(int(field(tool, "index") or 0), field(tool, "id"),
                                                             field(function, "name"), field(function, "arguments"))
            if field(choice, "finish_reason") is not None:
                self.finish_reason = str(field(choice, "finish_reason"))
        return events

    def end(self) -> list[LLMEvent]:
        if self.finish_reason is None:
            return []
        self.done = True
        return [*self._assembler.finish(self.finish_reason), MessageDone(self.finish_reason)]


_Decoder = _ChatDecoder | ResponsesDecoder | AnthropicDecoder


def _decoder_for(event: Any) -> _Decoder:
    kind = field(event, "type")
    if isinstance(kind, str) and (kind.startswith("response.") or kind == "error"):
        return ResponsesDecoder()
    if kind in _ANTHROPIC_TYPES:
        return AnthropicDecoder()
    return _ChatDecoder()


class StreamTap:
    """The tapped stream: iterate it for the SDK's events; then read ``calls`` (see :func:`tap`)."""

    def __init__(self, stream: AsyncIterable[Any], session: Session, *, speculate: bool = True) -> None:
        self._stream = stream
        self.session = session
        self.speculate = speculate
        self._dispatch = EarlyDispatch(session, enabled=speculate, authoritative=False)
        self._decoder: _Decoder | None = None
        self._text: list[str] = []
        self._iterated = False
        self.finished = False
        """The message ended normally (its finish reason or terminal event arrived)."""
        self.finish_reason: str | None = None

    @property
    def text(self) -> str:
        """The message's text so far."""
        return "".join(self._text)

    @property
    def tool_calls(self) -> list[TappedCall]:
        """Every closed call of the message in the model's order (malformed ones with ``error`` set)."""
        return [TappedCall(p.index, p.id, p.name, p.call, p.raw, p.error) for p in self._dispatch.ordered()
                if p.call is not None or p.error is not None]

    @property
    def calls(self) -> list[ToolCall]:
        """The well-formed calls of the message in the model's order, ready for ``session.execute``."""
        return [c.call for c in self.tool_calls if c.call is not None]

    def _handle(self, events: list[LLMEvent]) -> None:
        for event in events:
            if isinstance(event, TextDelta):
                self._text.append(event.text)
            elif isinstance(event, ToolCallStarted | ToolCallClosed):
                self._dispatch.feed(event)
            elif isinstance(event, MessageDone):
                self.finished = True
                self.finish_reason = event.finish_reason

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._iterated:
            raise RuntimeError("a StreamTap can be iterated once")
        self._iterated = True
        return self._events()

    async def _events(self) -> AsyncIterator[Any]:
        completed = False
        try:
            dispatch = self._dispatch
            async for event in self._stream:
                if self._decoder is None:
                    self._decoder = _decoder_for(event)
                before = dispatch.speculated + dispatch.early
                self._handle(self._decoder.feed(event))
                if dispatch.speculated + dispatch.early != before:
                    # Let the new runs start before the caller goes on: an SDK stream reading buffered data
                    # never suspends, and a claim finds a speculation that never ran as good as missing.
                    await asyncio.sleep(0)
                yield event
            if isinstance(self._decoder, _ChatDecoder):
                self._handle(self._decoder.end())
            completed = self.finished
        finally:
            if not completed:
                await self._dispatch.abandon()

    async def results(self) -> list[Any]:
        """Convenience: ``await session.execute(call)`` for each well-formed call, in order."""
        return [await self.session.execute(call) for call in self.calls]


def tap(stream: AsyncIterable[Any], session: Session, *, speculate: bool = True) -> StreamTap:
    """Wrap ``stream`` (see the module docstring); ``speculate=False`` passes it through and starts nothing."""
    return StreamTap(stream, session, speculate=speculate)
