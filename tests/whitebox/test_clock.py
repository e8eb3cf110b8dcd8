"""The injectable clock: the fake moves only when told, and the runtime's parts all read the one they get."""

from __future__ import annotations

import time

import pytest

from forethought import Effect, Runtime, ToolCall, tool
from forethought._core.breaker import CircuitBreaker
from forethought._core.clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from forethought._core.policy import BreakerPolicy, Policy
from forethought.telemetry import Event, EventKind, Telemetry


def test_the_system_clock_is_time_monotonic_itself() -> None:
    assert SystemClock.monotonic is time.monotonic and SYSTEM_CLOCK.monotonic is time.monotonic
    assert isinstance(SYSTEM_CLOCK, Clock) and isinstance(FakeClock(), Clock)


def test_the_fake_clock_moves_only_forward_and_only_when_told() -> None:
    clock = FakeClock(5.0)
    assert clock.monotonic() == clock() == clock.now == 5.0
    clock.advance(2.5)
    assert clock.monotonic() == 7.5
    clock.set(10.0)
    assert clock.monotonic() == 10.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1.0)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(9.0)
    assert clock.monotonic() == 10.0


async def test_runtime_hands_its_clock_to_sessions_entries_breaker_and_telemetry() -> None:
    @tool(effect=Effect.PURE, ttl_s=3.0)
    async def echo(x: int) -> int:
        return x

    clock = FakeClock(100.0)
    runtime = Runtime([echo], Policy(breaker=BreakerPolicy(window=1, min_samples=1, max_waste_rate=0.0,
                                                           cooldown_s=7.0)), clock=clock)
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    session.speculate(ToolCall("echo", {"x": 1}))
    await session.wait_speculations()
    entry = next(iter(session._store))
    assert (entry.created, entry.expires, entry.started, entry.finished) == (100.0, 103.0, 100.0, 100.0)
    assert events[0].at == 100.0
    session.end_turn()  # one wasted guess opens the breaker until 100 + 7
    assert session.speculate(ToolCall("echo", {"x": 2})).reason == "circuit breaker open"
    clock.advance(7.0)
    assert session.speculate(ToolCall("echo", {"x": 2})).launched
    await session.close()
    runtime.close()


def test_a_breaker_and_telemetry_default_to_the_system_clock() -> None:
    breaker = CircuitBreaker(BreakerPolicy(window=1, min_samples=1, max_waste_rate=0.0, cooldown_s=1e-9))
    assert breaker.allows("s")
    telemetry = Telemetry()
    seen: list[Event] = []
    telemetry.subscribe(seen.append)
    before = time.monotonic()
    telemetry.record(EventKind.HIT, "s", "t", "k")
    assert seen and seen[0].at >= before
