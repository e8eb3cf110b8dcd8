"""Conversations in the wire formats the adapters see, as the Chat Completions messages predictors read.

The predictors (:mod:`forethought.predictors`) read a conversation as the agent loop keeps it: Chat
Completions messages (``user`` / ``system`` text, ``assistant`` messages with ``tool_calls``, ``tool``
messages with ``tool_call_id`` and the output text the model saw). The adapters meet three other shapes:

* :func:`from_responses`: Responses API ``input`` items (what the OpenAI Agents SDK sends): role
  messages, ``function_call`` and ``function_call_output`` items;
* :func:`from_anthropic`: Anthropic Messages turns, with ``tool_use`` and ``tool_result`` blocks;
* :func:`from_chat`: Chat Completions messages (dicts or SDK objects), copied as plain dicts.

:func:`to_chat` picks by shape. Items it does not know (reasoning, images, files) are left out; text parts
are joined. Nothing here raises on odd input: what cannot be read is left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from forethought.llm.fields import field_of

Message = dict[str, Any]


def _plain(obj: Any) -> Any:
    """An SDK object (pydantic) as its plain dict; anything else as it is."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, Mapping):
        try:
            return dump(exclude_none=True)
        except Exception:  # an object that cannot dump itself is left as it is
            return obj
    return obj


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        parts = []
        for part in content:
            text = part if isinstance(part, str) else field_of(part, "text")
            if isinstance(text, str):
                parts.append(text)
        return "".join(parts)
    return ""


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return "{}"


def from_chat(messages: Sequence[Any]) -> list[Message]:
    """Chat Completions messages as plain dicts (SDK objects dumped)."""
    out: list[Message] = []
    for message in _sequence(messages):
        plain = _plain(message)
        if isinstance(plain, Mapping) and isinstance(plain.get("role"), str):
            out.append(dict(plain))
    return out


def from_responses(items: str | Sequence[Any]) -> list[Message]:
    """Responses API ``input`` (a string, or items) as Chat Completions messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[Message] = []
    for raw in _sequence(items):
        item = _plain(raw)
        kind = field_of(item, "type")
        if kind == "function_call":
            function = {"name": str(field_of(item, "name") or ""), "arguments": _arguments(field_of(item, "arguments"))}
            call_id = str(field_of(item, "call_id") or field_of(item, "id") or "")
            call = {"id": call_id, "type": "function", "function": function}
            last = out[-1] if out else None
            if last is not None and last.get("role") == "assistant":  # one turn: its text, then its calls
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = field_of(item, "output")
            out.append({"role": "tool", "tool_call_id": str(field_of(item, "call_id") or ""),
                        "content": output if isinstance(output, str) else text_of(output)})
        elif kind in (None, "message") and isinstance(field_of(item, "role"), str):
            out.append({"role": field_of(item, "role"), "content": text_of(field_of(item, "content"))})
    return out


def from_anthropic(turns: Sequence[Any], system: str | None = None) -> list[Message]:
    """Anthropic Messages turns (and ``system``) as Chat Completions messages."""
    out: list[Message] = [{"role": "system", "content": system}] if system else []
    for raw in _sequence(turns):
        turn = _plain(raw)
        role, content = field_of(turn, "role"), field_of(turn, "content")
        if not isinstance(role, str):
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in content if isinstance(content, list | tuple) else ():
            kind = field_of(block, "type")
            if kind == "text" and isinstance(field_of(block, "text"), str):
                texts.append(field_of(block, "text"))
            elif kind == "tool_use":
                calls.append({"id": str(field_of(block, "id") or ""), "type": "function",
                              "function": {"name": str(field_of(block, "name") or ""),
                                           "arguments": _arguments(field_of(block, "input") or {})}})
            elif kind == "tool_result":
                result = field_of(block, "content")
                out.append({"role": "tool", "tool_call_id": str(field_of(block, "tool_use_id") or ""),
                            "content": result if isinstance(result, str) else text_of(result)})
        if role == "assistant":
            message: Message = {"role": "assistant", "content": "".join(texts) or None}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
        elif texts:
            out.append({"role": role, "content": "".join(texts)})
    return out


def to_chat(messages: Any) -> list[Message]:
    """``messages`` in whichever of the three shapes they are, as Chat Completions messages."""
    if isinstance(messages, str):
        return from_responses(messages)
    if not isinstance(messages, Sequence):
        return []
    items = [_plain(m) for m in messages]
    if any(field_of(m, "type") in ("function_call", "function_call_output", "message") for m in items):
        return from_responses(items)
    for m in items:
        content = field_of(m, "content")
        if isinstance(content, list) and any(field_of(b, "type") in ("tool_use", "tool_result") for b in content):
            return from_anthropic(items)
    return from_chat(items)
