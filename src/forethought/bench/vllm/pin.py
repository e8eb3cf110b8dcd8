"""Pinning a request to a trajectory's recorded next step, so a random-weight model replays it exactly.

A tiny random model would emit junk; vLLM's structured outputs make it emit what the trajectory recorded.
For a tool step the request names the recorded tool (``tool_choice``) and offers that one tool with a
strict schema in which every argument is required and holds exactly one value (``enum: [v]`` for scalars,
``const`` for arrays and objects, no additional properties), with ``parallel_tool_calls: false``. The
grammar still allows whitespace between JSON tokens, and at temperature 0 a random model loops on it, so
the whitespace-only tokens get ``logit_bias`` -100. For a turn's answer the request forbids tools and asks
for exactly the answer's length in tokens (``min_tokens = max_tokens``, EOS ignored): the text is the
model's own, its length the trajectory's.

The prompt stays the real one: the chat template renders ``chat_template_kwargs.prompt_tools`` (every tool
the agent offered) in place of the one pinned tool, so consecutive requests share their prefix and vLLM's
prefix cache sees the same conversation a real model would.

:func:`pin_forced_body` pins a call by forced tokens instead (:mod:`.forced`): the form a continuation
inside the engine can use, since a request's grammar cannot change between its chunks.

:func:`single_call_steps` splits parallel steps into one call per step (one named call per response), and
:func:`check_call` compares what the engine emitted with the recorded call; a difference is a
:class:`~forethought.errors.WorkloadError` that names both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forethought.bench.engine_sim.wrong_calls import named_arguments
from forethought.bench.vllm.forced import FORCED_ARG
from forethought.errors import WorkloadError
from forethought.predictors.trajectory import Trajectory, Turn

WHITESPACE_BIAS = -100
CALL_TOKEN_SLACK = 64
"""Extra ``max_tokens`` over twice the pinned call's length in bytes (a byte-level token is at least one)."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a request is in its trajectory: turn index and step index (``step == len(steps)``: the answer)."""

    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class PinnedStep:
    """The recorded next step of a request: one call (name, arguments by name) or the answer."""

    position: Position
    name: str | None
    arguments: Mapping[str, Any] | None
    answer: str


def single_call_steps(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with each parallel step split into consecutive one-call steps (same order)."""
    turns = tuple(Turn(t.user, tuple((call,) for step in t.steps for call in step), t.answer) for t in trajectory.turns)
    return replace(trajectory, turns=turns)


def schemas_of(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Tool name -> parameters schema of OpenAI ``tools`` entries."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") or {}
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters") or {}
    return out


def position(messages: Sequence[Mapping[str, Any]]) -> Position:
    """Turn = user messages - 1; step = assistant messages since the last user message."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise WorkloadError("a replayed request needs at least one user message")
    return Position(len(users) - 1, sum(1 for m in messages[users[-1]:] if m.get("role") == "assistant"))


def next_step(trajectory: Trajectory, messages: Sequence[Mapping[str, Any]]) -> PinnedStep:
    """The recorded step due after ``messages`` (one call per step: see :func:`single_call_steps`)."""
    where = position(messages)
    if where.turn >= len(trajectory.turns):
        raise WorkloadError(f"{trajectory.id}: turn {where.turn} is past the trajectory's {len(trajectory.turns)}")
    turn = trajectory.turns[where.turn]
    if where.step > len(turn.steps):
        raise WorkloadError(f"{trajectory.id}: step {where.step} of turn {where.turn} is past its answer")
    if where.step == len(turn.steps):
        return PinnedStep(where, None, None, turn.answer)
    step = turn.steps[where.step]
    if len(step) != 1:
        raise WorkloadError(f"{trajectory.id}: step {where.step} of turn {where.turn} has {len(step)} calls; "
                            "replay one call per step (single_call_steps)")
    call = step[0]
    return PinnedStep(where, call.name, named_arguments(call, schemas_of(trajectory.tools)), turn.answer)


def pinned_value(value: Any) -> dict[str, Any]:
    """A schema that admits exactly ``value``."""
    if isinstance(value, (list, dict)):
        return {"const": value}
    return {"enum": [value]}


def pinned_schema(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An object schema whose only instance is ``arguments``."""
    return {"type": "object", "properties": {k: pinned_value(v) for k, v in arguments.items()},
            "required": list(arguments), "additionalProperties": False}


def _numbers_as_floats(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers_as_floats(v) for v in value]
    return value


def canonical(arguments: Any) -> str:
    """The comparison form of argument values: JSON with keys sorted and numbers as floats (the grammar
    writes a recorded ``1.0`` as ``1``; forethought's call keys treat them alike too), ``True`` apart from 1."""
    return json.dumps(_numbers_as_floats(arguments), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def call_token_budget(name: str, arguments: Mapping[str, Any]) -> int:
    """``max_tokens`` for a pinned call: vLLM 0.32 constrains a named tool choice to the parser's whole
    ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` form, so the wrapper and the name count."""
    text = f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments, ensure_ascii=False)}}}</tool_call>'
    return 2 * len(text.encode()) + CALL_TOKEN_SLACK


def pin_body(body: Mapping[str, Any], step: PinnedStep, model: str, whitespace_ids: Sequence[int],
             answer_tokens: int | None = None) -> dict[str, Any]:
    """The request to send vLLM for ``body`` (the agent's) so that it emits ``step``.

    Kept from ``body``: messages, stream options, seed. Replaced: model, tools (the pinned one; the real ones
    go to the prompt as ``prompt_tools``), tool choice, sampling. Dropped: ``metadata`` and other fields
    vLLM does not know.
    """
    tools = list(body.get("tools") or [])
    out: dict[str, Any] = {
        "model": model, "messages": body["messages"], "stream": bool(body.get("stream")),
        "temperature": 0.0, "seed": body.get("seed", 0),
        "logit_bias": {str(i): WHITESPACE_BIAS for i in whitespace_ids},
        "chat_template_kwargs": {"prompt_tools": tools},
    }
    if body.get("stream"):
        out["stream_options"] = body.get("stream_options") or {"include_usage": True}
    if step.name is None:
        if answer_tokens is None or answer_tokens < 1:
            raise WorkloadError("an answer step needs its length in tokens (>= 1)")
        out.update({"max_tokens": answer_tokens, "min_tokens": answer_tokens, "ignore_eos": True})
        if tools:
            out.update({"tools": tools, "tool_choice": "none"})
        return out
    arguments = dict(step.arguments or {})
    function = {"name": step.name, "description": "", "parameters": pinned_schema(arguments), "strict": True}
    out.update({"tools": [{"type": "function", "function": function}],
                "tool_choice": {"type": "function", "function": {"name": step.name}},
                "parallel_tool_calls": False,
                "max_tokens": call_token_budget(step.name, arguments)})
    return out


def pin_forced_body(body: Mapping[str, Any], step: PinnedStep, model: str, whitespace_ids: Sequence[int],
                    forced: Sequence[int], answer_tokens: int | None = None) -> dict[str, Any]:
    """The request for ``body`` that makes vLLM emit ``step`` by forced tokens (:mod:`.forced`) in place of a
    grammar: a call step offers the agent's own tools with ``tool_choice: "auto"`` and forces ``forced`` (the
    call's canonical tokens and the end of the message); vLLM's hermes parser reads the call from the text, as it
    would a real model's. Answers are pinned as in :func:`pin_body`. The prompt is rendered as in
    :func:`pin_body` (``prompt_tools``), so both modes give the same prompts."""
    if step.name is None:
        return pin_body(body, step, model, whitespace_ids, answer_tokens)
    tools = list(body.get("tools") or [])
    if step.name not in schemas_of(tools):
        raise WorkloadError(f"the request does not offer {step.name}, the recorded call")
    if not forced:
        raise WorkloadError("a forced call needs its tokens")
    out: dict[str, Any] = {
        "model": model, "messages": body["messages"], "stream": bool(body.get("stream")),
        "temperature": 0.0, "seed": body.get("seed", 0), "tools": tools, "tool_choice": "auto",
        "chat_template_kwargs": {"prompt_tools": tools}, "max_tokens": len(forced),
        "vllm_xargs": {FORCED_ARG: [int(t) for t in forced]},
    }
    if body.get("stream"):
        out["stream_options"] = body.get("stream_options") or {"include_usage": True}
    return out


def check_call(step: PinnedStep, calls: Sequence[tuple[str, str]], where: str) -> None:
    """Raise :class:`WorkloadError` unless ``calls`` (name, arguments text) is exactly the recorded call."""
    if step.name is None:
        if calls:
            raise WorkloadError(f"{where}: the engine called {[n for n, _ in calls]} where the answer was due")
        return
    if len(calls) != 1:
        raise WorkloadError(f"{where}: the engine emitted {len(calls)} calls where one ({step.name}) was pinned")
    name, text = calls[0]
    try:
        emitted = json.loads(text)
    except ValueError:
        raise WorkloadError(f"{where}: the engine's arguments for {name} are not JSON: {text!r}") from None
    if name != step.name or canonical(emitted) != canonical(dict(step.arguments or {})):
        raise WorkloadError(f"{where}: the engine emitted {name}({text}) but the trajectory records "
                            f"{step.name}({canonical(dict(step.arguments or {}))})")


__all__ = ["PinnedStep", "Position", "call_token_budget", "canonical", "check_call", "next_step", "pin_body",
           "pin_forced_body", "pinned_schema", "pinned_value", "position", "schemas_of", "single_call_steps"]
