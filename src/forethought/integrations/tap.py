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
turn (``session.end_turn``), as a serial run that never saw the message end would. A call of a tool the
session does not hold (or an item your loop runs, such as a Responses ``custom_tool_call``) is run by your
loop with an effect the session cannot see: no later call of that message starts early, and no read of the
session speculated before you tap its next stream is served (:mod:`forethought.llm.dispatch`). Each tapped
stream renews the session's turn budget.

Given the conversation (``tap(stream, session, messages=messages)``), the tap also guesses the step's calls
before the model streams them (:mod:`forethought.integrations.foresight`: the pattern predictor, learning
online from the conversations it sees, and a speculator model if you configure one), so likely calls start
at step start; the model's own calls then claim them as before.

The tap raises nothing that plain iteration of the stream would not: an ``error`` or ``response.failed``
event is yielded to you as the SDK yields it and recorded in :attr:`StreamTap.error` (the message did not
finish: its speculations are dropped); Chat Completions chunks are read as tolerantly as the SDK passes
them on (:class:`~forethought.llm.chat_chunks.ChatChunkDecoder`, which the daemon reads with too: a
tool-call index that is not an integer, arguments sent as an object, ``tool_calls`` as one object, every
call numbered 0 with its own id: each call is kept, none is merged into another), and an event no decoder
understands ends decoding with :attr:`StreamTap.error` set instead of an exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought.integrations.foresight import Foresight, foresight_for
from forethought.llm.anthropic import AnthropicDecoder
from forethought.llm.chat_chunks import ChatChunkDecoder
from forethought.llm.dispatch import EarlyDispatch
from forethought.llm.events import (
    ClientItem,
    LLMEvent,
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
)
from forethought.llm.fields import field_of as _get
from forethought.llm.responses import ResponsesDecoder

log = logging.getLogger(__name__)

_ANTHROPIC_TYPES = frozenset({"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                              "message_delta", "message_stop", "ping", "text", "input_json", "citation",
                              "thinking", "signature"})
_ERROR_EVENTS = frozenset({"error", "response.failed"})
"""Events that say the message failed: passed on to the caller unchanged (the SDKs yield them)."""


@dataclass(frozen=True, slots=True)
class TappedCall:
    """One tool call of the tapped message: its id and name, and its ``call`` (``None`` when malformed)."""

    index: int
    id: str
    name: str
    call: ToolCall | None
    raw: str
    error: str | None = None


_Decoder = ChatChunkDecoder | ResponsesDecoder | AnthropicDecoder


def _decoder_for(kind: str | None) -> _Decoder:
    if kind is not None and kind.startswith("response."):
        return ResponsesDecoder()
    if kind in _ANTHROPIC_TYPES:
        return AnthropicDecoder()
    return ChatChunkDecoder()


def _error_message(event: Any, kind: str) -> str:
    """What an ``error`` (Responses, Anthropic) or ``response.failed`` event says went wrong."""
    for holder in (event, _get(event, "error"), _get(_get(event, "response"), "error")):
        message = _get(holder, "message")
        if isinstance(message, str) and message:
            return f"{kind}: {message}"
    return kind


class StreamTap:
    """The tapped stream: iterate it for the SDK's events; then read ``calls`` (see :func:`tap`)."""

    def __init__(self, stream: AsyncIterable[Any], session: Session, *, speculate: bool = True,
                 messages: Any = None, predict: bool | Foresight = True) -> None:
        self._stream = stream
        self.session = session
        self.speculate = speculate
        self._dispatch = EarlyDispatch(session, enabled=speculate, authoritative=False)
        self.foresight = foresight_for(predict, speculate) if messages is not None else None
        """Who guesses this step's calls from ``messages`` (``None``: only the stream's own calls start early)."""
        if self.foresight is not None:
            self.foresight.begin(session, messages)
        self._decoder: _Decoder | None = None
        self._text: list[str] = []
        self._iterated = False
        self.finished = False
        """The message ended normally (its finish reason or terminal event arrived)."""
        self.finish_reason: str | None = None
        self.error: str | None = None
        """Why the message did not finish: the stream's own ``error`` / ``response.failed`` event (passed on
        to you unchanged, as plain iteration would), or an event the tap could not decode. From then on
        nothing more of the stream is decoded and every speculation of the message is dropped."""

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
            elif isinstance(event, ClientItem):
                self._dispatch.feed(event)
            elif isinstance(event, ToolCallStarted | ToolCallClosed):
                if isinstance(event, ToolCallStarted) and self.foresight is not None:
                    self.foresight.streamed(self.session, event)
                self._dispatch.feed(event)
            elif isinstance(event, ToolCallArgumentsDelta) and self.foresight is not None:
                self.foresight.streamed(self.session, event)
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
                before = dispatch.speculated + dispatch.early
                self._take(event)
                if dispatch.speculated + dispatch.early != before:
                    # Let the new runs start before the caller goes on: an SDK stream reading buffered data
                    # never suspends, and a claim finds a speculation that never ran as good as missing.
                    await asyncio.sleep(0)
                yield event
            decoder = self._decoder
            if isinstance(decoder, ChatChunkDecoder) and self.error is None:
                self._decode(decoder.end)
            completed = self.finished and self.error is None
        finally:
            if self.foresight is not None:
                self.foresight.end(self.session)
            if not completed:
                await self._dispatch.abandon()

    def _take(self, event: Any) -> None:
        """Decode one event of the stream (never raising: a failure is recorded in :attr:`error`)."""
        if self.error is not None:
            return
        kind = _get(event, "type")
        if not isinstance(kind, str):
            kind = None
        if kind in _ERROR_EVENTS:
            self.error = _error_message(event, str(kind))
            return
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = _decoder_for(kind)
        self._decode(lambda: decoder.feed(event))

    def _decode(self, step: Callable[[], list[LLMEvent]]) -> None:
        try:
            self._handle(step())
        except Exception as exc:  # an event no decoder expected: reported, never raised into the caller's loop
            self.error = f"the tap could not decode the stream: {type(exc).__name__}: {exc}"
            log.warning("%s; the message's speculations are dropped", self.error)

    async def results(self) -> list[Any]:
        """Convenience: ``await session.execute(call)`` for each well-formed call, in order."""
        return [await self.session.execute(call) for call in self.calls]


def tap(stream: AsyncIterable[Any], session: Session, *, speculate: bool = True, messages: Any = None,
        predict: bool | Foresight = True) -> StreamTap:
    """Wrap ``stream`` (see the module docstring); ``speculate=False`` passes it through and starts nothing.

    ``messages``: the conversation this step was asked with (Chat Completions messages, Responses input items
    or Anthropic turns). Given, the step's likely calls are guessed at once, from what was learned of earlier
    conversations (``predict``: ``True`` the default :class:`~forethought.integrations.foresight.Foresight`,
    one you configured, or ``False``: only the stream's own calls start early)."""
    return StreamTap(stream, session, speculate=speculate, messages=messages, predict=predict)
