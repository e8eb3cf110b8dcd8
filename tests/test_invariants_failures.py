"""Invariant 5 of docs/design.md ("Invariants"), failure transparency, attacked directly: a speculation
that raises, hangs, times out or is cancelled never surfaces, and neither does a failure around the
tool (validator, snapshot, commit, worker thread); a failing tool fails as it would serially.

Tools count every execution and know (via ``conftest.PHASE``) whether they run speculatively, so "never
ran" and "ran exactly once" are counted, not inferred from timing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from conftest import PHASE, ExecLog, FakeState, Gate, settle, speculate_marked, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.errors import ToolExecutionError
from forethought.telemetry import EventKind
from invariant_helpers import events_of, kinds


async def test_a_speculation_that_raises_never_surfaces(log: ExecLog) -> None:
    @tool(effect=Effect.READ_ONLY)
    async def flaky(x: int) -> int:
        log.add("flaky", {"x": x})
        if PHASE.get() == "speculative":
            raise RuntimeError("speculative failure")
        return x * 10

    runtime = Runtime([flaky])
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("flaky", {"x": 4}))
    await settle(session)
    outcome = await session.execute_detailed(ToolCall("flaky", {"x": 4}))
    assert (outcome.kind, outcome.value) == ("miss", 40)
    assert log.count(phase="authoritative") == 1
    assert EventKind.FAILED in kinds(events)
    assert all("speculative failure" not in repr(outcome.value) for _ in [0])
    await session.close()


async def test_a_failing_tool_fails_identically_with_and_without_speculation() -> None:
    @tool(effect=Effect.PURE)
    async def broken(x: int) -> int:
        raise ValueError(f"bad x {x}")

    async def run(speculate: bool) -> ToolExecutionError:
        runtime = Runtime([broken])
        session = runtime.session()
        if speculate:
            session.speculate(ToolCall("broken", {"x": 1}))
            await settle(session)
        with pytest.raises(ToolExecutionError) as info:
            await session.execute(ToolCall("broken", {"x": 1}))
        await session.close()
        return info.value

    serial, speculative = await run(False), await run(True)
    assert str(serial) == str(speculative) == "tool 'broken' failed: ValueError: bad x 1"
    assert type(serial.__cause__) is type(speculative.__cause__) is ValueError


async def test_a_hung_speculation_is_abandoned_and_the_call_runs_normally_once(log: ExecLog) -> None:
    never = Gate()
    cancelled: list[bool] = []

    @tool(effect=Effect.READ_ONLY)
    async def lookup(x: int) -> int:
        log.add("lookup", {"x": x})
        if PHASE.get() == "speculative":
            try:
                await never.wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        return x + 1

    runtime = Runtime([lookup], Policy(claim_wait_floor_s=0.02, claim_wait_factor=0.0))
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("lookup", {"x": 1}))
    await spin()
    assert never.entered == 1
    outcome = await session.execute_detailed(ToolCall("lookup", {"x": 1}))
    assert (outcome.kind, outcome.value) == ("miss", 2)
    await spin()
    assert cancelled == [True]
    assert log.count(phase="authoritative") == 1
    assert [k for k in kinds(events) if k is not EventKind.LAUNCHED] == [
        EventKind.CANCELLED, EventKind.WASTED, EventKind.MISS]
    await session.close()


async def test_a_speculation_past_its_timeout_fails_quietly(log: ExecLog) -> None:
    never = Gate()

    @tool(effect=Effect.READ_ONLY)
    async def lookup(x: int) -> int:
        log.add("lookup", {"x": x})
        if PHASE.get() == "speculative":
            await never.wait()
        return x

    runtime = Runtime([lookup], Policy(speculation_timeout_s=0.01))
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("lookup", {"x": 3}))
    await settle(session)
    assert (await session.execute_detailed(ToolCall("lookup", {"x": 3}))).kind == "miss"
    failed = [e for e in events if e.kind is EventKind.FAILED]
    assert len(failed) == 1 and "TimeoutError" in failed[0].detail
    await session.close()


async def test_a_cancelled_speculation_never_surfaces(log: ExecLog) -> None:
    gate = Gate()
    cancelled: list[bool] = []

    @tool(effect=Effect.PURE)
    async def slow(x: int) -> int:
        log.add("slow", {"x": x})
        if PHASE.get() == "speculative":
            try:
                await gate.wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        return -x

    runtime = Runtime([slow])
    session = runtime.session()
    ticket = speculate_marked(session, ToolCall("slow", {"x": 5}))
    await spin()
    assert ticket.key is not None and session.discard(ticket.key)
    await spin()
    assert cancelled == [True]
    assert await session.execute(ToolCall("slow", {"x": 5})) == -5
    assert log.count(phase="authoritative") == 1
    await session.close()


@pytest.mark.parametrize("failure", ["validator_raises_at_start", "validator_raises_at_claim",
                                     "validator_hangs_at_claim", "snapshot_raises", "commit_raises",
                                     "threaded_tool_raises"])
async def test_failures_around_the_tool_never_surface(failure: str, log: ExecLog) -> None:
    calls = {"validator": 0}
    never = Gate()

    async def validator(call: ToolCall) -> int:
        calls["validator"] += 1
        if failure == "validator_raises_at_start" or (failure == "validator_raises_at_claim"
                                                      and calls["validator"] == 2):
            raise RuntimeError("validator broke")
        if failure == "validator_hangs_at_claim" and calls["validator"] == 2:
            await never.wait()
        return 1

    class BrokenState(FakeState):
        def snapshot(self) -> Any:
            if failure == "snapshot_raises":
                raise RuntimeError("no snapshot")
            snap = super().snapshot()
            if failure == "commit_raises":
                def commit() -> bool:
                    raise RuntimeError("commit broke")
                snap.commit = commit  # type: ignore[method-assign]
            return snap

    state = BrokenState({"n": 0})
    stateful = failure in ("snapshot_raises", "commit_raises")
    threaded = failure == "threaded_tool_raises"

    def sync_work(x: int) -> int:
        log.add("work", {"x": x})
        if threading.current_thread().name.startswith("forethought-spec"):
            raise RuntimeError("thread broke")
        return x * 2

    async def work(x: int) -> int:
        log.add("work", {"x": x})
        return x * 2

    if stateful:
        async def stateful_work(target: dict[str, Any], x: int) -> int:
            return await work(x)

        t = tool(stateful_work, name="work", effect=Effect.ISOLATED_WRITE, state=state)
    elif threaded:
        t = tool(sync_work, name="work", effect=Effect.PURE, threaded=True)
    else:
        t = tool(work, effect=Effect.READ_ONLY, validator=validator)
    runtime = Runtime([t], Policy(claim_wait_floor_s=0.02, claim_wait_factor=0.0))
    session = runtime.session()
    speculate_marked(session, ToolCall("work", {"x": 21}))
    await settle(session)
    outcome = await session.execute_detailed(ToolCall("work", {"x": 21}))
    assert (outcome.kind, outcome.value) == ("miss", 42)
    await session.close()
    runtime.close()
