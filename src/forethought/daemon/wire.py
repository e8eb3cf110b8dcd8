"""The three model APIs the daemon relays, and how one response of each is read into forethought's events.

:class:`Wire` names the API a request speaks (by its path): OpenAI Chat Completions, OpenAI Responses or
Anthropic Messages. For a streamed response :func:`decoder_for` gives the project's own decoder of that
stream (:class:`~forethought.llm.responses.ResponsesDecoder`, :class:`~forethought.llm.anthropic.AnthropicDecoder`,
or :class:`ChatChunkDecoder` over the same :class:`~forethought.llm.chat.ToolCallAssembler`), so a call is
known the moment its arguments close; for a whole (non-streamed) response :func:`whole_events` gives the
same events from the JSON body. Reading never changes what is relayed: it runs beside the relay.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Protocol

from forethought.llm.anthropic import AnthropicDecoder
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.events import LLMEvent, MessageDone, Usage
from forethought.llm.responses import ResponsesDecoder

__all__ = ["ChatChunkDecoder", "StreamDecoder", "Wire", "decoder_for", "whole_events"]


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


class ChatChunkDecoder:
    """Chat Completions chunks of one response -> events. The message ends at its finish reason (with the
    usage chunk that may follow it, or the stream's end)."""

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler()
        self._finish: str | None = None
        self._usage: Any = None
        self._id: str | None = None
        self.done = False

    def feed(self, event: dict[str, Any]) -> list[LLMEvent]:
        self._id = self._id or event.get("id")
        if event.get("usage") is not None:
            self._usage = event["usage"]
        out: list[LLMEvent] = []
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                out += self._assembler.add_text(str(delta["content"]))
            for tool in delta.get("tool_calls") or ():
                function = tool.get("function") or {}
                out += self._assembler.add_tool_delta(int(tool.get("index") or 0), tool.get("id"),
                                                      function.get("name"), function.get("arguments"))
            if choice.get("finish_reason") is not None and self._finish is None:
                self._finish = str(choice["finish_reason"])
                out += self._assembler.finish(self._finish)
        return out

    def end(self) -> list[LLMEvent]:
        """The stream ended (``[DONE]`` or the body's end): the message is done if it had a finish reason."""
        if self._finish is None or self.done:
            return []
        self.done = True
        return [MessageDone(self._finish, _chat_usage(self._usage), self._id)]


def _chat_usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                 int(usage.get("total_tokens") or 0), int(cached or 0))


def decoder_for(wire: Wire) -> ResponsesDecoder | AnthropicDecoder | ChatChunkDecoder:
    """A fresh decoder of one streamed response of ``wire``."""
    if wire is Wire.RESPONSES:
        return ResponsesDecoder()
    if wire is Wire.MESSAGES:
        return AnthropicDecoder()
    return ChatChunkDecoder()


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
