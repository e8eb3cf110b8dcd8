"""Pricing guesses: calibration per source and bin, worth, admission by value, preemption in a session."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import Gate, settle, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought._core.pricing import BINS, Calibration, worth
from forethought.telemetry import EventKind


def test_an_unseen_bin_trusts_the_predictor_and_observations_take_over() -> None:
    calibration = Calibration(prior_weight=4)
    assert calibration.p_hit("pattern", 0.8) == 0.8
    for _ in range(96):
        calibration.record("pattern", 0.8, hit=False)
    assert calibration.p_hit("pattern", 0.8) == pytest.approx(4 * 0.8 / 100)
    assert calibration.p_hit("pattern", 0.3) == 0.3  # another bin
    assert calibration.p_hit("model", 0.8) == 0.8  # another source


def test_the_reliability_table_reports_predicted_and_observed_rates() -> None:
    calibration = Calibration()
    for i in range(10):
        calibration.record("model", 0.95, hit=i < 9)
        calibration.record("pattern", 0.15, hit=i < 1)
    rows = {(r.source, r.low): r for r in calibration.table()}
    model = rows[("model", 0.9)]
    assert (model.guesses, model.hit_rate, model.mean_confidence) == (10, 0.9, pytest.approx(0.95))
    assert rows[("pattern", 0.1)].hit_rate == 0.1
    assert [r.source for r in calibration.table(["pattern"])] == ["pattern"]


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_bad_confidences_are_not_recorded_and_never_crash(confidence: float) -> None:
    calibration = Calibration()
    calibration.record("x", confidence, hit=True)
    if not (0.0 <= confidence <= 1.0):
        assert calibration.table() == []
    else:
        assert len(calibration.table()) == 1
        assert calibration.table()[0].low == min(BINS - 1, int(confidence * BINS)) / BINS


@given(st.floats(0, 1), st.floats(0, 100), st.one_of(st.none(), st.floats(0, 100)), st.floats(0, 10),
       st.floats(0, 10))
def test_worth_is_bounded_by_what_can_be_hidden(p: float, run_s: float, eta_s: float | None, units: float,
                                                weight: float) -> None:
    w = worth(p, run_s, eta_s, units, weight)
    assert 0.0 <= w.hide_s <= run_s
    if eta_s is not None:
        assert w.hide_s <= eta_s
    assert w.value <= p * run_s + 1e-9
    assert w.cost_s >= 0.0
    if p == 1.0:
        assert w.cost_s == 0.0


def echo(effect: Effect = Effect.READ_ONLY, expected_s: float | None = 1.0) -> tuple[object, Gate, list[int]]:
    gate = Gate()
    ran: list[int] = []

    @tool(effect=effect, expected_s=expected_s)
    async def look(x: int) -> int:
        ran.append(x)
        await gate.wait()
        return x

    return look, gate, ran


async def test_a_guess_worth_less_than_it_costs_is_rejected_with_its_price() -> None:
    look, gate, _ = echo()
    runtime = Runtime([look], Policy(waste_weight=1.0))  # a wasted second costs as much as a saved one
    session = runtime.session()
    assert session.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.6).launched
    ticket = session.speculate(ToolCall("look", {"x": 2}), source="p", confidence=0.4)
    assert ticket.status == "rejected" and "worth" in ticket.reason and "P(hit) 0.40" in ticket.reason
    # A call expected in 0.1 s can hide at most 0.1 s of a 1 s tool: a 0.9 guess is not worth its waste.
    late = session.speculate(ToolCall("look", {"x": 3}), source="p", confidence=0.9, eta_s=0.05)
    assert late.status == "rejected"
    gate.open()
    await settle(session)
    session.end_turn()
    await session.close()


async def test_certain_guesses_are_always_worth_running() -> None:
    look, gate, _ = echo(expected_s=5.0)
    runtime = Runtime([look], Policy(waste_weight=100.0))
    session = runtime.session()
    assert session.speculate(ToolCall("look", {"x": 1}), source="stream", confidence=1.0, eta_s=0.0).launched
    gate.open()
    await settle(session)
    await session.close()


async def test_calibration_learns_from_outcomes_and_prices_a_bad_source_out() -> None:
    look, gate, _ = echo()
    gate.open()
    runtime = Runtime([look], Policy(waste_weight=0.5, max_calls_per_turn=100))
    session = runtime.session()
    turns = 0
    while session.speculate(ToolCall("look", {"x": turns}), source="bad", confidence=0.9).launched:
        await settle(session)
        assert await session.execute(ToolCall("look", {"x": -1})) == -1  # the model called something else
        session.end_turn()
        turns += 1
        assert turns < 50
    assert turns >= 3  # it took observations, not the predictor's word, to price it out
    assert runtime.calibration.p_hit("bad", 0.9) < 0.5 / 1.5
    # A source that is right keeps its price.
    for x in range(5):
        assert session.speculate(ToolCall("look", {"x": 100 + x}), source="good", confidence=0.9).launched
        await settle(session)
        assert await session.execute(ToolCall("look", {"x": 100 + x})) == 100 + x
        session.end_turn()
    assert runtime.calibration.p_hit("good", 0.9) > 0.9
    await session.close()


async def test_a_full_turn_budget_gives_a_waiting_worse_guess_up_for_a_better_one() -> None:
    look, gate, ran = echo()
    runtime = Runtime([look], Policy(max_calls_per_turn=3, max_concurrent_per_session=1, max_concurrent=1))
    events: list[tuple[EventKind, str]] = []
    runtime.telemetry.subscribe(lambda e: events.append((e.kind, e.detail)))
    session = runtime.session()
    assert session.speculate(ToolCall("look", {"x": 0}), source="p", confidence=1.0).launched  # runs
    await spin(5)
    assert session.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.3).launched  # waits
    assert session.speculate(ToolCall("look", {"x": 2}), source="p", confidence=0.4).launched  # waits
    better = session.speculate(ToolCall("look", {"x": 3}), source="p", confidence=0.9)
    assert better.launched
    assert (EventKind.PREEMPTED, "preempted by a more valuable guess") in events
    assert not session.has_speculation(session.resolve(ToolCall("look", {"x": 1}))[2])  # the worst waiter
    worse = session.speculate(ToolCall("look", {"x": 4}), source="p", confidence=0.2)
    assert worse.status == "rejected" and "turn budget" in worse.reason
    await spin(5)
    assert ran == [0]
    gate.open()
    await settle(session)
    assert ran == [0, 3, 2]  # the better guess ran before the one it outranked; the worst never ran
    session.end_turn()
    await session.close()


async def test_a_more_valuable_guess_preempts_a_running_worse_one_of_any_session() -> None:
    look, gate, ran = echo()
    runtime = Runtime([look], Policy(max_concurrent=1, max_concurrent_per_session=1))
    events: list[EventKind] = []
    runtime.telemetry.subscribe(lambda e: events.append(e.kind))
    a, b = runtime.session(), runtime.session()
    assert a.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.2).launched
    await spin(5)
    assert ran == [1]
    assert b.speculate(ToolCall("look", {"x": 2}), source="p", confidence=0.95).launched
    await spin(5)
    assert ran == [1, 2] and EventKind.PREEMPTED in events
    assert a.stats().preempted == 1 and a.stats().wasted == 1  # its tool ran and served nothing
    gate.open()
    await settle(b)
    assert await b.execute(ToolCall("look", {"x": 2})) == 2
    assert b.stats().hits == 1
    # The preempted call still runs normally when the model makes it.
    assert await a.execute(ToolCall("look", {"x": 1})) == 1
    await a.close()
    await b.close()


async def test_a_claimed_speculation_is_never_preempted() -> None:
    look, gate, _ = echo()
    runtime = Runtime([look], Policy(max_concurrent=1, max_concurrent_per_session=1))
    session, other = runtime.session(), runtime.session()
    assert session.speculate(ToolCall("look", {"x": 1}), source="p", confidence=0.1).launched
    await spin(5)
    claim = __import__("asyncio").ensure_future(session.execute_detailed(ToolCall("look", {"x": 1})))
    await spin(5)
    assert other.speculate(ToolCall("look", {"x": 2}), source="p", confidence=1.0).launched
    await spin(5)
    gate.open()
    outcome = await claim
    assert (outcome.kind, outcome.value) == ("hit", 1)
    assert runtime.stats().preempted == 0
    await settle(other)
    await session.close()
    await other.close()


def test_worth_of_an_unmeasured_tool_uses_its_declaration_then_a_default() -> None:
    look, _, _ = echo(expected_s=2.5)
    bare, _, _ = echo(expected_s=None)
    runtime = Runtime([look])
    assert runtime.typical_run_s(runtime.tools.get_tool("look")) == 2.5
    runtime.note_runtime("look", 0.25)
    assert runtime.typical_run_s(runtime.tools.get_tool("look")) == 0.25
    fresh = Runtime([bare])
    assert fresh.typical_run_s(fresh.tools.get_tool("look")) == 1.0  # nothing measured yet
    fresh.note_runtime("other", 0.2)
    fresh.note_runtime("other", 0.4)
    assert math.isfinite(fresh.typical_run_s(fresh.tools.get_tool("look")))
    assert fresh.typical_run_s(fresh.tools.get_tool("look")) == pytest.approx(0.26)  # like the tools seen
