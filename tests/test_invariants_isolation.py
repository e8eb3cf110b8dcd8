"""Invariant 1 of docs/design.md ("Invariants"), isolation, attacked directly: no session sees another's
speculation, an expired or stale entry is never served, a result is served at most once, and
identical keys share one flight.

Tools count every execution and know (via ``conftest.PHASE``) whether they run speculatively, so "never
ran" and "ran exactly once" are counted, not inferred from timing."""

from __future__ import annotations

from conftest import PHASE, ExecLog, FakeClock, Gate, settle, speculate_marked, spin
from forethought import Effect, Runtime, ToolCall, tool
from forethought.telemetry import EventKind
from invariant_helpers import counting_tool, events_of, kinds


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
