"""Invariant 2 of docs/design.md ("Invariants"), the side-effect boundary, attacked directly: a destructive
or undeclared tool never runs early, and an isolated write runs early only on a snapshot that is
committed by its call or discarded.

Tools count every execution and know (via ``conftest.PHASE``) whether they run speculatively, so "never
ran" and "ran exactly once" are counted, not inferred from timing."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ExecLog, FakeState, settle, speculate_marked, spin
from forethought import Effect, Policy, Runtime, ToolCall, ToolPolicy, tool
from forethought.telemetry import EventKind
from invariant_helpers import OPEN_BREAKER, counting_tool, events_of, kinds


@pytest.mark.parametrize("case", ["destructive", "undeclared", "isolated_write_without_state",
                                  "pure_overridden_destructive", "pure_denied"])
async def test_destructive_or_undeclared_tools_are_never_run_by_speculate(case: str, log: ExecLog) -> None:
    policy_tools: dict[str, ToolPolicy] = {}
    if case == "destructive":
        t = counting_tool(log, "t", Effect.DESTRUCTIVE)
    elif case == "undeclared":
        t = counting_tool(log, "t")
    elif case == "isolated_write_without_state":
        t = counting_tool(log, "t", Effect.ISOLATED_WRITE)
    elif case == "pure_overridden_destructive":
        t = counting_tool(log, "t", Effect.PURE)
        policy_tools["t"] = ToolPolicy(effect=Effect.DESTRUCTIVE)
    else:
        t = counting_tool(log, "t", Effect.PURE)
        policy_tools["t"] = ToolPolicy(speculate=False)
    runtime = Runtime([t], Policy(tools=policy_tools, max_calls_per_turn=1000, breaker=OPEN_BREAKER))
    session = runtime.session()
    for turn in range(3):
        for x in range(20):
            ticket = speculate_marked(session, ToolCall("t", {"x": x}), source="p", confidence=1.0)
            assert ticket.status == "rejected" and ticket.reason
        await spin()
        assert session.speculation_count() == 0
        session.end_turn()
        assert log.count() == 0, f"turn {turn}: a speculation ran"
    assert await session.execute(ToolCall("t", {"x": 1})) == "t:1"
    assert log.runs == [("t", "authoritative", {"x": 1})]
    assert session.stats().rejected == 60 and session.stats().launched == 0
    await session.close()


async def test_isolated_write_runs_early_only_on_a_snapshot(log: ExecLog) -> None:
    state = FakeState({"items": []})

    @tool(effect=Effect.ISOLATED_WRITE, state=state)
    async def append(target: dict[str, Any], item: str) -> int:
        log.add("append", {"item": item})
        target["items"].append(item)
        return len(target["items"])

    runtime = Runtime([append])
    session = runtime.session()
    assert speculate_marked(session, ToolCall("append", {"item": "a"})).launched
    assert speculate_marked(session, ToolCall("append", {"item": "b"})).launched
    await settle(session)
    assert log.count(phase="speculative") == 2
    assert state.value == {"items": []} and state.version == 0  # nothing reached live state
    assert [s.copy for s in state.snapshots] == [{"items": ["a"]}, {"items": ["b"]}]
    outcome = await session.execute_detailed(ToolCall("append", {"item": "a"}))
    assert (outcome.kind, outcome.value) == ("hit", 1)
    assert state.value == {"items": ["a"]}  # committed, exactly as the serial call would leave it
    session.end_turn()
    assert state.snapshots[1].discards == 1 and not state.snapshots[1].committed
    assert state.value == {"items": ["a"]}
    await session.close()


async def test_isolated_write_whose_base_changed_is_discarded_and_rerun(log: ExecLog) -> None:
    state = FakeState({"items": []})

    @tool(effect=Effect.ISOLATED_WRITE, state=state)
    async def append(target: dict[str, Any], item: str) -> list[str]:
        log.add("append", {"item": item})
        target["items"].append(item)
        return list(target["items"])

    runtime = Runtime([append])
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("append", {"item": "second"}))
    await settle(session)
    assert await session.execute(ToolCall("append", {"item": "first"})) == ["first"]
    outcome = await session.execute_detailed(ToolCall("append", {"item": "second"}))
    assert (outcome.kind, outcome.value) == ("miss", ["first", "second"])
    assert state.value == {"items": ["first", "second"]}
    assert EventKind.CONFLICT in kinds(events) and EventKind.COMMITTED not in kinds(events)
    assert log.count(phase="authoritative") == 2 and log.count(phase="speculative") == 1
    await session.close()
