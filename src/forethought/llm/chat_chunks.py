"""Streamed Chat Completions chunks read as forethought's events, as tolerantly as the ``openai`` SDK passes them on.

:class:`ChatChunkDecoder` is the one decoder of a streamed Chat Completions response that reads chunks it
does not consume itself: the stream tap (:mod:`forethought.integrations.tap`, the caller's own stream) and
the daemon (:mod:`forethought.daemon.wire`, a response it relays) both use it. Streamed tool calls come as
``delta.tool_calls[i]`` with ``index``, ``id`` and ``function.name`` first, then ``function.arguments``
fragments; :class:`~forethought.llm.chat.ToolCallAssembler` turns them into events, so a call closes the
moment its arguments object does. Chunks may be plain JSON dicts or the SDK's objects (:func:`field_of`),
and the ``chat.completions.stream()`` helper's ``chunk`` events are unwrapped (its derived events skipped).

Read as tolerantly as plain iteration of the SDK's stream: a tool-call index that is not an integer names
its own call (after the integer-indexed ones), a delta that carries a new id at an index whose call already
has another id starts a new call (servers that number every call 0), arguments sent as an object are that
object's JSON text, ``tool_calls`` sent as one object is one delta, and ids or names sent as numbers are
spelt out. Only choice 0 is read.

The message ends at the stream's end (``[DONE]`` or the body's end, :meth:`ChatChunkDecoder.end`) when a
finish reason was seen: the calls still open are closed with it, then ``MessageDone`` carries it with the
usage and response id. ``close_at_finish=True`` closes the open calls as soon as the finish reason arrives
instead (the daemon acts on them before the usage chunk); the message's reason is then that first one.

:class:`~forethought.llm.chat.OpenAIChatClient` reads its own endpoint's chunks with a loop of its own: it
is strict (a malformed chunk is an :class:`~forethought.errors.UpstreamError`) and knows the gateway's served
results; it shares the assembler and :func:`~forethought.llm.chat.chat_usage` with this decoder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from forethought.llm.chat import ToolCallAssembler, chat_usage
from forethought.llm.events import LLMEvent, MessageDone
from forethought.llm.fields import field_of

__all__ = ["CallSlots", "ChatChunkDecoder", "call_text"]


def _items(value: Any) -> list[Any]:
    """A list's items; one object (a mapping where a list belongs) as a list of one; nothing else."""
    if isinstance(value, list | tuple):
        return list(value)
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return []
    return [value]


def call_text(value: Any) -> str | None:
    """A streamed id or name: strings as they are, numbers spelt out; anything else is absent."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _fragment(arguments: Any) -> str | None:
    """A call's argument text: a string fragment as it is; arguments sent whole as an object (or any JSON
    value) as their JSON text, keys in their own order, so they close (or fail) at once."""
    if arguments is None or isinstance(arguments, str):
        return arguments or None
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False, default=str)
    except (TypeError, ValueError):
        return json.dumps(str(arguments))  # not an object: the call is reported malformed


def _index_key(raw: Any) -> tuple[str, Any]:
    """How a streamed tool-call index identifies its call: a non-negative int as itself (absent: 0, as the
    openai SDK's own accumulator reads it), any other value by its spelling."""
    if raw is None:
        return ("int", 0)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return ("int", raw)
    try:
        return ("raw", json.dumps(raw, sort_keys=True, default=repr))
    except (TypeError, ValueError):
        return ("raw", repr(raw))


class CallSlots:
    """Which call of the message a streamed tool-call delta belongs to: the assembler's index for a delta's
    ``index`` and ``id`` (a new id at an index whose call has another one is a new call; a non-integer index
    names its own call). Shared by every reader of Chat Completions chunks (this decoder, the gateway)."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, Any], int] = {}  # index key -> the assembler's index of its current call
        self._ids: dict[int, str] = {}  # the assembler's index -> the call's id

    def _allocate(self, key: tuple[str, Any]) -> int:
        taken = self._ids.keys() | set(self._slots.values())
        wanted = key[1] if key[0] == "int" else None
        index = wanted if wanted is not None and wanted not in taken else max(taken, default=-1) + 1
        self._slots[key] = index
        return index

    def slot(self, raw_index: Any, call_id: str | None) -> int:
        """The assembler's index of the call a delta with ``raw_index`` and ``call_id`` belongs to."""
        key = _index_key(raw_index)
        index = self._slots.get(key)
        if index is None:
            index = self._allocate(key)
        elif call_id is not None and self._ids.get(index, call_id) != call_id:
            index = self._allocate(key)  # the same index, another id: another call
        if call_id is not None:
            self._ids.setdefault(index, call_id)
        return index


class ChatChunkDecoder:
    """Chat Completions chunks of one response (dicts or SDK objects) -> events (see the module docstring)."""

    def __init__(self, *, close_at_finish: bool = False) -> None:
        self.close_at_finish = close_at_finish
        self._assembler = ToolCallAssembler()
        self._calls = CallSlots()
        self._closed_with: str | None = None  # the finish reason the open calls were closed with
        self._usage: Any = None
        self._id: Any = None
        self.finish_reason: str | None = None
        """The latest finish reason of choice 0 (``None``: none yet)."""
        self.done = False
        """The message has ended (:meth:`end` gave its ``MessageDone``)."""

    def feed(self, chunk: Any) -> list[LLMEvent]:
        """The events one chunk produced (text, call starts, argument fragments, calls that closed)."""
        kind = field_of(chunk, "type")
        if kind == "chunk":  # the ``chat.completions.stream()`` helper wraps each chunk
            chunk = field_of(chunk, "chunk")
        elif isinstance(kind, str):
            return []  # the helper's derived events repeat what the chunk said
        self._id = self._id or field_of(chunk, "id")
        usage = field_of(chunk, "usage")
        if usage is not None:
            self._usage = usage
        events: list[LLMEvent] = []
        for choice in _items(field_of(chunk, "choices")):
            if _index_key(field_of(choice, "index")) != ("int", 0):
                continue
            delta = field_of(choice, "delta")
            content = field_of(delta, "content")
            if isinstance(content, str) and content:
                events += self._assembler.add_text(content)
            for tool in _items(field_of(delta, "tool_calls")):
                if not isinstance(tool, Mapping) and isinstance(tool, str | bytes | int | float | bool):
                    continue
                function = field_of(tool, "function")
                call_id = call_text(field_of(tool, "id"))
                index = self._calls.slot(field_of(tool, "index"), call_id)
                events += self._assembler.add_tool_delta(index, call_id, call_text(field_of(function, "name")),
                                                         _fragment(field_of(function, "arguments")))
            reason = field_of(choice, "finish_reason")
            if reason is not None:
                self.finish_reason = str(reason)
        if self.close_at_finish and self.finish_reason is not None:
            events += self.close_calls()
        return events

    def close_calls(self) -> list[LLMEvent]:
        """Close the calls still open with the finish reason (once; nothing before a finish reason)."""
        if self.finish_reason is None or self._closed_with is not None:
            return []
        self._closed_with = self.finish_reason
        return self._assembler.finish(self._closed_with)

    def end(self) -> list[LLMEvent]:
        """The stream ended (``[DONE]`` or the body's end): the message is done if it had a finish reason."""
        if self.finish_reason is None or self.done:
            return []
        events = self.close_calls()
        self.done = True
        response_id = self._id if isinstance(self._id, str) else None
        return [*events, MessageDone(self._closed_with or self.finish_reason, chat_usage(self._usage), response_id)]
