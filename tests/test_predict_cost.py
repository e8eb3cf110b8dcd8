"""The prediction-cost benchmark: generated sessions with large outputs, timed predictions."""

from __future__ import annotations

import json
from pathlib import Path

from forethought.bench.predict_cost import CostConfig, generate_sessions, main, run_predict_cost


def test_generated_sessions_are_large_and_deterministic() -> None:
    first, again = generate_sessions(2, output_kb=8, seed=3), generate_sessions(2, output_kb=8, seed=3)
    assert first == again
    sizes = [len(o.output) for s in first for t in s.turns for o in t.calls]
    assert max(sizes) >= 8 * 1024 and min(sizes) < 100
    assert generate_sessions(2, output_kb=8, seed=4) != first


def test_the_benchmark_times_every_prediction_and_writes_its_json(tmp_path: Path) -> None:
    results = run_predict_cost(CostConfig(train_sessions=3, test_sessions=2, output_kb=8))
    assert results["predict"]["count"] == results["observe"]["count"] == 14  # 7 calls per session
    assert results["predict"]["p50_ms"] <= results["predict"]["p99_ms"] <= results["predict"]["max_ms"]
    assert results["predict_cpu"]["count"] == 14 and results["train_calls"] == 21
    assert results["observe_cpu"]["count"] == 14
    assert results["observe_cpu"]["p50_ms"] <= results["observe_cpu"]["p99_ms"] <= results["observe_cpu"]["max_ms"]
    assert results["exact_top1"] > 0  # it predicts something right: the timings are of real work
    path = tmp_path / "cost.json"
    main(["--train-sessions", "2", "--test-sessions", "1", "--output-kb", "4", "--json", str(path)])
    doc = json.loads(path.read_text())
    assert doc["command"] == "predict-cost" and doc["results"]["config"]["output_kb"] == 4
