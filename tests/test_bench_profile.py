"""The profile of the arms (``python -m forethought.bench.profile``): CPU per model step by process and part."""

from __future__ import annotations

from forethought.bench.main import BenchConfig
from forethought.bench.profile import AREAS, profile_arms


async def test_every_arm_gets_cpu_per_step_by_process_and_part() -> None:
    config = BenchConfig(trajectories=2, agents=2, time_scale=0.0)
    results = await profile_arms(config, ["serial", "spec-pattern", "spec-stream"])
    assert list(results) == ["serial", "spec-pattern", "spec-stream"]
    known = {area for area, _ in AREAS if area != "idle"} | {"other"}
    for name, r in results.items():
        assert r["steps"] > 0 and r["wall_s"] > 0 and r["agent_cpu_ms_per_step"] > 0
        assert r["engine_cpu_ms_per_step"] >= 0 and r["lag_p99_ms"] >= 0
        assert set(r["agent_split_ms_per_step"]) <= known and r["agent_split_ms_per_step"]
        if name != "spec-pattern":  # only the pattern predictor runs in a worker process
            assert r["workers_cpu_ms_per_step"] == 0
