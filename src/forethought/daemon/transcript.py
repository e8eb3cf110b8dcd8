"""A model request read as a conversation: whose it is, what the user asked, which calls ran with what result.

Every request of a tool-using client carries the whole conversation so far (these APIs are stateless).
:func:`read_request` turns one request body of any of the three APIs into a :class:`Transcript`: the
conversation's key, the system text, the latest user text, the conversation as Chat Completions-shaped
messages, every call the model made with the result the client sent back
(:class:`~forethought.predictors.base.ObservedCall`), and the tools offered (name -> JSON schema). That
is what a predictor sees (:class:`~forethought.predictors.base.PredictionContext`).

The key names a conversation without naming its content: a keyed digest (a secret drawn per process) of
what stays fixed through a conversation: its API, its system text, its first message, and the client's
own conversation markers where it sends them (Anthropic ``metadata.user_id``, Responses
``prompt_cache_key``). Two conversations that start alike and carry no marker share a key; that costs only
guesses (the calls still run as the client asks).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall
from forethought.daemon.wire import Wire
from forethought.predictors.base import ObservedCall

__all__ = ["Transcript", "read_request"]

_SECRET = os.urandom(16)


@dataclass(frozen=True, slots=True)
class Transcript:
    """One request's conversation (see the module docstring)."""

    key: str
    wire: Wire
    model: str
    system: str
    user_message: str
    messages: tuple[Mapping[str, Any], ...]
    history: tuple[ObservedCall, ...]
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    streamed: bool = False


def _text(content: Any) -> str:
    """The text of a content value: a string, or the text parts of a list of blocks or parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping)
                       and part.get("type") in ("text", "input_text", "output_text", None))
    return "" if content is None else str(content)


def _list(value: Any) -> list[Any]:
    """``value`` if it is a list, else nothing (a body says what it says; what is malformed is left out)."""
    return value if isinstance(value, list) else []


def _schema(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str) and raw.strip():
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


class _Builder:
    """Accumulates messages and calls in order; results are matched to their calls by id."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.calls: list[tuple[str, ToolCall]] = []
        self.results: dict[str, tuple[str, bool]] = {}
        self.user = ""

    def user_text(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        if text:
            self.user = text

    def assistant(self, text: str, calls: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [{"id": call_id, "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(arguments)}}
                                     for call_id, name, arguments in calls]
            self.calls += [(call_id, ToolCall(name, arguments)) for call_id, name, arguments in calls]
        self.messages.append(message)

    def result(self, call_id: str, output: str, ok: bool) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        self.results[call_id] = (output, ok)

    def history(self) -> tuple[ObservedCall, ...]:
        """The calls that have a result, in the order the model made them."""
        out = []
        for call_id, call in self.calls:
            found = self.results.get(call_id)
            if found is not None:
                out.append(ObservedCall(call, found[0], found[1]))
        return tuple(out)


def _messages_api(body: Mapping[str, Any], builder: _Builder) -> tuple[str, dict[str, Any]]:
    system = _text(body.get("system"))
    for message in _list(body.get("messages")):
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": _text(content)}]
        if message.get("role") == "assistant":
            calls = [(str(b.get("id")), str(b.get("name")), _arguments(b.get("input"))) for b in blocks
                     if isinstance(b, Mapping) and b.get("type") == "tool_use"]
            builder.assistant(_text([b for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]), calls)
            continue
        texts = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                builder.result(str(block.get("tool_use_id")), _text(block.get("content")),
                               not block.get("is_error"))
        if texts:
            builder.user_text(_text(texts))
    tools = {str(t["name"]): _schema(t.get("input_schema")) for t in _list(body.get("tools"))
             if isinstance(t, Mapping) and isinstance(t.get("name"), str) and "input_schema" in t}
    metadata = body.get("metadata")
    marker = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    return system, {"marker": marker, "tools": tools}


def _responses_api(body: Mapping[str, Any], builder: _Builder) -> tuple[str, dict[str, Any]]:
    system = _text(body.get("instructions"))
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else _list(raw)
    pending: list[tuple[str, str, dict[str, Any]]] = []
    text = ""
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "function_call":
            pending.append((str(item.get("call_id")), str(item.get("name")), _arguments(item.get("arguments"))))
            continue
        if pending or text:
            builder.assistant(text, pending)
            pending, text = [], ""
        if kind == "function_call_output":
            output = item.get("output")
            builder.result(str(item.get("call_id")), output if isinstance(output, str) else _text(output), True)
        elif item.get("role") == "assistant":
            text = _text(item.get("content"))
        elif item.get("role") in ("system", "developer"):
            system = "\n\n".join(t for t in (system, _text(item.get("content"))) if t)
        elif item.get("role") == "user" or kind == "message":
            builder.user_text(_text(item.get("content")))
    if pending or text:
        builder.assistant(text, pending)
    tools = {str(t["name"]): _schema(t.get("parameters")) for t in _list(body.get("tools"))
             if isinstance(t, Mapping) and t.get("type") == "function" and isinstance(t.get("name"), str)}
    return system, {"marker": body.get("prompt_cache_key"), "tools": tools}


def _chat_api(body: Mapping[str, Any], builder: _Builder) -> tuple[str, dict[str, Any]]:
    system = ""
    for message in _list(body.get("messages")):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system = "\n\n".join(t for t in (system, _text(message.get("content"))) if t)
        elif role == "assistant":
            calls = []
            for call in _list(message.get("tool_calls")):
                if not isinstance(call, Mapping):
                    continue
                function = call.get("function")
                function = function if isinstance(function, Mapping) else {}
                calls.append((str(call.get("id")), str(function.get("name")), _arguments(function.get("arguments"))))
            builder.assistant(_text(message.get("content")), calls)
        elif role == "tool":
            builder.result(str(message.get("tool_call_id")), _text(message.get("content")), True)
        else:
            builder.user_text(_text(message.get("content")))
    tools = {}
    for entry in _list(body.get("tools")):
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            tools[str(function["name"])] = _schema(function.get("parameters"))
    return system, {"marker": None, "tools": tools}


_READERS = {Wire.MESSAGES: _messages_api, Wire.RESPONSES: _responses_api, Wire.CHAT: _chat_api}


def read_request(wire: Wire, body: Mapping[str, Any]) -> Transcript:
    """The conversation ``body`` (a request of ``wire``) carries. Never raises on odd content: what it cannot
    read it leaves out."""
    builder = _Builder()
    system, extra = _READERS[wire](body, builder)
    first = builder.messages[0] if builder.messages else {}
    fixed = json.dumps([str(wire), system, first, extra["marker"]], sort_keys=True, default=str)
    key = hashlib.blake2b(fixed.encode("utf-8", "surrogatepass"), digest_size=12, key=_SECRET).hexdigest()
    messages: list[Mapping[str, Any]] = ([{"role": "system", "content": system}] if system else [])
    messages += builder.messages
    return Transcript(key, wire, str(body.get("model") or ""), system, builder.user, tuple(messages),
                      builder.history(), extra["tools"], bool(body.get("stream")))
