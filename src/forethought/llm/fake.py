"""A scripted in-process :class:`~forethought.llm.chat.LLMClient` for unit tests of its consumers.

:class:`FakeLLMClient` replays prepared event sequences, one per ``stream`` call, and records every
request it received. A script entry may also be an exception, raised after the events before it (e.g. a
:class:`~forethought.errors.StreamDroppedError` mid-message). :func:`scripted_message` builds the events a
real client would emit for a message with text and tool calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall
from forethought.errors import LLMError
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    Usage,
)

ScriptItem = LLMEvent | BaseException
Script = Sequence[ScriptItem]


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """One ``stream`` call as the fake received it."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    extra: dict[str, Any] = field(default_factory=dict)


def scripted_message(text: str = "", calls: Sequence[ToolCall] = (), finish_reason: str | None = None,
                     usage: Usage | None = None) -> tuple[LLMEvent, ...]:
    """The events of one well-formed message: its text, then each call started, streamed and closed."""
    events: list[LLMEvent] = [TextDelta(text)] if text else []
    for index, call in enumerate(calls):
        raw = json.dumps(dict(call.arguments), ensure_ascii=False)
        call_id = f"call_{index}"
        events += [ToolCallStarted(index, call_id, call.name), ToolCallArgumentsDelta(index, raw),
                   ToolCallClosed(index, call_id, call.name, dict(call.arguments), raw)]
    reason = finish_reason or ("tool_calls" if calls else "stop")
    events.append(MessageDone(reason, usage))
    return tuple(events)


class FakeLLMClient:
    """Replays ``scripts`` in order (or asks ``respond`` for each request); records ``requests``.

    Between events it yields to the event loop once, so consumers interleave as with a real stream.
    """

    def __init__(self, scripts: Iterable[Script] = (),
                 respond: Callable[[FakeRequest], Script] | None = None) -> None:
        self._scripts = list(scripts)
        self._respond = respond
        self.requests: list[FakeRequest] = []

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        """Replay the next script; raise :class:`LLMError` when none is left."""
        request = FakeRequest(model, list(messages), list(tools) if tools is not None else None, dict(extra))
        self.requests.append(request)
        if self._respond is not None:
            script = self._respond(request)
        elif self._scripts:
            script = self._scripts.pop(0)
        else:
            raise LLMError(f"FakeLLMClient has no script left for request {len(self.requests)}")
        for item in script:
            await asyncio.sleep(0)
            if isinstance(item, BaseException):
                raise item
            yield item
