"""Recorded sessions and how one is played to a predictor, call by call.

A :class:`RecordedSession` is a finished conversation: user turns, each with the calls the model made and
their outputs, plus the tools offered. :func:`contexts` yields, before every call, the
:class:`~forethought.predictors.base.PredictionContext` an agent would have had at that point (messages in
the OpenAI chat format, the latest user message, the calls so far), with the call that really came next.
Training a predictor and evaluating it both walk sessions this way, so neither can peek ahead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext, Predictor
from forethought.predictors.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One user message and the calls (with outputs) that answered it."""

    user: str
    calls: tuple[ObservedCall, ...] = ()
    answer: str = "Done."


@dataclass(frozen=True, slots=True)
class RecordedSession:
    """A finished session: turns, and the tools offered (name -> JSON schema of the parameters)."""

    id: str
    turns: tuple[RecordedTurn, ...]
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    domain: str = ""
    openai_tools: tuple[Mapping[str, Any], ...] = ()
    """The tools exactly as offered (OpenAI ``tools`` entries, descriptions included), when known."""


def tool_schemas(tools: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Tool name -> parameters schema, from OpenAI ``tools`` entries (or bare function entries)."""
    out: dict[str, Mapping[str, Any]] = {}
    for entry in tools:
        function = entry.get("function", entry)
        if isinstance(function, Mapping) and "name" in function:
            out[str(function["name"])] = function.get("parameters") or {"type": "object", "properties": {}}
    return out


def from_trajectory(trajectory: Trajectory, outputs: Sequence[Sequence[ObservedCall]] | None = None
                    ) -> RecordedSession:
    """A trajectory as a recorded session; ``outputs`` (per turn) supplies outputs, else they are empty."""
    turns = []
    for i, turn in enumerate(trajectory.turns):
        calls = tuple(outputs[i]) if outputs is not None else tuple(ObservedCall(c, "") for c in turn.calls)
        turns.append(RecordedTurn(turn.user, calls, turn.answer))
    return RecordedSession(trajectory.id, tuple(turns), tool_schemas(trajectory.tools), trajectory.domain,
                           tuple(trajectory.tools))


def _assistant_call(call_id: str, call: ToolCall) -> dict[str, Any]:
    arguments = dict(call.arguments)
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(arguments, ensure_ascii=False)}}]}


def contexts(session: RecordedSession) -> Iterator[tuple[PredictionContext, ObservedCall, int]]:
    """Before each call of ``session``: the context an agent had, the call that came, and its turn index."""
    messages: list[dict[str, Any]] = []
    history: list[ObservedCall] = []
    for turn_index, turn in enumerate(session.turns):
        messages.append({"role": "user", "content": turn.user})
        for observed in turn.calls:
            context = PredictionContext(session_id=session.id, messages=tuple(messages), user_message=turn.user,
                                        history=tuple(history), tools=session.tools,
                                        openai_tools=session.openai_tools)
            yield context, observed, turn_index
            call_id = f"call_{len(history)}"
            messages.append(_assistant_call(call_id, observed.call))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": observed.output})
            history.append(observed)
        messages.append({"role": "assistant", "content": turn.answer})


def train(predictor: Predictor, sessions: Iterable[RecordedSession]) -> int:
    """Let ``predictor`` observe every call of ``sessions`` in order; returns the number of calls."""
    count = 0
    for session in sessions:
        for context, observed, _ in contexts(session):
            predictor.observe(context, observed)
            count += 1
    return count
