"""Predictions that came after the client's next call are counted here and never carried (issue 30).

A store warmed by a client that calls back to back held one prediction per session, each too late to save
anything: carried as "predicting does not pay", that verdict silenced every later client, thinking or not.
Such a prediction says how soon that client calls (the think time handles that), not what predicting earns
for a client that waits. The proxy still counts it in its own process (a worker too slow for its client
stops predicting there) and never carries it to the store. These tests attack the split with many
sequences (property tests), the store round trip across processes, and the proxy end to end against a real
server with a predictor slower than its client.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought import Runtime, ToolCall
from forethought.mcp.calibration import MIN_ANSWERS, CalibrationStore, Calibrator, Carried
from forethought.mcp.concurrency import Concurrency
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor

SERVERS = Path(__file__).parent.with_name("mcp_servers")

# (seconds, on the worker, late) per prediction, and the seconds a hit saved after it (0: no hit)
steps = st.lists(st.tuples(st.floats(0.0, 0.05), st.booleans(), st.booleans(), st.sampled_from([0.0, 0.0, 0.2])),
                 max_size=60)


def _calibrator(contention: float = 1.0) -> tuple[Runtime, Calibrator]:
    runtime = Runtime()
    return runtime, Calibrator(runtime, Concurrency(runtime.tool_runtime_ewma.get), contention=lambda: contention)


def _process(path: Path) -> tuple[Runtime, Calibrator, Carried]:
    """A proxy process's calibration on the store at ``path``, its tool set ``fp`` listed (what was stored
    loaded)."""
    runtime, calibrator = _calibrator()
    carried = Carried(calibrator, CalibrationStore(path))
    carried.listed("fp")
    return runtime, calibrator, carried


def _play(calibrator: Calibrator, plan: Sequence[tuple[float, bool, bool, float]]) -> None:
    for seconds, on_worker, late, saved in plan:
        calibrator.predicted(seconds, on_worker=on_worker, late=late)
        if saved and not late:
            calibrator.saved(saved)


@given(steps, st.floats(0.0, 1.0))
def test_this_process_counts_every_prediction_and_the_late_part_apart(plan: list[tuple[float, bool, bool, float]],
                                                                     contention: float) -> None:
    runtime, calibrator = _calibrator(contention)
    _play(calibrator, plan)
    payoff, late = calibrator.payoff, calibrator.late
    assert payoff.answers == len(plan) and late.answers == sum(1 for _, _, is_late, _ in plan if is_late)
    expected = sum(s * (contention if w else 1.0) for s, w, _, _ in plan)
    expected_late = sum(s * (contention if w else 1.0) for s, w, is_late, _ in plan if is_late)
    assert payoff.predict_s == pytest.approx(expected) and late.predict_s == pytest.approx(expected_late)
    assert late.saved_s == 0.0
    runtime.close()


@given(st.lists(steps, min_size=1, max_size=4))
def test_the_store_carries_exactly_the_predictions_that_came_in_time(plans: list[list[tuple[float, bool, bool, float]]],
                                                                    ) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        answers = saved = predict = 0.0
        for plan in plans:  # one process each, saving twice (the second adds nothing)
            runtime, calibrator, carried = _process(path)
            _play(calibrator, plan)
            carried.save("fp", [])
            carried.save("fp", [])
            runtime.close()
            timely = [(s, w, sv) for s, w, is_late, sv in plan if not is_late]
            answers += len(timely)
            saved += sum(sv for _, _, sv in timely)
            predict += sum(s for s, _, _ in timely)
        stored = CalibrationStore(path).load("fp").payoff
        if answers == 0:
            assert stored is None or stored.answers == 0
        else:
            assert stored is not None and stored.answers == answers
            assert stored.saved_s == pytest.approx(saved) and stored.predict_s == pytest.approx(predict)


def test_a_store_warmed_by_a_client_that_calls_back_to_back_does_not_silence_one_that_thinks(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    for _ in range(3 * MIN_ANSWERS):  # each session's one prediction came after the client's next call
        runtime, calibrator, carried = _process(path)
        calibrator.predicted(0.005, late=True)
        assert calibrator.late.answers == 1
        carried.save("fp", [])
        runtime.close()
    runtime, calibrator, _ = _process(path)
    assert calibrator.payoff.answers == 0 and calibrator.payoff.pays and calibrator.should_predict()
    runtime.close()


def test_a_worker_too_slow_for_its_client_stops_predicting_in_its_own_process() -> None:
    from forethought.mcp.calibration import EXPLORE_EVERY

    runtime, calibrator = _calibrator()
    for _ in range(MIN_ANSWERS):
        assert calibrator.should_predict()
        calibrator.predicted(0.005, on_worker=True, late=True)
    assert not calibrator.payoff.pays
    assert [calibrator.should_predict() for _ in range(2 * EXPLORE_EVERY)].count(True) == 2
    runtime.close()


def test_timely_predictions_that_did_not_pay_are_still_carried(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    runtime, calibrator, carried = _process(path)
    for i in range(2 * MIN_ANSWERS):
        calibrator.predicted(0.005, late=i % 2 == 0)  # half late, half in time and useless
    carried.save("fp", [])
    runtime.close()
    runtime, calibrator, _ = _process(path)
    assert calibrator.payoff.answers == MIN_ANSWERS and calibrator.payoff.predict_s == pytest.approx(0.1)
    assert not calibrator.payoff.pays
    runtime.close()


# --- the proxy, end to end --------------------------------------------------------------------------------------


class SlowGuess:
    """Guesses ``slow(seconds=0.2)`` after every answer, ``delay_s`` after it."""

    name = "script"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        await asyncio.sleep(self.delay_s)
        return [Prediction(ToolCall("slow", {"seconds": 0.2}), 0.9, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.mcp.effects import McpPolicy  # noqa: E402
from mcp_handshakes import proxied  # noqa: E402


@pytest.mark.parametrize(("delay_s", "late"), [(0.5, True), (0.0, False)], ids=["slower-than-the-client", "in-time"])
async def test_the_proxy_carries_only_the_predictions_that_came_before_the_next_call(tmp_path: Path, delay_s: float,
                                                                                    late: bool) -> None:
    """The client calls 0.1 s after each answer (a guess could hide something: the predictor is asked); the
    predictor answers ``delay_s`` after the answer (margins wide enough for a loaded machine)."""
    store = tmp_path / "store.sqlite"

    def factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
        return SlowGuess(delay_s), "script"

    command = [sys.executable, str(SERVERS / "probe_server.py"), str(tmp_path / "log")]
    async with proxied(command, McpPolicy().trusting(), "legacy", store=store, predictor_for=factory,
                       settle=False) as (session, handle):
        await session.list_tools()
        for key in ("a", "b", "c", "d"):
            await session.call_tool("lookup", {"key": key})
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # the last answer's prediction is in
    calibrator = handle.proxy.calibrator
    answers = calibrator.payoff.answers
    assert answers == 4  # one prediction per answer
    # too late: the three that the client's next call overtook (the last answer's came in time)
    assert calibrator.late.answers == handle.proxy.refusals["predicted too late"] == (3 if late else 0)
    stored = CalibrationStore(store).load(next(iter(handle.proxy.carried._saved))).payoff
    carried = stored.answers if stored is not None else 0
    assert carried == answers - calibrator.late.answers
