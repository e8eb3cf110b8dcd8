"""What a predictor may learn from: a context with every trace of private calls taken out.

A predictor keeps what it learns (a pattern store, on disk or in Redis), and a private tool (or one with
private arguments) must leave nothing in any store: not its name, its arguments or its output. Skipping the
private call itself is not enough, since every later call is learnt in a context whose history and messages
still hold it (cue words, call sequences, values copied from outputs). :func:`learnable` removes those
calls from the history and their tool calls and results from the messages, and the private tools from the
tools offered; the rest stays in order, so turn starts read from the messages still line up with the history.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from forethought.predictors.base import PredictionContext

__all__ = ["learnable"]


def learnable(context: PredictionContext, is_private: Callable[[str], bool]) -> PredictionContext:
    """``context`` without the calls of tools ``is_private`` names (its history, and the messages' tool calls
    and tool results) and without those tools among the tools offered (a tool offered is a candidate whose
    weights are learnt under its name); ``context`` itself when it holds none of them."""
    history = tuple(o for o in context.history if not is_private(o.call.name))
    hidden = _private_call_ids(context.messages, is_private)
    offered = [name for name in context.tools if is_private(name)]
    listed = [t for t in context.openai_tools if not is_private(_function_name(t))]
    if len(history) == len(context.history) and hidden is None and not offered \
            and len(listed) == len(context.openai_tools):
        return context
    messages = context.messages if hidden is None else _without(context.messages, hidden, is_private)
    tools = {name: schema for name, schema in context.tools.items() if not is_private(name)}
    return dataclasses.replace(context, history=history, messages=messages, tools=tools, openai_tools=listed)


def _function_name(call: object) -> str:
    """The tool a chat tool call or tool schema names (nested under ``function``, or flat as the Responses
    API writes it); ``""`` when it names none."""
    if not isinstance(call, Mapping):
        return ""
    function = call.get("function")
    named = function if isinstance(function, Mapping) else call
    return str(named.get("name") or "")


def _private_call_ids(messages: Sequence[Mapping[str, Any]],
                      is_private: Callable[[str], bool]) -> frozenset[str] | None:
    """The ids of the messages' private tool calls; ``None`` when there are no private calls."""
    ids: set[str] = set()
    found = False
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if is_private(_function_name(call)):
                found = True
                if isinstance(call, Mapping) and call.get("id") is not None:
                    ids.add(str(call.get("id")))
    return frozenset(ids) if found else None


def _without(messages: Sequence[Mapping[str, Any]], hidden: frozenset[str],
             is_private: Callable[[str], bool]) -> list[Mapping[str, Any]]:
    kept: list[Mapping[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            kept.append(message)
            continue
        role = message.get("role")
        if role == "tool" and str(message.get("tool_call_id")) in hidden:
            continue
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            public = [c for c in calls if not is_private(_function_name(c))]
            if len(public) != len(calls):
                trimmed = {k: v for k, v in message.items() if k != "tool_calls"}
                if public:
                    trimmed["tool_calls"] = public
                kept.append(trimmed)
                continue
        kept.append(message)
    return kept
