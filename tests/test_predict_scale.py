"""The scale benchmark: a long generated history played to one predictor, timed and measured per window."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from forethought.bench.predict_scale import RunConfig, main, resident_mb, run_predict_scale
from forethought.bench.scale_sessions import SCHEMAS, ScaleConfig, scale_sessions
from forethought.predictors.patterns.replay import contexts


def test_generated_sessions_are_deterministic_large_and_varied() -> None:
    first = list(itertools.islice(scale_sessions(ScaleConfig(12, 8, seed=3)), 12))
    again = list(itertools.islice(scale_sessions(ScaleConfig(12, 8, seed=3)), 12))
    assert first == again
    assert first != list(itertools.islice(scale_sessions(ScaleConfig(12, 8, seed=4)), 12))
    calls = [o for session, _ in first for turn in session.turns for o in turn.calls]
    assert max(len(o.output) for o in calls) >= 8 * 1024
    assert len({o.call.name for o in calls}) >= 8
    for session, system in first:
        assert "Today" in system or "date" in system
        for context, observed, _ in contexts(session):
            assert observed.call.name in SCHEMAS and set(observed.call.arguments) <= set(
                SCHEMAS[observed.call.name]["properties"])
            assert context.user_message


def test_the_benchmark_reports_windows_memory_and_dates(tmp_path: Path) -> None:
    config = RunConfig(sessions=6, output_kb=4, window=3, warm=3, date_cases=32)
    results = run_predict_scale(config)
    assert [w["sessions"] for w in results["windows"]] == [3, 6]
    for window in results["windows"]:
        assert window["predict_cpu"]["count"] == window["observe_cpu"]["count"] > 0
        assert window["predict_cpu"]["p50_ms"] <= window["predict_cpu"]["p99_ms"]
        assert window["rss_mb"] > 0 and window["counters"] > 0
    assert results["windows"][-1]["exact_top1"] > 0  # it predicts something right: the timings are of real work
    final = results["final"]
    assert final["predict_cpu_p99_ms"] == results["windows"][-1]["predict_cpu"]["p99_ms"]
    assert isinstance(final["within_targets"], bool) and "memory_growth_mb" in final
    assert results["dates"]["cases"] == 32 and results["dates"]["exact"] >= 0.9
    path = tmp_path / "scale.json"
    main(["--sessions", "2", "--output-kb", "2", "--window", "1", "--warm", "1", "--date-cases", "16",
          "--json", str(path)])
    doc = json.loads(path.read_text())
    assert doc["command"] == "predict-scale" and doc["params"]["sessions"] == 2
    assert len(doc["results"]["windows"]) == 2


def test_resident_memory_is_read() -> None:
    assert resident_mb() > 1
