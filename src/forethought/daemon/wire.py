"""The three model APIs the daemon relays, and how one response of each is read into forethought's events.

:class:`Wire` names the API a request speaks (by its path): OpenAI Chat Completions, OpenAI Responses or
Anthropic Messages. For a streamed response :func:`decoder_for` gives the project's own decoder of that
stream (:class:`~forethought.llm.responses.ResponsesDecoder`, :class:`~forethought.llm.anthropic.AnthropicDecoder`,
or the stream tap's :class:`~forethought.llm.chat_chunks.ChatChunkDecoder`), so a call is known the moment its
arguments close, and :func:`stream_ended` what the stream's end says; for a whole (non-streamed) response
:func:`whole_events` gives the same events from the JSON body. Reading never changes what is relayed: it runs
beside the relay.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Protocol

from forethought.llm.anthropic import AnthropicDecoder
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.chat_chunks import ChatChunkDecoder
from forethought.llm.events import LLMEvent, MessageDone
from forethought.llm.responses import ResponsesDecoder

__all__ = ["ChatChunkDecoder", "StreamDecoder", "Wire", "decoder_for", "stream_ended", "whole_events"]


class Wire(enum.StrEnum):
    """A model API, by the path its requests are sent to."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"

    @classmethod
    def of_path(cls, path: str) -> Wire | None:
        """The API a request path speaks (``/v1/messages`` ...), or ``None`` for any other path."""
        trimmed = path.rstrip("/")
        if trimmed.endswith("/chat/completions"):
            return cls.CHAT
        if trimmed.endswith("/responses"):
            return cls.RESPONSES
        if trimmed.endswith("/messages"):
            return cls.MESSAGES
        return None


class StreamDecoder(Protocol):
    """One streamed response's JSON events -> forethought events; ``done`` once the message has ended."""

    done: bool

    def feed(self, event: dict[str, Any]) -> list[LLMEvent]: ...


def decoder_for(wire: Wire) -> ResponsesDecoder | AnthropicDecoder | ChatChunkDecoder:
    """A fresh decoder of one streamed response of ``wire`` (a Chat one closes its open calls at the finish
    reason: the daemon acts on them before the usage chunk and ``[DONE]``)."""
    if wire is Wire.RESPONSES:
        return ResponsesDecoder()
    if wire is Wire.MESSAGES:
        return AnthropicDecoder()
    return ChatChunkDecoder(close_at_finish=True)


def stream_ended(decoder: StreamDecoder) -> list[LLMEvent]:
    """The events of a stream's end (``[DONE]`` or the body's end): a Chat message ends there, the other
    APIs' at their terminal event (nothing here)."""
    return decoder.end() if isinstance(decoder, ChatChunkDecoder) else []


def whole_events(wire: Wire, body: Mapping[str, Any]) -> list[LLMEvent]:
    """The events of a whole (non-streamed) response body: its tool calls, closed, and the message's end."""
    assembler = ToolCallAssembler()
    out: list[LLMEvent] = []
    calls: list[tuple[str | None, str | None, str]] = []
    reason = "stop"
    if wire is Wire.CHAT:
        choices = body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        reason = str(choices[0].get("finish_reason") or "stop")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            calls.append((call.get("id"), function.get("name"), str(function.get("arguments") or "")))
    elif wire is Wire.RESPONSES:
        for item in body.get("output") or ():
            if isinstance(item, dict) and item.get("type") == "function_call":
                calls.append((item.get("call_id"), item.get("name"), str(item.get("arguments") or "")))
        reason = "tool_calls" if calls else "stop"
    else:
        for block in body.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append((block.get("id"), block.get("name"), json.dumps(block.get("input") or {})))
        reason = "tool_calls" if body.get("stop_reason") == "tool_use" else "stop"
    for index, (call_id, name, arguments) in enumerate(calls):
        out += assembler.add_tool_delta(index, call_id, name, arguments or "{}")
    out += assembler.finish(reason)
    out.append(MessageDone(reason, None, body.get("id") if isinstance(body.get("id"), str) else None))
    return out
