"""The code benchmark: its JSON shape, the spec-ptc arm (when its environment exists), the stream schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from forethought.bench.code import sptc as code_sptc
from forethought.bench.code.metrics import ARM_FIELDS
from forethought.bench.code.runner import format_code_bench, run_code_bench
from forethought.bench.code.stream import schedule
from forethought.bench.code.suite import SUITE
from forethought.errors import WorkloadError

PROGRAMS = ["map_loop", "tool_error", "no_tools"]
SPTC = code_sptc.find_environment()


def _check_shape(document: dict, arms: list[str]) -> None:
    results = document["results"]
    assert document["command"] == "bench" and document["params"]["workload"] == "code"
    assert list(results["arms"]) == arms
    assert all(list(results["programs"][name]) == arms for name in PROGRAMS)
    for arm in arms:
        assert set(ARM_FIELDS) <= set(results["arms"][arm])
    for name in PROGRAMS:
        for arm in arms:
            assert {"wall_s", "hits", "misses", "wasted"} <= set(results["programs"][name][arm])
            assert results["programs"][name][arm]["wall_s"] >= results["program_info"][name]["ideal_wall_s"] - 0.005
    assert results["equivalent"] is True
    assert results["arms"]["serial"]["hits"] == 0 and results["arms"]["serial"]["speedup"] == 1.0


@pytest.mark.skipif(not SPTC.available, reason=SPTC.reason or "spec-ptc environment missing")
def test_bench_with_the_spec_ptc_arm() -> None:
    document = run_code_bench(latency_s=0.02, tokens_per_s=2000.0, repeats=1, programs=PROGRAMS)
    _check_shape(document, ["serial", "forethought", "spec-ptc"])
    results = document["results"]
    assert results["sptc"]["available"] and results["sptc_equivalent"] is True
    assert results["programs"]["no_tools"]["spec-ptc"]["hits"] == 0
    assert "spec-ptc" in format_code_bench(document)
    assert set(results["targets"]) >= {"hits_never_below_sptc", "wall_vs_sptc", "map_speedup_min"}


def test_bench_says_clearly_when_spec_ptc_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_sptc, "_candidates", lambda explicit: [Path("/nonexistent/python3.12")])
    document = run_code_bench(latency_s=0.01, tokens_per_s=4000.0, repeats=1, programs=PROGRAMS)
    _check_shape(document, ["serial", "forethought"])
    assert document["results"]["sptc"]["available"] is False
    assert "spec-ptc arm skipped" in document["results"]["sptc"]["reason"]
    assert "spec-ptc arm skipped" in format_code_bench(document)


def test_unknown_program_is_an_error() -> None:
    with pytest.raises(WorkloadError, match="unknown program"):
        run_code_bench(repeats=1, programs=["nope"], spec_ptc=False)
    with pytest.raises(WorkloadError, match="token rate"):
        run_code_bench(repeats=1, tokens_per_s=0, spec_ptc=False)


def test_schedule_is_lossless_and_ordered() -> None:
    for p in SUITE:
        plan = schedule(p.message, 50.0)
        assert "".join(plan.deltas) == p.message
        assert list(plan.times) == sorted(plan.times) and plan.duration == len(plan.deltas) / 50.0
        offsets = [plan.time_of_offset(i) for i in range(0, len(p.message), 7)]
        assert offsets == sorted(offsets)
