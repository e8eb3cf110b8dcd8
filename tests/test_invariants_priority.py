"""Invariant 4 of docs/design.md ("Invariants"), authoritative first, attacked directly: queued or blocked
speculations never delay an authoritative call, a late snapshot of a dropped one is discarded too,
and a session at its own limit does not starve the others.

Tools count every execution and know (via ``conftest.PHASE``) whether they run speculatively, so "never
ran" and "ran exactly once" are counted, not inferred from timing."""

from __future__ import annotations

import asyncio
import threading

from conftest import PHASE, ExecLog, FakeSnapshot, FakeState, Gate, settle, speculate_marked, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.telemetry import EventKind
from invariant_helpers import events_of


async def test_an_authoritative_call_is_not_delayed_by_100_queued_speculations(log: ExecLog) -> None:
    gate = Gate()
    order: list[str] = []

    @tool(effect=Effect.PURE)
    async def slow(x: int) -> int:
        log.add("slow", {"x": x})
        order.append(f"slow {x} starts ({PHASE.get()})")
        if PHASE.get() == "speculative":
            await gate.wait()
        return x

    @tool(effect=Effect.READ_ONLY)
    async def fast(x: int) -> int:
        order.append("fast runs")
        return x

    policy = Policy(max_concurrent=2, max_concurrent_per_session=2, max_calls_per_turn=1000,
                    max_cost_per_turn=1e9)
    runtime = Runtime([slow, fast], policy)
    session = runtime.session()
    for x in range(102):
        assert speculate_marked(session, ToolCall("slow", {"x": x})).launched
    await spin(20)
    assert gate.entered == 2 and runtime.scheduler.speculative_running == 2  # slots saturated, 100 queued
    assert await session.execute(ToolCall("fast", {"x": 1})) == 1
    # A call whose own speculation is still queued does not wait for the queue either.
    outcome = await session.execute_detailed(ToolCall("slow", {"x": 77}))
    assert (outcome.kind, outcome.value) == ("miss", 77)
    assert order[-2:] == ["fast runs", "slow 77 starts (authoritative)"]
    assert gate.entered == 2 and sum(1 for o in order if "speculative" in o) == 2
    gate.open()
    await settle(session)
    session.end_turn()
    await session.close()


async def test_authoritative_threads_never_queue_behind_blocked_speculative_threads() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def blocking(x: int) -> int:
        if threading.current_thread().name.startswith("forethought-spec"):
            started.release()
            release.wait(timeout=30)
        return x

    t = tool(blocking, effect=Effect.PURE, threaded=True)
    # A claim would wait up to 30 s on a speculation it believes is running.
    policy = Policy(max_concurrent=2, max_concurrent_per_session=2, max_calls_per_turn=100, claim_wait_floor_s=30)
    runtime = Runtime([t], policy)
    events = events_of(runtime)
    session = runtime.session()
    try:
        for x in range(2):
            session.speculate(ToolCall("blocking", {"x": x}))
        for _ in range(2):
            assert await asyncio.to_thread(started.acquire, True, 30)
        assert await session.execute(ToolCall("blocking", {"x": 99})) == 99
        # Discarding the blocked speculations frees their slots but not their threads: a new speculation
        # then holds a slot while its thread waits in the pool. Its tool has not started, so a claim must
        # not wait for it.
        assert session.end_turn() == 2
        session.speculate(ToolCall("blocking", {"x": 5}))
        await spin(10)
        assert runtime.scheduler.speculative_running == 1
        outcome = await session.execute_detailed(ToolCall("blocking", {"x": 5}))
        assert (outcome.kind, outcome.value) == ("miss", 5)
        cancelled = [e for e in events if e.kind is EventKind.CANCELLED]
        assert cancelled[-1].detail == "tool not started when claimed"
    finally:
        release.set()
        session.end_turn()
        await session.close()
        runtime.close()


async def test_a_snapshot_taken_by_a_worker_thread_after_a_discard_is_discarded_too() -> None:
    copying, finish_copy, discarded = threading.Event(), threading.Event(), threading.Event()

    class SignallingSnapshot(FakeSnapshot):
        def discard(self) -> None:
            super().discard()
            discarded.set()

    class SlowCopyState(FakeState):
        def snapshot(self) -> FakeSnapshot:
            copying.set()
            finish_copy.wait(timeout=30)
            snap = SignallingSnapshot(self)
            self.snapshots.append(snap)
            return snap

    state = SlowCopyState({"n": 0})

    def bump(target: dict[str, int]) -> int:
        target["n"] += 1
        return target["n"]

    t = tool(bump, effect=Effect.ISOLATED_WRITE, state=state, threaded=True)
    runtime = Runtime([t])
    session = runtime.session()
    try:
        session.speculate(ToolCall("bump", {}))
        assert await asyncio.to_thread(copying.wait, 30)
        assert session.end_turn() == 1  # dropped while the worker is still copying
        finish_copy.set()
        assert await asyncio.to_thread(discarded.wait, 10), "the late snapshot leaked"
        assert state.snapshots[0].discards == 1 and not state.snapshots[0].committed
        assert state.value == {"n": 0}
        assert await session.execute(ToolCall("bump", {})) == 1
    finally:
        finish_copy.set()
        await session.close()
        runtime.close()


async def test_a_session_at_its_own_limit_does_not_starve_other_sessions() -> None:
    gate = Gate()
    started: list[str] = []

    @tool(effect=Effect.PURE)
    async def job(who: str, n: int) -> str:
        started.append(f"{who}{n}")
        await gate.wait()
        return who

    runtime = Runtime([job], Policy(max_concurrent=2, max_concurrent_per_session=1))
    a, b = runtime.session("a"), runtime.session("b")
    for n in range(3):
        a.speculate(ToolCall("job", {"who": "a", "n": n}))
    await spin(10)
    b.speculate(ToolCall("job", {"who": "b", "n": 0}))
    await spin(10)
    assert started == ["a0", "b0"]
    gate.open()
    await settle(a)
    await settle(b)
    await a.close()
    await b.close()
