"""Session behaviour around the invariants: claims, budgets, thresholds, policy, breaker, accounting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import PHASE, ExecLog, FakeClock, Gate, settle, speculate_marked, spin
from forethought import Effect, PartialRule, Runtime, ToolCall, tool
from forethought._core.breaker import CircuitBreaker
from forethought._core.policy import BreakerPolicy, Policy, ToolPolicy
from forethought.errors import CallError, PolicyError, ToolExecutionError
from forethought.telemetry import Event, EventKind


def echo_tool(log: ExecLog, effect: Effect = Effect.PURE, **kwargs: Any) -> Any:
    @tool(effect=effect, **kwargs)
    async def echo(x: int) -> int:
        log.add("echo", {"x": x})
        return x

    return echo


def recorded(runtime: Runtime) -> list[Event]:
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    return events


async def test_a_claim_waits_for_its_running_speculation_and_hits(log: ExecLog) -> None:
    gate = Gate()

    @tool(effect=Effect.PURE)
    async def slow(x: int) -> int:
        log.add("slow", {"x": x})
        await gate.wait()
        return x * 2

    session = Runtime([slow]).session()
    speculate_marked(session, ToolCall("slow", {"x": 4}))
    await spin()
    claim = asyncio.ensure_future(session.execute_detailed(ToolCall("slow", {"x": 4})))
    await spin()
    assert not claim.done()
    gate.open()
    outcome = await claim
    assert (outcome.kind, outcome.value) == ("hit", 8)
    assert log.runs == [("slow", "speculative", {"x": 4})]
    await session.close()


async def test_a_claim_of_a_queued_speculation_cancels_it_and_runs_at_once(log: ExecLog) -> None:
    session = Runtime([echo_tool(log)]).session()
    speculate_marked(session, ToolCall("echo", {"x": 1}))
    outcome = await session.execute_detailed(ToolCall("echo", {"x": 1}))  # the task never got to run
    assert outcome.kind == "miss"
    await spin()
    assert log.runs == [("echo", "authoritative", {"x": 1})]
    assert session.stats().cancelled == 1 and session.stats().wasted == 0
    await session.close()


async def test_discard_cancels_running_work_and_end_turn_evicts_everything(log: ExecLog) -> None:
    gate = Gate()
    cancelled: list[int] = []

    @tool(effect=Effect.PURE)
    async def slow(x: int) -> int:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return x

    runtime = Runtime([slow])
    session = runtime.session()
    tickets = [session.speculate(ToolCall("slow", {"x": x})) for x in range(3)]
    await spin()
    assert tickets[0].key is not None and session.discard(tickets[0].key)
    assert not session.discard(tickets[0].key)
    assert session.end_turn() == 2
    await spin()
    assert sorted(cancelled) == [0, 1, 2]
    assert session.speculation_count() == 0
    stats = session.stats()
    assert (stats.cancelled, stats.wasted) == (3, 3)
    await session.close()


async def test_turn_budgets_in_calls_and_cost_units(log: ExecLog) -> None:
    cheap = echo_tool(log, cost_units=1.0)
    policy = Policy(max_calls_per_turn=3, max_cost_per_turn=2.5)
    session = Runtime([cheap], policy).session()
    statuses = [session.speculate(ToolCall("echo", {"x": x})) for x in range(4)]
    assert [t.status for t in statuses] == ["launched", "launched", "rejected", "rejected"]
    assert "cost units" in statuses[2].reason
    session.end_turn()
    session2 = Runtime([cheap], Policy(max_calls_per_turn=2, max_cost_per_turn=100)).session()
    statuses = [session2.speculate(ToolCall("echo", {"x": x})) for x in range(3)]
    assert [t.status for t in statuses] == ["launched", "launched", "rejected"]
    assert "2 speculative calls" in statuses[2].reason
    # A deduplicated guess costs nothing; a new turn restores the budget.
    assert session2.speculate(ToolCall("echo", {"x": 0})).status == "deduplicated"
    session2.end_turn()
    assert session2.speculate(ToolCall("echo", {"x": 9})).launched
    await session.close()
    await session2.close()


async def test_confidence_threshold_and_invalid_confidences(log: ExecLog) -> None:
    session = Runtime([echo_tool(log)], Policy(min_confidence=0.5)).session()
    assert not session.speculate(ToolCall("echo", {"x": 1}), confidence=0.49).launched
    assert session.speculate(ToolCall("echo", {"x": 1}), confidence=0.5).launched
    for bad in (float("nan"), -0.1, 1.5, "high", None, True):
        ticket = session.speculate(ToolCall("echo", {"x": 2}), confidence=bad)  # type: ignore[arg-type]
        assert ticket.status == "rejected" and "between 0 and 1" in ticket.reason
    await session.close()


async def test_policy_denies_and_overrides(log: ExecLog) -> None:
    echo = echo_tool(log)
    session = Runtime([echo], Policy(tools={"echo": ToolPolicy(speculate=False)})).session()
    assert session.speculate(ToolCall("echo", {"x": 1})).reason == "policy denies speculation of this tool"
    session2 = Runtime([echo], Policy(max_concurrent=0)).session()
    assert "disabled" in session2.speculate(ToolCall("echo", {"x": 1})).reason
    session3 = Runtime([echo], Policy(tools={"echo": ToolPolicy(ttl_s=7.0, cost_units=3.0)})).session()
    assert session3.tools.get_tool("echo").ttl_s == 7.0 and session3.tools.get_tool("echo").cost_units == 3.0
    assert log.count() == 0
    for s in (session, session2, session3):
        await s.close()


async def test_bad_guesses_never_raise_but_bad_authoritative_calls_do(log: ExecLog) -> None:
    runtime = Runtime([echo_tool(log)])
    events = recorded(runtime)
    session = runtime.session()
    for guess in (ToolCall("nope", {}), ToolCall("echo", {"x": "one"}), ToolCall("echo", {"x": float("nan")}),
                  ToolCall("echo", [1]), {"name": "echo"}, ToolCall(None, {})):  # type: ignore[arg-type]
        assert session.speculate(guess).status == "rejected"  # type: ignore[arg-type]
    assert {e.tool for e in events} <= {"?", "echo"}
    with pytest.raises(CallError):
        await session.execute(ToolCall("echo", {"x": "one"}))
    with pytest.raises(CallError):
        await session.execute(ToolCall("nope", {}))
    assert log.count() == 0
    await session.close()


async def test_a_closed_session_speculates_nothing_but_still_executes(log: ExecLog) -> None:
    runtime = Runtime([echo_tool(log)])
    session = runtime.session("s")
    session.speculate(ToolCall("echo", {"x": 1}))
    await session.close()
    assert session.closed and session.speculation_count() == 0
    assert session.speculate(ToolCall("echo", {"x": 2})).reason == "session closed"
    assert await session.execute(ToolCall("echo", {"x": 3})) == 3
    await session.close()  # idempotent


async def test_the_circuit_breaker_turns_a_wasteful_tool_off_and_back_on(log: ExecLog, clock: FakeClock) -> None:
    policy = Policy(max_calls_per_turn=100, breaker=BreakerPolicy(window=4, min_samples=4, max_waste_rate=0.5,
                                                                  cooldown_s=10))
    runtime = Runtime([echo_tool(log)], policy, clock=clock)  # the breaker reads the runtime's clock
    session = runtime.session()
    for x in range(4):  # four wasted guesses
        session.speculate(ToolCall("echo", {"x": x}))
        await settle(session)
        session.end_turn()
    ticket = session.speculate(ToolCall("echo", {"x": 9}))
    assert ticket.reason == "circuit breaker open"
    clock.advance(9.9)
    assert not session.speculate(ToolCall("echo", {"x": 9})).launched
    clock.advance(0.2)
    assert session.speculate(ToolCall("echo", {"x": 9})).launched
    assert runtime.breaker.trips("tool:echo") == 1
    await session.close()


async def test_the_breaker_counts_unclaimed_failures_as_errors(log: ExecLog, clock: FakeClock) -> None:
    @tool(effect=Effect.PURE)
    async def broken(x: int) -> int:
        raise RuntimeError("no")

    policy = Policy(max_calls_per_turn=100, breaker=BreakerPolicy(min_samples=3, max_error_rate=0.5))
    runtime = Runtime([broken], policy, breaker=CircuitBreaker(policy.breaker, clock=clock))
    session = runtime.session()
    for x in range(3):
        session.speculate(ToolCall("broken", {"x": x}))
    await settle(session)
    session.end_turn()
    assert session.speculate(ToolCall("broken", {"x": 5})).reason == "circuit breaker open"
    assert session.stats().failed == 3
    await session.close()


async def test_saved_time_never_exceeds_the_speculations_tool_time(log: ExecLog) -> None:
    gate = Gate()

    @tool(effect=Effect.PURE, partial=PartialRule(
        covers=lambda cached, requested: requested["n"] <= cached["n"],
        narrow=lambda requested, result: result[: requested["n"]]))
    async def first(n: int) -> list[int]:
        await gate.wait()
        await asyncio.sleep(0.005)
        return list(range(n))

    runtime = Runtime([first])
    session = runtime.session()
    session.speculate(ToolCall("first", {"n": 10}))
    await spin()
    entry = next(iter(session._store))
    gate.open()
    await settle(session)
    outcomes = [await session.execute_detailed(ToolCall("first", {"n": n})) for n in (3, 5, 7, 9)]
    assert [o.kind for o in outcomes] == ["partial_hit"] * 4
    assert [o.value for o in outcomes] == [list(range(n)) for n in (3, 5, 7, 9)]
    hit = await session.execute_detailed(ToolCall("first", {"n": 10}))
    assert hit.kind == "hit"
    total = sum(o.saved_s for o in [*outcomes, hit])
    assert 0 < total <= entry.run_seconds
    assert session.stats().saved_s == pytest.approx(total)
    assert runtime.telemetry.saved_s == pytest.approx(total)
    session.end_turn()
    assert session.stats().wasted == 0  # it served calls: not waste
    await session.close()


async def test_partial_rules_that_raise_are_ignored(log: ExecLog) -> None:
    def covers(cached: Any, requested: Any) -> bool:
        raise RuntimeError("rule broke")

    @tool(effect=Effect.PURE, partial=PartialRule(covers=covers, narrow=lambda r, v: v))
    async def f(n: int) -> int:
        log.add("f", {"n": n})
        return n

    session = Runtime([f]).session()
    session.speculate(ToolCall("f", {"n": 1}))
    await settle(session)
    assert (await session.execute_detailed(ToolCall("f", {"n": 2}))).kind == "miss"
    await session.close()


async def test_a_changed_validator_token_makes_the_result_stale(log: ExecLog) -> None:
    version = {"v": 1}

    @tool(effect=Effect.PURE, validator=lambda call: version["v"])
    async def f(n: int) -> str:
        log.add("f", {"n": n})
        return f"{n}@{version['v']}"

    session = Runtime([f]).session()
    speculate_marked(session, ToolCall("f", {"n": 1}))
    await settle(session)
    version["v"] = 2
    outcome = await session.execute_detailed(ToolCall("f", {"n": 1}))
    assert (outcome.kind, outcome.value) == ("miss", "1@2")
    assert session.stats().stale == 1
    speculate_marked(session, ToolCall("f", {"n": 1}))
    await settle(session)
    assert (await session.execute_detailed(ToolCall("f", {"n": 1}))).kind == "hit"
    await session.close()


async def test_a_failed_authoritative_call_still_counts_as_a_miss(log: ExecLog) -> None:
    @tool(effect=Effect.PURE)
    async def broken() -> None:
        raise KeyError("x")

    runtime = Runtime([broken])
    session = runtime.session()
    with pytest.raises(ToolExecutionError, match="KeyError"):
        await session.execute(ToolCall("broken", {}))
    assert session.stats().misses == 1 and runtime.stats().misses == 1
    await session.close()


async def test_every_launched_speculation_ends_exactly_once(log: ExecLog) -> None:
    gate = Gate()

    @tool(effect=Effect.READ_ONLY)
    async def t(x: int) -> int:
        if PHASE.get() == "speculative" and x >= 3:
            await gate.wait()
        if x == 1:
            raise RuntimeError("boom")
        return x

    runtime = Runtime([t], Policy(claim_wait_floor_s=0.01, claim_wait_factor=0.0))
    events = recorded(runtime)
    session = runtime.session()
    for x in range(6):
        speculate_marked(session, ToolCall("t", {"x": x}))
    await spin(10)
    assert (await session.execute_detailed(ToolCall("t", {"x": 0}))).kind == "hit"
    assert (await session.execute_detailed(ToolCall("t", {"x": 3}))).kind == "miss"  # running too long
    with pytest.raises(ToolExecutionError):
        await session.execute(ToolCall("t", {"x": 1}))
    session.end_turn()
    terminal = {EventKind.HIT, EventKind.FAILED, EventKind.CANCELLED, EventKind.EXPIRED, EventKind.STALE,
                EventKind.CONFLICT}
    by_key: dict[str, list[EventKind]] = {}
    for e in events:
        if e.kind is not EventKind.MISS:
            by_key.setdefault(e.key_hash, []).append(e.kind)
    assert len(by_key) == 6
    for key, history in by_key.items():
        assert history[0] is EventKind.LAUNCHED, key
        ends = [k for k in history if k in terminal]
        assert len(ends) <= 1 and history.count(EventKind.WASTED) <= 1, history
        assert ends or history[-1] is EventKind.WASTED, history
    stats = session.stats()
    assert stats.launched == 6 and stats.hits == 1 and stats.failed == 1
    await session.close()


async def test_session_tools_override_runtime_tools_for_that_session_only(log: ExecLog) -> None:
    @tool(effect=Effect.PURE, name="echo")
    async def loud(x: int) -> str:
        return f"{x}!"

    runtime = Runtime([echo_tool(log)])
    plain, special = runtime.session(), runtime.session(tools=[loud])
    assert await plain.execute(ToolCall("echo", {"x": 1})) == 1
    assert await special.execute(ToolCall("echo", {"x": 1})) == "1!"
    await plain.close()
    await special.close()


async def test_cancelling_a_waiting_claim_cancels_and_accounts_its_speculation(log: ExecLog) -> None:
    gate = Gate()
    cancelled: list[bool] = []

    @tool(effect=Effect.PURE)
    async def slow(x: int) -> int:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return x

    runtime = Runtime([slow])
    events = recorded(runtime)
    session = runtime.session()
    session.speculate(ToolCall("slow", {"x": 1}))
    await spin()
    claim = asyncio.ensure_future(session.execute(ToolCall("slow", {"x": 1})))
    await spin()
    claim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await claim
    await spin()
    assert cancelled == [True]
    assert [e.kind for e in events][-2:] == [EventKind.CANCELLED, EventKind.WASTED]
    assert events[-2].detail == "claim cancelled"
    await session.close()


async def test_a_guess_identical_to_a_dead_entry_replaces_it(log: ExecLog) -> None:
    data = {"v": 1}

    @tool(effect=Effect.READ_ONLY)
    async def get() -> int:
        log.add("get", {})
        return data["v"]

    @tool(effect=Effect.DESTRUCTIVE)
    async def put(v: int) -> None:
        data["v"] = v

    session = Runtime([get, put]).session()
    assert session.speculate(ToolCall("get", {})).launched
    await settle(session)
    await session.execute(ToolCall("put", {"v": 2}))
    assert session.speculate(ToolCall("get", {})).launched  # the old run read v=1: stale, so relaunched
    await settle(session)
    assert (await session.execute_detailed(ToolCall("get", {}))).value == 2
    assert session.stats().stale == 1 and session.stats().hits == 1
    await session.close()


def test_policy_values_are_validated() -> None:
    for bad in ({"max_cost_per_turn": -1}, {"claim_wait_floor_s": -0.1}, {"speculation_timeout_s": float("nan")},
                {"min_confidence": 2}):
        with pytest.raises(PolicyError):
            Policy(**bad)  # type: ignore[arg-type]
    for bad_breaker in ({"window": 0}, {"min_samples": 0}, {"max_waste_rate": 1.5}, {"cooldown_s": -1}):
        with pytest.raises(PolicyError):
            BreakerPolicy(**bad_breaker)  # type: ignore[arg-type]
