"""The code benchmark: its JSON shape, the spec-ptc arm (when its environment exists), the stream schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought.bench.code import sptc as code_sptc
from forethought.bench.code.metrics import ARM_FIELDS, bound_wall
from forethought.bench.code.runner import format_code_bench, run_code_bench
from forethought.bench.code.stream import schedule
from forethought.bench.code.suite import SUITE, CodeProgram
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
            info = results["program_info"][name]
            assert info["bound_wall_s"] >= info["ideal_wall_s"]
            # no arm that keeps the invariants beats the bound (e.g. by serving tool_error's raised speculation)
            assert results["programs"][name][arm]["wall_s"] >= info["bound_wall_s"] - 0.005
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
    assert set(results["targets"]) >= {"hits_never_below_sptc", "wall_vs_sptc", "map_speedup_min", "bound_vs_sptc",
                                       "wall_vs_sptc_reachable"}
    assert "no arm keeping the invariants finishes sooner" in format_code_bench(document)


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


@given(st.sampled_from(SUITE), st.floats(5.0, 5000.0), st.floats(0.0, 2.0), st.floats(0.0, 30.0))
def test_the_bound_raises_the_ideal_only_where_causality_or_an_invariant_forces_it(
        program: CodeProgram, rate: float, latency_s: float, ideal: float) -> None:
    plan = schedule(program.message, rate)
    bound = bound_wall(program, plan, ideal, latency_s)
    assert bound >= ideal
    if not program.streamed_last and not program.real_run_only:
        assert bound == ideal
    message = program.message
    code_end = plan.time_of_offset(message.rindex("```") + 2)
    if program.real_run_only:  # a write, or a call whose speculation raised: after the whole block
        assert bound >= code_end + latency_s
    if program.streamed_last:
        start = message.index("```repl")
        anchor = message.index(program.streamed_last)
        assert start < anchor < message.rindex("```")  # the anchor is code, not prose
        assert bound >= plan.time_of_offset(anchor + len(program.streamed_last) - 1) + program.chain_after * latency_s


def test_the_suite_s_bounds_at_the_bench_s_defaults() -> None:
    """The four programs whose ideal no arm keeping the invariants can reach, at 60 tokens/s and 0.4 s (the
    figures docs/code.md derives by hand)."""
    raised = {p.name: bound_wall(p, schedule(p.message, 60.0), 0.0, 0.4) for p in SUITE}
    assert {name for name, b in raised.items() if b > 0.0} == {"tool_error", "write_after_reads", "nested_def",
                                                               "while_pages"}
    assert raised["tool_error"] == pytest.approx(1.30) and raised["write_after_reads"] == pytest.approx(1.75)
    assert raised["nested_def"] == pytest.approx(2.00) and raised["while_pages"] == pytest.approx(1.2667, abs=1e-3)


@pytest.mark.parametrize(("fields", "match"), [
    ({"streamed_last": "not in it"}, "is not in its message"),
    ({"streamed_last": "x = 1", "chain_after": -1}, "chain_after"),
    ({"chain_after": 2}, "chain_after"),
])
def test_a_bound_annotation_that_does_not_fit_its_program_is_refused(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CodeProgram("p", "k", 1, "intro\n```repl\nx = 1\n```\n", **fields)
