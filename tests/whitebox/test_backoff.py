"""Doing no harm under load: the load signal, its level, and how speculation backs off (and says so)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import settle
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought._core.policy_file import policy_from_mapping
from forethought._core.pressure import FixedPressure, LoopPressure, Pressure, level_between
from forethought.errors import PolicyError
from forethought.telemetry import EventKind


@given(st.floats(allow_nan=True), st.floats(0, 100), st.floats(0, 100))
def test_level_is_between_zero_and_one_and_monotonic(value: float, low: float, high: float) -> None:
    level = level_between(value, low, high)
    assert 0.0 <= level <= 1.0
    if value == value:  # not NaN
        assert level_between(value + 1.0, low, high) >= level


def test_states_and_reason_in_words() -> None:
    assert Pressure(0.0).state == "normal"
    assert Pressure(0.4, 12.0, 0.5).state == "reduced"
    assert Pressure(1.0, 80.0, 2.0).state == "off"
    assert Pressure(0.4, 12.0, 0.5).reason == (
        "event-loop lag 12.0 ms, load 0.50 per core: speculation reduced (level 0.40)")


@pytest.mark.real_pressure
async def test_the_loop_signal_measures_late_timers_and_the_load_per_core() -> None:
    load = [0.0]
    signal = LoopPressure((5.0, 25.0), (1.0, 2.0), read_load=lambda: load[0], cores=2)
    assert signal.pressure().level == 0.0
    loop = asyncio.get_running_loop()
    signal.start()
    signal.start()  # idempotent
    for _ in range(40):  # the loop ran 60 ms late, again and again: the average follows
        signal._fire(loop, loop.time() - 0.060)
    pressure = signal.pressure()
    assert pressure.lag_ms > 50 and pressure.level == 1.0
    signal.lag_s = 0.0
    load[0] = 3.0  # 1.5 per core: half way between 1.0 and 2.0
    signal._load_read_at = float("-inf")
    assert signal.pressure().level == pytest.approx(0.5)
    signal.stop()
    signal.stop()


@pytest.mark.real_pressure
async def test_the_real_timer_keeps_firing_on_the_loop_until_stopped() -> None:
    signal = LoopPressure((5.0, 25.0), interval_s=0.001)
    signal.start()
    fired = signal._timer
    for _ in range(20):
        await asyncio.sleep(0.002)
        if signal._timer is not fired:
            break
    assert signal._timer is not fired  # re-armed itself after firing
    signal.stop()
    assert signal._timer is None


def slow_tool() -> object:
    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def look(x: int) -> int:
        return x

    return look


async def test_full_pressure_runs_only_certain_guesses_and_reports_the_change_once() -> None:
    pressure = FixedPressure(1.0, lag_ms=70.0)
    runtime = Runtime([slow_tool()], Policy(backoff=True), pressure=pressure)
    events = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    ticket = session.speculate(ToolCall("look", {"x": 1}), source="pattern", confidence=0.9)
    assert ticket.status == "rejected" and ticket.reason.startswith("backing off: event-loop lag 70.0 ms")
    assert session.speculate(ToolCall("look", {"x": 2}), source="stream", confidence=1.0).launched
    session.speculate(ToolCall("look", {"x": 3}), source="pattern", confidence=0.5)
    backoffs = [e for e in events if e.kind is EventKind.BACKOFF]
    assert len(backoffs) == 1 and "speculation off" in backoffs[0].detail
    pressure.level = 0.0
    assert session.speculate(ToolCall("look", {"x": 4}), source="pattern", confidence=0.9).launched
    backoffs = [e for e in events if e.kind is EventKind.BACKOFF]
    assert len(backoffs) == 2 and "speculation normal" in backoffs[1].detail
    await settle(session)
    await session.close()


async def test_rising_pressure_prices_waste_higher() -> None:
    pressure = FixedPressure(0.0)
    runtime = Runtime([slow_tool()], Policy(waste_weight=0.1, backoff_factor=20.0, backoff=True), pressure=pressure)
    session = runtime.session()
    assert session.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.3).launched
    pressure.level = 0.5  # a wasted second now costs 1.1 saved ones: a 0.3 guess is not worth it
    ticket = session.speculate(ToolCall("look", {"x": 2}), source="p", confidence=0.3)
    assert ticket.status == "rejected" and "worth" in ticket.reason
    assert session.speculate(ToolCall("look", {"x": 3}), source="p", confidence=0.8).launched
    await settle(session)
    await session.close()


async def test_backoff_off_never_reads_the_signal() -> None:
    pressure = FixedPressure(1.0)
    runtime = Runtime([slow_tool()], Policy(backoff=False), pressure=pressure)
    session = runtime.session()
    assert session.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.5).launched
    assert pressure.started == 0
    await settle(session)
    await session.close()
    runtime.close()


def test_backoff_settings_from_a_policy_file_and_their_errors() -> None:
    policy = policy_from_mapping({"backoff": False, "backoff_lag_ms": [2, 8], "backoff_load_per_core": [1, 1.5],
                                  "waste_weight": 0.5, "min_value_s": -1})
    assert (policy.backoff, policy.backoff_lag_ms, policy.backoff_load_per_core) == (False, (2.0, 8.0), (1.0, 1.5))
    assert (policy.waste_weight, policy.min_value_s) == (0.5, -1)
    for bad, words in (({"backoff": "yes"}, "true or false"), ({"backoff_lag_ms": [5]}, "[low, high]"),
                       ({"backoff_lag_ms": [9, 3]}, "low <= high"), ({"backoff_load_per_core": ["a", 2]}, "a number"),
                       ({"waste_weight": -1}, "waste_weight must be >= 0")):
        with pytest.raises(PolicyError, match=words.replace("[", r"\[").replace("]", r"\]")):
            policy_from_mapping(bad)


def test_the_environment_turns_backoff_off_by_default_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in (("off", False), ("0", False), ("No", False), ("", True), ("on", True)):
        monkeypatch.setenv("FORETHOUGHT_BACKOFF", value)
        assert Policy().backoff is expected
        assert policy_from_mapping({"backoff": True}).backoff is True  # a policy that says so wins


@pytest.mark.real_pressure
async def test_the_timer_stops_when_nobody_reads_the_level_and_restarts_on_the_next_read() -> None:
    from forethought._core import pressure as _pressure

    signal = LoopPressure((5.0, 25.0))
    loop = asyncio.get_running_loop()
    signal.start()
    signal._read_at -= _pressure.IDLE_STOP_S + 1  # nobody has looked for a while
    signal._fire(loop, loop.time())
    assert signal._timer is None and signal.lag_s == 0.0
    signal.pressure()
    signal.start()
    assert signal._timer is not None
    signal.stop()
