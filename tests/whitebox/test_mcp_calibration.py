"""Speculation must pay where it runs (issue 30): the proxy's pricing of guesses on top of the core's, the
learning of whether a server serialises its calls, what is carried across sessions in the store, and how
sessions begin. Unit tests attack each part with many variants (property tests where a rule is general);
integration tests run real servers: a tool faster than a guess costs is never guessed, a session's first
call is guessed from how sessions began, and a one-at-a-time server is recognised from its answers' order.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, Tool
from forethought._core.pricing import Calibration
from forethought.mcp.calibration import (
    CalibrationStore,
    Calibrator,
    Carried,
    calibration_rows,
    replay,
)
from forethought.mcp.concurrency import Concurrency
from forethought.mcp.firstcalls import MemoryFirstCalls, SqliteFirstCalls

SERVERS = Path(__file__).parent.with_name("mcp_servers")


def _tool(name: str = "read", expected_s: float | None = None) -> Tool:
    async def fn(**_: Any) -> None:
        return None

    return Tool(name=name, fn=fn, effect=Effect.READ_ONLY, expected_s=expected_s)


# --- whether a server serialises -----------------------------------------------------------------------------


def _typical(seconds: dict[str, float]) -> Any:
    return seconds.get


def test_an_answer_that_overtakes_an_earlier_request_is_concurrency() -> None:
    c = Concurrency(_typical({"slow": 1.0, "fast": 0.1}))
    c.sent(1, "a", "slow", 0.0)
    c.sent(1, "b", "fast", 0.1)
    c.ended(1, "b", 0.2, answered=True)  # b overtook a
    c.ended(1, "a", 1.0, answered=True)
    assert (c.serial, c.concurrent) == (0, 1) and c.serial_p < 0.5


def test_a_request_expected_to_overtake_that_waits_looks_serial() -> None:
    c = Concurrency(_typical({"slow": 1.0, "fast": 0.1}))
    for i in range(3):
        c.sent(1, f"a{i}", "slow", 10.0 * i)
        c.sent(1, f"b{i}", "fast", 10.0 * i + 0.1)
        c.ended(1, f"a{i}", 10.0 * i + 1.0, answered=True)  # a first: b waited behind it
        c.ended(1, f"b{i}", 10.0 * i + 1.1, answered=True)
    assert (c.serial, c.concurrent) == (3, 0) and c.serial_p == 0.8


@pytest.mark.parametrize("case", ["other-link", "abandoned", "unmeasured", "not-expected-first"])
def test_what_is_not_evidence(case: str) -> None:
    c = Concurrency(_typical({"slow": 1.0, "fast": 0.1, "slower": 2.0}))
    c.sent(1, "a", "slow", 0.0)
    c.sent(2 if case == "other-link" else 1, "b",
           {"unmeasured": "mystery", "not-expected-first": "slower"}.get(case, "fast"), 0.1)
    c.ended(1, "a", 1.0, answered=case != "abandoned")
    assert (c.serial, c.concurrent) == (0, 0) and c.serial_p == 0.5


requests = st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 2)), min_size=1, max_size=12)


def _simulate(c: Concurrency, items: list[tuple[float, float]], serial: bool) -> None:
    """Requests (sent at, runtime) on one connection of a server that is serial (FIFO) or fully concurrent."""
    sends = sorted((at, i, run) for i, (at, run) in enumerate(items))
    events: list[tuple[float, int, str, str]] = []
    free = 0.0
    for at, i, run in sends:
        events.append((at, 0, "send", str(i)))
        start = max(at, free) if serial else at
        end = start + run
        free = end
        events.append((end, 1, "end", str(i)))
    for when, _, kind, rid in sorted(events):
        if kind == "send":
            c.sent(1, rid, rid, when)
        else:
            c.ended(1, rid, when, answered=True)


@settings(max_examples=200, deadline=None)
@given(requests)
def test_a_serial_server_never_looks_concurrent(items: list[tuple[float, float]]) -> None:
    c = Concurrency({str(i): run for i, (_, run) in enumerate(items)}.get)
    _simulate(c, items, serial=True)
    assert c.concurrent == 0


@settings(max_examples=200, deadline=None)
@given(requests)
def test_a_concurrent_server_with_steady_runtimes_never_looks_serial(items: list[tuple[float, float]]) -> None:
    c = Concurrency({str(i): run for i, (_, run) in enumerate(items)}.get)
    _simulate(c, items, serial=False)
    assert c.serial == 0


# --- the price of a guess ----------------------------------------------------------------------------------------


def _calibrator(overhead_s: float = 0.002, serial: int = 0, concurrent: int = 0) -> tuple[Runtime, Calibrator]:
    runtime = Runtime()
    return runtime, Calibrator(runtime, Concurrency(runtime.tool_runtime_ewma.get, serial, concurrent), overhead_s)


@pytest.mark.parametrize(("run_s", "think_s", "pays"), [
    (0.001, None, False), (0.0019, 1.0, False), (0.01, None, True), (0.3, 0.0, False), (0.3, 0.001, False),
    (0.3, 0.05, True), (0.3, None, True)])
def test_a_guess_pays_at_all_only_if_what_it_could_hide_exceeds_its_overhead(
        run_s: float, think_s: float | None, pays: bool) -> None:
    runtime, calibrator = _calibrator()
    runtime.note_runtime("read", run_s)
    calibrator.think_s = think_s
    assert calibrator.pays_at_all(_tool()) is pays
    verdict = calibrator.decide(_tool(), "mcp-x/read", 0.99)
    assert verdict.speculate is (pays and verdict.value_s > 0)
    assert calibrator.verdicts["read"] == verdict
    runtime.close()


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 1.0), st.integers(0, 20), st.integers(0, 20))
def test_the_price_is_the_core_s_less_the_overhead_and_the_serial_delay(run_s: float, think_s: float,
                                                                         confidence: float, serial: int,
                                                                         concurrent: int) -> None:
    runtime, calibrator = _calibrator(0.002, serial, concurrent)
    runtime.note_runtime("read", run_s)
    calibrator.think_s = think_s
    t = _tool()
    priced = calibrator.price(t, "s", confidence)
    core, _ = runtime.price(t, "s", confidence, think_s)
    assert priced.core_value_s == core.value and priced.overhead_s == 0.002
    p_serial = (serial + 1) / (serial + concurrent + 2)
    assert priced.serial_s == pytest.approx(p_serial * (1 - core.p_hit) * max(0.0, run_s - think_s))
    assert priced.value_s <= core.value - 0.002 + 1e-12
    runtime.close()


def test_the_client_s_think_time_is_a_moving_average() -> None:
    runtime, calibrator = _calibrator()
    for gap in (1.0, 1.0, 0.0, -1.0):
        calibrator.note_gap(gap)
    assert calibrator.think_s == pytest.approx(0.7)  # the negative gap is ignored
    runtime.close()


# --- carried across sessions ------------------------------------------------------------------------------------

guesses = st.lists(st.tuples(st.sampled_from(["mcp-p/a", "mcp-p/b", "mcp-first/a"]), st.floats(0, 1), st.booleans()),
                   max_size=60)


@settings(max_examples=100, deadline=None)
@given(guesses)
def test_calibration_rows_replay_to_the_same_chances(recorded: list[tuple[str, float, bool]]) -> None:
    original = Calibration()
    for source, confidence, hit in recorded:
        original.record(source, confidence, hit)
    rows = calibration_rows(original)
    copy = Calibration()
    replay(copy, [(s, b, g, h, c) for (s, b), (g, h, c) in rows.items()])
    assert calibration_rows(copy).keys() == rows.keys()
    for (s, b), (g, h, c) in rows.items():
        g2, h2, c2 = calibration_rows(copy)[(s, b)]
        assert (g2, h2) == (g, pytest.approx(h)) and c2 == pytest.approx(c)
        mean = c / g
        assert copy.p_hit(s, mean) == pytest.approx(original.p_hit(s, mean))


def test_what_a_session_learnt_is_carried_to_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    for process in range(2):  # two processes, one after the other, each learning the same
        runtime, calibrator = _calibrator()
        carried = Carried(calibrator, CalibrationStore(path))
        carried.listed("fp")
        for _ in range(5):
            runtime.calibration.record("mcp-p/read", 0.55, True)
        runtime.calibration.record("mcp-p/read", 0.55, False)
        runtime.note_runtime("read", 0.2 + process)
        runtime.note_runtime("secret", 9.0)
        calibrator.concurrency.serial += 1
        carried.save("fp", ["read"])
        carried.save("fp", ["read"])  # nothing new: adds nothing
        runtime.close()
    runtime, calibrator = _calibrator()
    carried = Carried(calibrator, CalibrationStore(path))
    carried.listed("fp")
    rows = calibration_rows(runtime.calibration)
    assert rows[("mcp-p/read", 5)][:2] == (12, pytest.approx(10.0))
    assert runtime.tool_runtime_ewma == {"read": pytest.approx(0.5)}  # the moving average carried, no other tool
    assert (calibrator.concurrency.serial, calibrator.concurrency.concurrent) == (2, 0)
    carried.listed("fp")  # listed again: loaded once
    assert calibration_rows(runtime.calibration)[("mcp-p/read", 5)][0] == 12
    runtime.close()


def test_without_a_store_nothing_is_carried() -> None:
    runtime, calibrator = _calibrator()
    carried = Carried(calibrator, None)
    carried.listed("fp")
    runtime.calibration.record("s", 0.5, True)
    carried.save("fp", ["read"])
    assert calibration_rows(runtime.calibration)[("s", 5)][0] == 1
    runtime.close()


# --- how sessions begin -----------------------------------------------------------------------------------------

from forethought import ToolCall  # noqa: E402


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_most_frequent_first_call_and_its_share(tmp_path: Path, kind: str) -> None:
    def make() -> Any:
        return MemoryFirstCalls() if kind == "memory" else SqliteFirstCalls(tmp_path / "s.sqlite")

    first = make()
    assert first.most_likely("fp", "claude") is None
    for call in (ToolCall("ls", {"a": 1}), ToolCall("ls", {"a": 1}), ToolCall("pwd", {})):
        first.record("fp", "claude", call)
    first.record("fp", "cursor", ToolCall("pwd", {}))
    first.record("fp", "claude", ToolCall("bad", {"x": object()}))  # not JSON: not recorded
    found = first.most_likely("fp", "claude")
    assert found is not None and found[0] == ToolCall("ls", {"a": 1}) and found[1] == pytest.approx(2 / 3)
    assert first.most_likely("fp", "cursor") == (ToolCall("pwd", {}), 1.0)
    assert first.most_likely("other", "claude") is None
    if kind == "sqlite":  # shared by every process on the store
        assert make().most_likely("fp", "claude") == found


# --- against real servers ----------------------------------------------------------------------------------------

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.mcp.effects import McpPolicy, policy_from_data  # noqa: E402
from mcp_handshakes import proxied  # noqa: E402


async def test_a_tool_faster_than_a_guess_costs_is_never_guessed_and_stats_say_so(tmp_path: Path) -> None:
    command = [sys.executable, str(SERVERS / "probe_server.py"), str(tmp_path / "log")]
    policy = policy_from_data({"mcp": {"guess_overhead_ms": 50.0}}).trusting()  # lookups answer in ~2 ms
    async with proxied(command, policy, "legacy", priced=True) as (session, handle):
        await session.list_tools()
        for key in ("a", "b") * 4:
            await session.call_tool("lookup", {"key": key})
            await asyncio.sleep(0.06)
    assert handle.speculated == []
    assert handle.stats.tools["lookup"].priced_out + handle.proxy.refusals[
        "no tool answers slower than a guess costs"] > 0
    if handle.stats.tools["lookup"].priced_out:
        assert "speculation off" in handle.stats.summary()


async def test_a_session_s_first_call_is_guessed_from_how_sessions_began(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    command = [sys.executable, str(SERVERS / "probe_server.py"), str(tmp_path / "log")]
    hits = []
    for _ in range(3):
        async with proxied(command, McpPolicy().trusting(), "legacy", store=store) as (session, handle):
            await session.list_tools()
            await asyncio.sleep(0.2)  # the first guess has its answer
            await session.call_tool("lookup", {"key": "start"})
            await session.call_tool("counted", {"steps": 1})
        hits.append(handle.stats.tools["lookup"].hits)
    assert hits[0] == 0 and hits[1:] == [1, 1]


@pytest.mark.parametrize("serial", [True, False], ids=["one-at-a-time", "concurrent"])
async def test_whether_a_server_takes_one_call_at_a_time_is_learnt(tmp_path: Path, serial: bool) -> None:
    """A guess of ``get_comments`` (a read of about 150 ms) still runs when the client comments on a ticket (a
    write of about 50 ms): the order of their answers tells the server's kind. The guesses are launched
    white-box (a wrong guess on a server that may be serial is rightly priced out after the first)."""
    from forethought.bench.mcp.service import ServiceShape
    from forethought.bench.mcp.sim_server import server_command

    command = server_command(sys.executable, 150.0, 50.0, serial, ServiceShape())
    policy = policy_from_data({"servers": {"tickets": {"trusted": True}}, "mcp": {"guesses": 0}})
    async with proxied(command, policy, "legacy") as (session, handle):
        await session.list_tools()
        runtime = handle.proxy.runtime
        runtime.note_runtime("get_comments", 0.15)
        runtime.note_runtime("add_comment", 0.05)
        speculating = handle.proxy.speculators[-1].session
        assert speculating is not None
        for i in range(6):
            ticket = speculating.speculate(ToolCall("get_comments", {"ticket_id": f"P1-{i + 1}"}), source="test")
            assert ticket.status == "launched", ticket
            for _ in range(100):  # its request is out
                if handle.proxy.links[-1].speculative_calls > i:
                    break
                await asyncio.sleep(0.005)
            await session.call_tool("add_comment", {"ticket_id": f"P0-{i + 1}", "text": "hi"})
            await speculating.wait_speculations(5.0)
    concurrency = handle.proxy.concurrency
    if serial:
        assert concurrency.serial >= 2 and concurrency.concurrent == 0 and concurrency.serial_p >= 0.75
    else:
        assert concurrency.concurrent >= 2 and concurrency.serial_p <= 0.34  # runtimes vary: evidence, not proof


# --- whether predicting pays at all -------------------------------------------------------------------------------


def test_predicting_stops_where_hits_save_less_than_predictions_cost_and_is_still_sampled() -> None:
    from forethought.mcp.calibration import EXPLORE_EVERY, MIN_ANSWERS

    runtime, calibrator = _calibrator()
    for _ in range(MIN_ANSWERS - 1):  # too few answers to judge: predicted
        assert calibrator.should_predict()
        calibrator.predicted(0.005)
    calibrator.saved(0.019)
    assert calibrator.should_predict()
    calibrator.predicted(0.005)
    assert not calibrator.payoff.pays  # 19 ms saved against 100 ms of predicting
    asked = [calibrator.should_predict() for _ in range(3 * EXPLORE_EVERY)]
    assert asked.count(True) == 3  # one answer in EXPLORE_EVERY
    calibrator.saved(1.0)  # the sampled predictions find hits again
    assert calibrator.payoff.pays and calibrator.should_predict()
    assert "ms per answer" in calibrator.payoff.explains()
    runtime.close()


@pytest.mark.parametrize(("contention", "counted"), [
    (0.0, 0.0), (0.25, 0.0025), (1.0, 0.01), (3.0, 0.01), (-1.0, 0.0), (0.5, 0.005)])
def test_a_worker_s_cpu_counts_as_far_as_the_machine_is_contended(contention: float, counted: float) -> None:
    runtime = Runtime()
    calibrator = Calibrator(runtime, Concurrency(runtime.tool_runtime_ewma.get), contention=lambda: contention)
    calibrator.predicted(0.01, on_worker=True)
    assert calibrator.payoff.predict_s == pytest.approx(counted) and calibrator.payoff.answers == 1
    calibrator.predicted(0.01)  # the proxy's own loop: blocked whatever the machine does
    assert calibrator.payoff.predict_s == pytest.approx(counted + 0.01) and calibrator.payoff.answers == 2
    runtime.close()


def test_on_an_idle_machine_a_worker_s_predictions_cost_nothing_and_on_a_saturated_one_all() -> None:
    from forethought.mcp.calibration import MIN_ANSWERS

    for contention, pays in ((0.0, True), (1.0, False)):
        runtime = Runtime()
        calibrator = Calibrator(runtime, Concurrency(runtime.tool_runtime_ewma.get), contention=_fixed(contention))
        for _ in range(MIN_ANSWERS):
            calibrator.predicted(0.005, on_worker=True)
        calibrator.saved(0.019)
        assert calibrator.payoff.pays is pays
        runtime.close()


def _fixed(value: float) -> Callable[[], float]:
    return lambda: value


def test_the_machine_s_contention_is_a_share() -> None:
    from forethought.mcp.calibration import machine_contention

    assert 0.0 <= machine_contention() <= 1.0


def test_the_payoff_is_carried_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    for _ in range(2):
        runtime, calibrator = _calibrator()
        carried = Carried(calibrator, CalibrationStore(path))
        carried.listed("fp")
        for _ in range(15):
            calibrator.predicted(0.01)
        carried.save("fp", [])
        carried.save("fp", [])
        runtime.close()
    runtime, calibrator = _calibrator()
    Carried(calibrator, CalibrationStore(path)).listed("fp")
    assert calibrator.payoff.answers == 30 and calibrator.payoff.predict_s == pytest.approx(0.3)
    assert not calibrator.payoff.pays
    runtime.close()


def test_what_the_store_carries_weighs_as_a_few_answers_so_this_process_can_overturn_it(tmp_path: Path) -> None:
    from forethought.mcp.calibration import CARRIED_ANSWERS

    path = tmp_path / "store.sqlite"
    runtime, calibrator = _calibrator()
    carried = Carried(calibrator, CalibrationStore(path))
    carried.listed("fp")
    for _ in range(10 * CARRIED_ANSWERS):  # e.g. trained with no think time: nothing to hide, predictions cost
        calibrator.predicted(0.004)
    carried.save("fp", [])
    runtime.close()
    runtime, calibrator = _calibrator()
    Carried(calibrator, CalibrationStore(path)).listed("fp")
    payoff = calibrator.payoff
    assert payoff.answers == CARRIED_ANSWERS and payoff.predict_s == pytest.approx(0.004 * CARRIED_ANSWERS)
    assert not payoff.pays  # the verdict is carried ...
    calibrator.saved(0.2)  # ... and one hit that hides 0.2 s here overturns it
    assert payoff.pays
    runtime.close()
    stored = CalibrationStore(path).load("fp").payoff
    assert stored is not None and stored.answers == 10 * CARRIED_ANSWERS  # the store keeps every answer
    assert stored.predict_s == pytest.approx(0.04 * CARRIED_ANSWERS)
