"""Semantic equivalence on the real BFCL backends: speculation never changes outputs or final state.

All 200 multi-turn base trajectories run at the Session level: serially (each ground-truth call via
``session.execute``) and under speculation arms that, before each authoritative call, speculate the true
call, wrong calls (other tool / same tool with other arguments), or a mix including the call after next,
overlapping and sometimes claimed while still queued. Every arm must produce byte-identical outputs
(``json.dumps`` of each result) and the identical final ``state_fingerprint``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from forethought import Runtime, Session, ToolCall
from forethought._core.policy import BreakerPolicy, Policy
from forethought.bench.workloads.bfcl import BfclEntry, build_session, load_bfcl, state_fingerprint
from forethought.errors import ToolExecutionError
from forethought.telemetry import EventKind

ENTRIES = load_bfcl("multi_turn_base")

# Never let the breaker, budgets or the price of waste silence speculation: the point is to exercise every path.
POLICY = Policy(max_calls_per_turn=10_000, max_cost_per_turn=1e9, waste_weight=0.0,
                breaker=BreakerPolicy(max_waste_rate=1.0, max_error_rate=1.0))

Plan = Callable[[Session, Sequence[ToolCall], int], Any]


def render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def mutated(call: ToolCall) -> ToolCall | None:
    """The same tool with one argument changed, or ``None`` when it has no argument to change."""
    for name, value in sorted(call.arguments.items()):
        if isinstance(value, bool):
            return ToolCall(call.name, {**call.arguments, name: not value})
        if isinstance(value, int | float):
            return ToolCall(call.name, {**call.arguments, name: value + 1})
        if isinstance(value, str):
            return ToolCall(call.name, {**call.arguments, name: value + "x"})
    return None


def other_tool(calls: Sequence[ToolCall], i: int) -> ToolCall | None:
    """Another ground-truth call of the same entry with a different tool (a plausible wrong guess)."""
    n = len(calls)
    for step in range(1, n):
        candidate = calls[(i + 3 * step) % n]
        if candidate.name != calls[i].name:
            return candidate
    return None


async def settle(session: Session) -> None:
    """Let every launched speculation finish (they are zero-latency)."""
    tasks = [e.task for e in session._store if e.task is not None and not e.task.done()]
    if tasks:
        await asyncio.wait(tasks)


async def plan_next(session: Session, calls: Sequence[ToolCall], i: int) -> None:
    session.speculate(calls[i], source="true")
    await settle(session)


async def plan_wrong(session: Session, calls: Sequence[ToolCall], i: int) -> None:
    for guess in (other_tool(calls, i), mutated(calls[i])):
        if guess is not None:
            session.speculate(guess, source="wrong")
    await settle(session)


async def plan_mix(session: Session, calls: Sequence[ToolCall], i: int) -> None:
    guesses = [calls[i + 1]] if i + 1 < len(calls) else []
    guesses += [g for g in (mutated(calls[i]), other_tool(calls, i)) if g is not None]
    if i % 3 != 2:
        guesses.insert(i % 2 * len(guesses), calls[i])
    for guess in guesses:
        session.speculate(guess, source="mix")
    if i % 2 == 0:
        await settle(session)  # odd steps claim while guesses are still queued


PLANS: dict[str, Plan | None] = {"serial": None, "next": plan_next, "wrong": plan_wrong, "mix": plan_mix,
                                 "mix-eager": plan_mix}
"""Arms by name; ``-eager`` arms copy state when the speculation starts instead of when it first reads."""


async def run_arm(runtime: Runtime, entry: BfclEntry, plan: Plan | None, lazy: bool = True) -> tuple[list[str], str]:
    tools, state = build_session(entry, lazy=lazy)
    session = runtime.session(entry.id, tools=tools)
    outputs: list[str] = []
    calls = entry.calls
    i = 0
    try:
        for turn in entry.ground_truth:
            for call in turn:
                if plan is not None:
                    await plan(session, calls, i)
                try:
                    outputs.append(render(await session.execute(call)))
                except ToolExecutionError as exc:
                    outputs.append(f"error: {exc}")
                i += 1
            session.end_turn()
    finally:
        await session.close()
    return outputs, state_fingerprint(state)


async def test_every_arm_equals_serial_on_all_200_trajectories() -> None:
    assert len(ENTRIES) == 200
    counts: dict[str, Counter[EventKind]] = {}
    results: dict[str, dict[str, tuple[list[str], str]]] = {}
    for arm, plan in PLANS.items():
        runtime = Runtime(policy=POLICY)
        seen: Counter[EventKind] = Counter()
        runtime.telemetry.subscribe(lambda event, seen=seen: seen.update([event.kind]))
        results[arm] = {e.id: await run_arm(runtime, e, plan, lazy=not arm.endswith("-eager")) for e in ENTRIES}
        counts[arm] = seen
        runtime.close()
    for arm in PLANS:
        for entry in ENTRIES:
            outputs, fingerprint = results[arm][entry.id]
            serial_outputs, serial_fingerprint = results["serial"][entry.id]
            assert outputs == serial_outputs, f"{arm} {entry.id}: outputs differ"
            assert fingerprint == serial_fingerprint, f"{arm} {entry.id}: final state differs"
    total = sum(len(e.calls) for e in ENTRIES)
    # The arms really exercised the paths they are meant to.
    assert counts["next"][EventKind.HIT] == total
    assert counts["next"][EventKind.COMMITTED] == total
    # Wrong guesses are other ground-truth calls, so a few coincide with a later identical call.
    assert counts["wrong"][EventKind.WASTED] > total and counts["wrong"][EventKind.HIT] < total // 10
    assert counts["mix"][EventKind.HIT] > 0 and counts["mix"][EventKind.CONFLICT] > 0
    assert counts["mix"][EventKind.CANCELLED] > 0 and counts["mix-eager"][EventKind.HIT] > 0


@pytest.mark.parametrize("grouping_parallel", [False, True])
async def test_speculated_state_changes_reach_state_only_on_claim(grouping_parallel: bool) -> None:
    """A speculated write stays invisible until claimed; an unclaimed one never lands."""
    entry = next(e for e in ENTRIES if e.id == "multi_turn_base_0")
    tools, state = build_session(entry)
    runtime = Runtime(policy=POLICY)
    session = runtime.session(tools=tools)
    before = state_fingerprint(state)
    mkdir = ToolCall("mkdir", {"dir_name": "speculated_only"})
    cd = ToolCall("cd", {"folder": "document"})
    session.speculate(mkdir, source="test")
    session.speculate(cd, source="test")
    await settle(session)
    assert state_fingerprint(state) == before
    if grouping_parallel:
        await session.execute(cd)
        assert state_fingerprint(state) != before
        assert "speculated_only" not in state_fingerprint(state)
    session.end_turn()
    await session.close()
    assert "speculated_only" not in state_fingerprint(state)
    runtime.close()
