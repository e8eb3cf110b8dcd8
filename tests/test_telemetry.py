"""Telemetry: one event per state change with its seconds, and the Prometheus exposition."""

from __future__ import annotations

import asyncio
import logging

import pytest

from conftest import FakeClock, Gate, settle, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.telemetry import Event, EventKind, Telemetry, key_hash


@tool(effect=Effect.PURE)
async def nap(x: int, secret: str = "") -> int:
    await asyncio.sleep(0.002)
    return x


async def scenario() -> tuple[Runtime, list[Event]]:
    """launched, hit, miss, wasted, cancelled and expired, each at least once (time from a fake clock)."""
    gate = Gate()
    clock = FakeClock()

    @tool(name="nap", effect=Effect.PURE)
    async def timed_nap(x: int, secret: str = "") -> int:
        clock.advance(0.002)  # the tool "takes" 2 ms
        return x

    @tool(effect=Effect.PURE)
    async def stuck(x: int) -> int:
        await gate.wait()
        return x

    @tool(effect=Effect.PURE, ttl_s=1.0)
    async def brief(x: int) -> int:
        clock.advance(0.001)
        return x

    runtime = Runtime([timed_nap, stuck, brief], Policy(max_calls_per_turn=100), clock=clock)
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session("s1")
    session.speculate(ToolCall("nap", {"x": 1, "secret": "hunter2"}), source="model", confidence=0.9)
    session.speculate(ToolCall("nap", {"x": 2}), source="pattern", confidence=0.4)
    session.speculate(ToolCall("stuck", {"x": 1}))
    session.speculate(ToolCall("brief", {"x": 1}))
    await spin()
    tasks = [e.task for e in session._store if e.tool.name != "stuck" and e.task is not None]
    await asyncio.wait(tasks)  # type: ignore[arg-type]
    clock.advance(1.0)  # brief's TTL passes; nap's (60 s) does not
    assert (await session.execute_detailed(ToolCall("nap", {"x": 1, "secret": "hunter2"}))).kind == "hit"
    assert (await session.execute_detailed(ToolCall("nap", {"x": 3}))).kind == "miss"
    assert (await session.execute_detailed(ToolCall("brief", {"x": 1}))).kind == "miss"
    session.end_turn()  # wastes nap x=2, cancels stuck
    await session.close()
    return runtime, events


async def test_events_cover_every_outcome_with_their_seconds() -> None:
    runtime, events = await scenario()
    by_kind: dict[EventKind, list[Event]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    for kind in (EventKind.LAUNCHED, EventKind.HIT, EventKind.MISS, EventKind.WASTED, EventKind.CANCELLED,
                 EventKind.EXPIRED):
        assert kind in by_kind, kind
    hit = by_kind[EventKind.HIT][0]
    assert (hit.session, hit.tool, hit.source, hit.confidence) == ("s1", "nap", "model", 0.9)
    assert hit.seconds > 0  # time saved
    assert all(e.seconds > 0 for e in by_kind[EventKind.WASTED])  # tool time thrown away
    assert by_kind[EventKind.MISS][0].seconds > 0  # time waited
    stats = runtime.stats()
    assert stats.saved_s == pytest.approx(hit.seconds)
    assert stats.wasted_s == pytest.approx(sum(e.seconds for e in by_kind[EventKind.WASTED]))
    assert (stats.hits, stats.misses, stats.launched) == (1, 2, 4)
    assert stats.alpha == pytest.approx(1 / 3)


async def test_events_carry_key_hashes_never_argument_values() -> None:
    runtime, events = await scenario()
    assert all("hunter2" not in repr(e) for e in events)
    hashed = {e.key_hash for e in events if e.tool == "nap"}
    key = 'nap\x1f{"secret":"hunter2","x":1}'
    assert runtime.telemetry.key_hash(key) in hashed and key_hash(key) not in hashed  # keyed, per runtime


async def test_prometheus_exposition() -> None:
    runtime, events = await scenario()
    text = runtime.telemetry.exposition().decode()
    assert 'forethought_speculations_total{outcome="hit",tool="nap"} 1.0' in text
    assert 'forethought_speculations_total{outcome="launched",tool="nap"} 2.0' in text
    for outcome in ("miss", "wasted", "cancelled", "expired"):
        assert f'forethought_speculations_total{{outcome="{outcome}"' in text
    assert 'forethought_tool_wait_seconds_bucket{le="+Inf",outcome="hit"} 1.0' in text
    assert 'forethought_tool_wait_seconds_count{outcome="miss"} 2.0' in text
    saved = sum(e.seconds for e in events if e.kind is EventKind.HIT)
    wasted = sum(e.seconds for e in events if e.kind is EventKind.WASTED)
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples["forethought_saved_seconds_total"]) == pytest.approx(saved)
    assert float(samples["forethought_wasted_seconds_total"]) == pytest.approx(wasted)
    assert "# TYPE forethought_tool_wait_seconds histogram" in text


def test_wait_histogram_buckets_are_cumulative_and_inclusive() -> None:
    telemetry = Telemetry()
    for seconds in (0.0005, 0.0006, 0.2, 100.0):
        telemetry.observe_wait("miss", seconds)
    text = telemetry.exposition().decode()
    assert 'forethought_tool_wait_seconds_bucket{le="0.0005",outcome="miss"} 1.0' in text
    assert 'forethought_tool_wait_seconds_bucket{le="0.001",outcome="miss"} 2.0' in text
    assert 'forethought_tool_wait_seconds_bucket{le="30.0",outcome="miss"} 3.0' in text
    assert 'forethought_tool_wait_seconds_bucket{le="+Inf",outcome="miss"} 4.0' in text
    assert 'forethought_tool_wait_seconds_sum{outcome="miss"} 100.2011' in text


def test_two_runtimes_keep_separate_metrics() -> None:
    a, b = Telemetry(), Telemetry()
    a.record(EventKind.HIT, "s", "t", "k", seconds=1.0)
    assert b"forethought_saved_seconds_total 0.0" in b.exposition()
    assert b"forethought_saved_seconds_total 1.0" in a.exposition()


async def test_a_failing_subscriber_never_disturbs_calls(caplog: pytest.LogCaptureFixture) -> None:
    runtime = Runtime([nap])
    seen: list[EventKind] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber broke")

    runtime.telemetry.subscribe(broken)
    unsubscribe = runtime.telemetry.subscribe(lambda e: seen.append(e.kind))
    session = runtime.session()
    with caplog.at_level(logging.ERROR, logger="forethought.telemetry"):
        session.speculate(ToolCall("nap", {"x": 1}))
        await settle(session)
        assert await session.execute(ToolCall("nap", {"x": 1})) == 1
    assert seen == [EventKind.LAUNCHED, EventKind.HIT]
    assert "subscriber broke" in caplog.text
    unsubscribe()
    unsubscribe()  # harmless twice
    await session.execute(ToolCall("nap", {"x": 2}))
    assert seen == [EventKind.LAUNCHED, EventKind.HIT]
    await session.close()


async def test_keys_with_lone_surrogates_are_hashed_not_crashed() -> None:
    runtime = Runtime([nap])
    seen: list[Event] = []
    runtime.telemetry.subscribe(seen.append)
    session = runtime.session()
    assert session.speculate(ToolCall("nap", {"x": 1, "secret": "\ud800"})).launched
    assert len(seen[0].key_hash) == 12
    await session.close()
