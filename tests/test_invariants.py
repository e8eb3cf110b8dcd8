"""The invariants of docs/design.md ("Invariants") 1 (isolation), 2 (side-effect boundary), 4 (authoritative
first) and 5 (failure transparency), attacked directly. Tools count every execution and know (via
``conftest.PHASE``) whether they run speculatively, so "never ran" and "ran exactly once" are counted, not
inferred from timing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PHASE, ExecLog, FakeClock, FakeSnapshot, FakeState, Gate, settle, speculate_marked, spin
from forethought._calls import ToolCall
from forethought._policy import BreakerPolicy, Policy, ToolPolicy
from forethought._runtime import Runtime
from forethought._tools import Effect, Tool, tool
from forethought.errors import ToolExecutionError
from forethought.telemetry import Event, EventKind

OPEN_BREAKER = BreakerPolicy(max_waste_rate=1.0, max_error_rate=1.0)


def counting_tool(log: ExecLog, name: str, effect: Effect | None = None, **kwargs: Any) -> Tool:
    async def fn(x: int = 0) -> str:
        log.add(name, {"x": x})
        return f"{name}:{x}"

    fn.__name__ = name
    if effect is None:
        return tool(fn, **kwargs)  # effect left undeclared
    return tool(fn, effect=effect, **kwargs)


def events_of(runtime: Runtime) -> list[Event]:
    seen: list[Event] = []
    runtime.telemetry.subscribe(seen.append)
    return seen


def kinds(events: list[Event], tool_name: str | None = None) -> list[EventKind]:
    return [e.kind for e in events if tool_name is None or e.tool == tool_name]


# --- invariant 2: side-effect boundary ---------------------------------------------------------------


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


# --- invariant 5: failure transparency ---------------------------------------------------------------


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


# --- invariant 4: authoritative first ----------------------------------------------------------------


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


# --- invariant 1: isolation ----------------------------------------------------------------------------


async def test_one_session_never_sees_another_sessions_speculation(log: ExecLog) -> None:
    t = counting_tool(log, "t", Effect.READ_ONLY)
    runtime = Runtime([t])
    events = events_of(runtime)
    a, b = runtime.session("a"), runtime.session("b")
    speculate_marked(a, ToolCall("t", {"x": 1}))
    await settle(a)
    outcome = await b.execute_detailed(ToolCall("t", {"x": 1}))
    assert outcome.kind == "miss"
    assert a.speculation_count() == 1 and b.speculation_count() == 0
    assert (await a.execute_detailed(ToolCall("t", {"x": 1}))).kind == "hit"
    assert b.stats().hits == 0 and b.stats().launched == 0 and a.stats().hits == 1
    assert {e.session for e in events if e.kind is EventKind.HIT} == {"a"}
    await a.close()
    await b.close()


async def test_expired_entries_are_never_served(log: ExecLog, clock: FakeClock) -> None:
    t = counting_tool(log, "t", Effect.PURE, ttl_s=10.0)
    runtime = Runtime([t], clock=clock)
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("t", {"x": 1}))
    await settle(session)
    clock.advance(9.999)
    assert (await session.execute_detailed(ToolCall("t", {"x": 1}))).kind == "hit"  # still fresh
    speculate_marked(session, ToolCall("t", {"x": 1}))
    await settle(session)
    clock.advance(10.0)  # exactly the TTL: expired
    outcome = await session.execute_detailed(ToolCall("t", {"x": 1}))
    assert outcome.kind == "miss" and log.count(phase="authoritative") == 1
    assert kinds(events)[-3:] == [EventKind.EXPIRED, EventKind.WASTED, EventKind.MISS]
    # A guess identical to an expired entry replaces it rather than joining it.
    speculate_marked(session, ToolCall("t", {"x": 2}))
    await settle(session)
    clock.advance(10.0)
    assert speculate_marked(session, ToolCall("t", {"x": 2})).launched
    assert session.speculation_count() == 1 and log.count(phase="speculative") == 3
    assert kinds(events)[-3:] == [EventKind.EXPIRED, EventKind.WASTED, EventKind.LAUNCHED]
    await session.close()


async def test_speculate_evicts_expired_guesses_of_other_calls(log: ExecLog, clock: FakeClock) -> None:
    """An expired guess leaves the store (and is accounted as expired and wasted) at the next speculate."""
    t = counting_tool(log, "t", Effect.PURE, ttl_s=5.0)
    u = counting_tool(log, "u", Effect.PURE, ttl_s=50.0)
    runtime = Runtime([t, u], clock=clock)
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("t", {"x": 1}))
    speculate_marked(session, ToolCall("u", {"x": 1}))
    await settle(session)
    clock.advance(4.0)
    speculate_marked(session, ToolCall("u", {"x": 2}))
    assert session.speculation_count() == 3  # nothing expired yet
    clock.advance(1.0)
    speculate_marked(session, ToolCall("u", {"x": 3}))
    assert session.speculation_count() == 3 and not session.has_speculation(session.resolve(ToolCall("t", {"x": 1}))[2])
    expired = [e for e in events if e.kind is EventKind.EXPIRED]
    assert [e.tool for e in expired] == ["t"]
    assert [e.tool for e in events if e.kind is EventKind.WASTED] == ["t"]
    assert session.stats().expired == 1 and session.stats().wasted == 1
    await settle(session)
    assert (await session.execute_detailed(ToolCall("u", {"x": 1}))).kind == "hit"
    await session.close()


async def test_a_result_is_served_at_most_once(log: ExecLog) -> None:
    t = counting_tool(log, "t", Effect.PURE)
    session = Runtime([t]).session()
    speculate_marked(session, ToolCall("t", {"x": 1}))
    await settle(session)
    first = await session.execute_detailed(ToolCall("t", {"x": 1}))
    second = await session.execute_detailed(ToolCall("t", {"x": 1}))
    assert (first.kind, second.kind) == ("hit", "miss")
    await session.close()


async def test_a_read_that_started_before_a_write_is_not_served_after_it() -> None:
    data = {"k": "old"}
    release = Gate()

    @tool(effect=Effect.READ_ONLY)
    async def get(key: str) -> str:
        if PHASE.get() == "speculative":
            value = data[key]
            await release.wait()  # still running when the write happens
            return value
        return data[key]

    @tool(effect=Effect.DESTRUCTIVE)
    async def put(key: str, value: str) -> None:
        data[key] = value

    runtime = Runtime([get, put])
    events = events_of(runtime)
    session = runtime.session()
    speculate_marked(session, ToolCall("get", {"key": "k"}))
    await spin()
    await session.execute(ToolCall("put", {"key": "k", "value": "new"}))
    release.open()
    await settle(session)
    assert await session.execute(ToolCall("get", {"key": "k"})) == "new"
    assert EventKind.STALE in kinds(events) and EventKind.HIT not in kinds(events)
    await session.close()


async def test_identical_keys_are_single_flight(log: ExecLog) -> None:
    @tool(effect=Effect.PURE)
    async def area(width: float, height: float, unit: str = "m") -> float:
        log.add("area", {"width": width, "height": height})
        return width * height

    runtime = Runtime([area])
    session = runtime.session()
    tickets = [speculate_marked(session, ToolCall("area", args), source=f"p{i}") for i, args in enumerate([
        {"width": 2, "height": 3}, {"height": 3, "width": 2}, {"width": 2, "height": 3, "unit": "m"}])]
    assert [t.status for t in tickets] == ["launched", "deduplicated", "deduplicated"]
    assert len({t.key for t in tickets}) == 1
    # 2.0 is another spelling the tool can tell from 2 (it would multiply floats): its own flight.
    assert speculate_marked(session, ToolCall("area", {"width": 2.0, "height": 3})).launched
    await settle(session)
    assert (await session.execute_detailed(ToolCall("area", {"height": 3, "width": 2}))).kind == "hit"
    assert log.count() == 2
    assert session.stats().deduplicated == 2
    await session.close()


# --- all of it at once: random interleavings against a serial model ------------------------------------

KEYS = ("a", "b")
calls_strategy = st.one_of(
    st.builds(lambda k: ToolCall("get", {"key": k}), st.sampled_from(KEYS)),
    st.builds(lambda k, v: ToolCall("put", {"key": k, "value": v}), st.sampled_from(KEYS), st.integers(0, 3)),
    st.builds(lambda by: ToolCall("incr", {"by": by}), st.integers(1, 2)),
    st.just(ToolCall("peek", {})),
)
operations = st.lists(st.one_of(
    st.tuples(st.just("speculate"), calls_strategy),
    st.tuples(st.just("execute"), calls_strategy),
    st.tuples(st.just("settle"), st.none()),
    st.tuples(st.just("end_turn"), st.none()),
    st.tuples(st.just("spin"), st.none()),
), max_size=40)


def serial_model(ops: list[tuple[str, Any]]) -> list[Any]:
    kv: dict[str, int] = {}
    n = 0
    out: list[Any] = []
    for op, call in ops:
        if op != "execute":
            continue
        if call.name == "get":
            out.append(kv.get(call.arguments["key"], -1))
        elif call.name == "put":
            kv[call.arguments["key"]] = call.arguments["value"]
            out.append(None)
        elif call.name == "incr":
            n += call.arguments["by"]
            out.append(n)
        else:
            out.append(n)
    return out


async def run_interleaved(ops: list[tuple[str, Any]]) -> list[Any]:
    kv: dict[str, int] = {}
    state = FakeState({"n": 0})

    @tool(effect=Effect.READ_ONLY)
    async def get(key: str) -> int:
        await asyncio.sleep(0)
        return kv.get(key, -1)

    @tool(effect=Effect.DESTRUCTIVE)
    async def put(key: str, value: int) -> None:
        await asyncio.sleep(0)
        kv[key] = value

    @tool(effect=Effect.ISOLATED_WRITE, state=state)
    async def incr(target: dict[str, int], by: int) -> int:
        await asyncio.sleep(0)
        target["n"] += by
        return target["n"]

    @tool(effect=Effect.READ_ONLY, state=state)
    async def peek(target: dict[str, int]) -> int:
        return target["n"]

    runtime = Runtime([get, put, incr, peek], Policy(max_calls_per_turn=1000, breaker=OPEN_BREAKER))
    session = runtime.session()
    out: list[Any] = []
    for op, call in ops:
        if op == "speculate":
            session.speculate(call)
        elif op == "execute":
            out.append(await session.execute(call))
        elif op == "settle":
            await settle(session)
        elif op == "spin":
            await asyncio.sleep(0)
        else:
            session.end_turn()
    await session.close()
    stats = session.stats()
    assert stats.saved_s >= 0 and stats.hits + stats.misses == len(out)
    return out


@settings(max_examples=150, deadline=None)
@given(operations)
def test_random_interleavings_give_exactly_the_serial_outputs(ops: list[tuple[str, Any]]) -> None:
    assert asyncio.run(run_interleaved(ops)) == serial_model(ops)
