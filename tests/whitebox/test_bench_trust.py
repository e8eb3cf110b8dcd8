"""A bench you can trust: medians with spread over repeats, the oracle arm, lag and load, the verdict."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.bench.cpuload import CpuLoad
from forethought.bench.lag import LagMonitor, percentile
from forethought.bench.main import aggregate
from forethought.bench.metrics import ArmMetrics
from forethought.bench.oracle import OraclePredictor
from forethought.bench.verdict import BUSY_LAG_P99_MS, headline, machine_busy, oracle_saved, oracle_share, verdict
from forethought.predictors.base import PredictionContext
from forethought.predictors.trajectory import Trajectory, Turn

A, B, C = ToolCall("a", {"x": 1}), ToolCall("b", {}), ToolCall("c", {"y": "z"})
TRAJECTORY = Trajectory("t1", (Turn("first", ((A,), (B, C))), Turn("second", ((C,),))))


def _context(messages: list[dict[str, object]], trajectory_id: str = "t1") -> PredictionContext:
    return PredictionContext("s", messages, "", request_extra={"metadata": {"trajectory_id": trajectory_id}})


async def test_oracle_predicts_exactly_the_calls_of_the_current_step() -> None:
    oracle = OraclePredictor([TRAJECTORY])
    user1, user2 = {"role": "user", "content": "first"}, {"role": "user", "content": "second"}
    assistant, tool = {"role": "assistant", "content": None}, {"role": "tool", "content": "r"}
    steps = [
        ([user1], [A]),
        ([user1, assistant, tool], [B, C]),
        ([user1, assistant, tool, assistant, tool, tool], []),  # the final answer of turn 1
        ([user1, assistant, tool, assistant, tool, tool, assistant, user2], [C]),
        ([user1, assistant, tool, assistant, tool, tool, assistant, user2, assistant, tool], []),
    ]
    for messages, expected in steps:
        predictions = await oracle.predict(_context(messages))
        assert [p.call for p in predictions] == expected
        assert all(p.confidence == 1.0 and p.executable for p in predictions)


@pytest.mark.parametrize("extra", [{}, {"metadata": None}, {"metadata": {"trajectory_id": 7}},
                                   {"metadata": {"trajectory_id": "unknown"}}])
async def test_oracle_without_a_known_trajectory_predicts_nothing(extra: dict[str, object]) -> None:
    context = PredictionContext("s", [{"role": "user", "content": "x"}], "x", request_extra=extra)
    assert await OraclePredictor([TRAJECTORY]).predict(context) == ()


def _metrics(time_saved: float, hits: int = 3, equivalent: bool = True) -> ArmMetrics:
    return ArmMetrics(wall_s=10 * (1 - time_saved), time_saved=time_saved, speedup=1 / (1 - time_saved),
                      hits=hits, partial_hits=0, misses=1, early_dispatched=0, wasted_tool_s=0.5,
                      saved_tool_s=1.0, alpha=0.5, efficiency=0.9, speculator_tokens=0, errors=0,
                      equivalent=equivalent)


def test_aggregate_takes_medians_spread_and_equivalence_of_every_repeat() -> None:
    repeats = [{"serial": _metrics(0.0), "x": _metrics(0.10, 2), "oracle": _metrics(0.40)},
               {"serial": _metrics(0.0), "x": _metrics(0.30, 4, equivalent=False), "oracle": _metrics(0.20)},
               {"serial": _metrics(0.0), "x": _metrics(0.20, 3), "oracle": _metrics(0.30)}]
    out = aggregate(repeats)
    assert out["x"]["time_saved"] == pytest.approx(0.20) and out["x"]["time_saved_spread"] == [0.10, 0.30]
    assert out["x"]["hits"] == 3 and isinstance(out["x"]["hits"], int)
    assert out["x"]["equivalent"] is False and out["serial"]["equivalent"] is True  # one bad repeat is enough
    assert out["x"]["oracle_share"] == pytest.approx(0.20 / 0.30) and out["serial"]["oracle_share"] is None
    assert set(out["x"]) >= {f.name for f in dataclasses.fields(ArmMetrics)} | {"repeats", "time_saved_spread"}


def test_aggregate_takes_the_median_of_each_source_of_waste_a_missing_source_counting_zero() -> None:
    repeats = [{"x": dataclasses.replace(_metrics(0.1), wasted_by_source={"pattern": 1.0, "model": 3.0})},
               {"x": dataclasses.replace(_metrics(0.2), wasted_by_source={"pattern": 2.0})},
               {"x": dataclasses.replace(_metrics(0.3), wasted_by_source={"pattern": 4.0, "model": 1.0})}]
    assert aggregate(repeats)["x"]["wasted_by_source"] == {"model": 1.0, "pattern": 2.0}


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=200), st.floats(0, 1))
def test_percentile_is_one_of_the_values_and_monotone(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert p in values and min(values) <= p <= max(values)
    assert percentile(values, 0.0) == min(values) and percentile(values, 1.0) == max(values)
    assert percentile(values, q) <= percentile(values, min(1.0, q + 0.1))


class Ticks:
    """The lag monitor's clock and sleep, driven by the test: each ``tick(late_s)`` ends one sleep that late."""

    def __init__(self) -> None:
        self.now = 0.0
        self.asleep: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
        self.slept = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.asleep.put(woken)
        self.slept.set()
        await woken

    async def tick(self, interval_s: float, late_s: float) -> None:
        """End the monitor's sleep ``late_s`` after its interval; return once it recorded that and slept again."""
        woken = await self.asleep.get()
        self.slept.clear()
        self.now += interval_s + late_s
        woken.set_result(None)
        await self.slept.wait()


async def test_lag_monitor_attributes_a_blocked_loop_to_the_running_arm() -> None:
    """Lateness is measured against the monitor's clock and charged to the label in force (no real timing:
    the test decides how late each wake-up comes, as a blocked loop would make it)."""
    ticks, interval = Ticks(), 0.001
    async with LagMonitor(interval_s=interval, clock=ticks.clock, sleep=ticks.sleep) as monitor:
        monitor.label = "idle"
        for _ in range(20):
            await ticks.tick(interval, 0.0)
        monitor.label = "blocking"
        for late in (0.03, 0.0, 0.03, 0.0, 0.03):
            await ticks.tick(interval, late)
        monitor.label = ""
    assert len(monitor.samples["idle"]) == 20 and len(monitor.samples["blocking"]) == 5
    assert monitor.p99_ms("blocking") == pytest.approx(30.0) and monitor.p99_ms("idle") == pytest.approx(0.0, abs=1e-9)
    assert monitor.p99_ms() == pytest.approx(30.0)


def test_cpu_load_starts_and_always_stops_its_processes() -> None:
    with pytest.raises(ValueError):
        CpuLoad(-1)
    load = CpuLoad(1, max_s=60.0)
    with pytest.raises(RuntimeError), load:
        assert load.running == 1
        raise RuntimeError("the bench failed")
    assert load.running == 0


def test_burners_stop_by_themselves_at_their_deadline() -> None:
    with CpuLoad(1, max_s=0.0) as load:
        for child in load._children:
            child.join(timeout=30)
        assert load.running == 0


def _arm(saved: float, spread: tuple[float, float], share: float | None = None) -> dict[str, object]:
    return {"time_saved": saved, "time_saved_spread": list(spread), "speedup": 1 / (1 - saved),
            "oracle_share": share}


IDLE = {"cores": 2, "load_1m_start": 0.2, "load_1m_end": 0.4, "lag_p99_ms": 2.0}


def test_verdict_states_the_result_in_words_with_its_spread() -> None:
    arms = {"serial": _arm(0.0, (0.0, 0.0)), "pattern+stream": _arm(0.25, (0.22, 0.27), 0.8),
            "spec-model": _arm(-0.05, (-0.08, 0.01), -0.2), "oracle": _arm(0.31, (0.30, 0.33), 1.0)}
    words = verdict(arms, True, IDLE, 3)
    assert not machine_busy(IDLE) and not any(line.startswith("WARNING") for line in words)
    assert words[0].startswith("Speculation paid on this run: pattern+stream took 25.0% less wall time")
    assert "every repeat faster: +22.0% to +27.0%" in words[0] and "the machine was idle" in words[0]
    assert "load average up to 0.4 on 2 cores" in words[0]
    assert words[1].startswith("Fastest arm: pattern+stream, +25.0%") and "+22.0% to +27.0%" in words[1]
    assert "over 3 repeats" in words[1]
    assert any(line.startswith("Oracle") and "+31.0%" in line for line in words)
    shares = [line for line in words if line.startswith("Share of the oracle's saving")]
    assert shares == ["Share of the oracle's saving: pattern+stream 81%."]  # spec-model was slower: no share
    assert any(line.startswith("Slower than serial: spec-model -5.0%") for line in words)
    assert words[-1].startswith("Every arm")
    assert verdict(arms, False, IDLE, 3)[-1].startswith("NOT EQUIVALENT")


def test_the_headline_says_when_speculation_paid_on_the_median_only() -> None:
    arms = {"serial": _arm(0.0, (0.0, 0.0)), "x": _arm(0.04, (-0.01, 0.09))}
    line = headline(arms, IDLE, 3)
    assert line.startswith("Speculation paid on the median only: x took 4.0% less wall time")
    assert "slower in some repeat (-1.0% to +9.0%)" in line


def test_no_arm_slower_than_serial_is_called_fastest_nor_given_a_share_of_a_noise_saving() -> None:
    """The case of the busy demo: every arm slower, an oracle at +0.06% (a share of -833%)."""
    arms = {"serial": _arm(0.0, (0.0, 0.0)), "pattern+stream": _arm(-0.005, (-0.03, 0.02)),
            "all": _arm(-0.19, (-0.20, 0.02)), "oracle": _arm(0.0006, (-0.01, 0.02))}
    busy = {"cores": 2, "load_1m_start": 9.0, "load_1m_end": 8.1, "lag_p99_ms": 45.0}
    words = verdict(arms, True, busy, 3)
    assert words[0].startswith("Speculation did not pay on this run: no arm was faster than serial (the best, "
                               "pattern+stream, -0.5%")
    assert "the machine was busy (load average up to 9.0 on 2 cores, event-loop lag p99 45 ms)" in words[0]
    assert "unreliable" in words[0] and words[1].startswith("WARNING: the machine was busy")
    assert not any("Fastest" in line or "fastest" in line for line in words)
    assert not any(line.startswith("Share of the oracle") for line in words)
    assert any(line.startswith("Oracle") and "no arm's share" in line for line in words)
    assert oracle_share(-0.005, arms["oracle"]) is None
    out = aggregate([{"serial": _metrics(0.0), "x": _metrics(-0.005), "oracle": _metrics(0.0006)}])
    assert out["x"]["oracle_share"] is None and out["oracle"]["oracle_share"] is None


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "oracle"]),
                       st.tuples(st.floats(-0.9, 0.9), st.floats(0, 0.2), st.floats(0, 0.2)), min_size=1),
       st.floats(0, 20), st.integers(1, 64))
def test_the_headline_is_one_line_and_never_calls_a_slower_arm_fast(
        spec: dict[str, tuple[float, float, float]], load: float, cores: int) -> None:
    arms: dict[str, dict[str, object]] = {"serial": _arm(0.0, (0.0, 0.0))}
    for name, (saved, below, above) in spec.items():
        arms[name] = _arm(saved, (saved - below, saved + above))
    machine = {"cores": cores, "load_1m_start": load, "load_1m_end": load, "lag_p99_ms": 1.0}
    words = verdict(arms, True, machine, 3)
    assert "\n" not in words[0] and ("busy" in words[0]) == machine_busy(machine)
    real = {n: a for n, a in arms.items() if n not in ("serial", "oracle")}
    paid = any(float(a["time_saved"]) > 0 for a in real.values())  # type: ignore[arg-type]
    assert words[0].startswith("Speculation paid") == paid
    fastest = [line for line in words if line.startswith("Fastest arm")]
    assert bool(fastest) == paid
    for line in words:
        if line.startswith("Share of the oracle's saving"):
            assert oracle_saved(arms["oracle"]) and "-" not in line.split(":", 1)[1]


@pytest.mark.parametrize("machine", [
    {"cores": 2, "load_1m_start": 2.2, "load_1m_end": 0.1, "lag_p99_ms": 1.0},
    {"cores": 2, "load_1m_start": 0.1, "load_1m_end": 1.6, "lag_p99_ms": 1.0},
    {"cores": 8, "load_1m_start": 0.1, "load_1m_end": 0.1, "lag_p99_ms": BUSY_LAG_P99_MS + 1},
])
def test_a_busy_machine_is_said_first_and_plainly(machine: dict[str, float]) -> None:
    words = verdict({"serial": _arm(0.0, (0.0, 0.0)), "x": _arm(-0.4, (-0.8, 0.18))}, True, machine, 3)
    assert machine_busy(machine) and "the machine was busy" in words[0] and "unreliable" in words[0]
    assert words[1].startswith("WARNING: the machine was busy") and "unreliable" in words[1]


def test_the_verdict_says_when_and_where_speculation_backed_off() -> None:
    arms = {"serial": {"time_saved": 0.0, "speedup": 1.0},
            "all": {"time_saved": 0.1, "speedup": 1.1, "backoffs": 3, "oracle_share": None},
            "spec-pattern": {"time_saved": 0.2, "speedup": 1.2, "backoffs": 0, "oracle_share": None}}
    lines = verdict(arms, True, {"cores": 2, "load_1m_start": 0.1, "load_1m_end": 0.1, "lag_p99_ms": 1.0}, 3)
    backed = [line for line in lines if "backed off" in line]
    assert backed == ["Speculation backed off under load (changes of load state, median per repeat): all 3."]


def test_the_bench_json_carries_a_reliability_table_merged_over_repeats() -> None:
    from forethought._core.pricing import ReliabilityRow
    from forethought.bench.reliability import merge_reliability

    one = [ReliabilityRow("pattern", 0.9, 1.0, 10, 0.95, 0.8, 0.82)]
    two = [ReliabilityRow("pattern", 0.9, 1.0, 30, 0.91, 0.6, 0.65),
           ReliabilityRow("model", 0.5, 0.6, 4, 0.55, 0.5, 0.5)]
    rows = {(r["source"], r["low"]): r for r in merge_reliability([one, two])}
    pattern = rows[("pattern", 0.9)]
    assert pattern["guesses"] == 40
    assert pattern["hit_rate"] == pytest.approx((8 + 18) / 40)
    assert pattern["mean_confidence"] == pytest.approx((9.5 + 27.3) / 40)
    assert pattern["calibrated"] == 0.65 and rows[("model", 0.5)]["guesses"] == 4
    assert merge_reliability([]) == []
