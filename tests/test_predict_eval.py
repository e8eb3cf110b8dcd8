"""The next-call evaluation: its metrics on constructed cases, and the pattern predictor's targets on BFCL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from forethought import ToolCall
from forethought.predictors.base import Prediction, PredictionContext
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import train

pytest.importorskip("bfcl_eval", reason="the BFCL evaluation needs bfcl-eval installed")

from forethought.bench.predict_eval import (
    METRICS,
    Tally,
    evaluate,
    print_predict_eval,
    record_bfcl,
    record_trajectories,
    run_predict_eval,
    write_misses,
)
from forethought.bench.workloads.bfcl import load_bfcl, split_interleaved


def _p(name: str, executable: bool = True, confidence: float = 0.5, **arguments: object) -> Prediction:
    return Prediction(ToolCall(name, arguments), confidence, "test", executable)


def test_tally_counts_names_calls_coverage_and_precision() -> None:
    truth = ToolCall("cd", {"folder": "docs"})

    def same(call: ToolCall) -> bool:
        return call == truth

    tally = Tally()
    tally.add([_p("cd", folder="docs")], truth, same)
    tally.add([_p("ls"), _p("cd", folder="tmp"), _p("cd", folder="docs")], truth, same)
    tally.add([_p("cd", executable=False, confidence=0.9)], truth, same)
    tally.add([], truth, same)
    metrics = tally.metrics()
    assert metrics == {"name_top1": 0.5, "name_top3": 0.75, "exact_top1": 0.25, "exact_top3": 0.5,
                       "coverage": 0.5, "precision": 0.5, "positions": 4}
    assert set(METRICS) <= set(metrics)
    sweep = tally.by_threshold((0.4, 0.6))
    assert sweep["0.4"] == {"coverage": 0.5, "precision": 0.5}
    assert sweep["0.6"] == {"coverage": 0.0, "precision": 0.0}


def test_results_render_as_tables() -> None:
    from rich.console import Console

    metrics = dict.fromkeys(METRICS, 0.5) | {"positions": 4}
    console = Console(record=True, width=160)
    print_predict_eval(console, {"overall": metrics, "by_domain": {"travel": metrics},
                                 "by_threshold": {"0.3": {"coverage": 0.25, "precision": 1.0}}})
    text = console.export_text()
    assert "travel" in text and "overall" in text and "0.250" in text


def test_recorded_outputs_come_from_the_backends() -> None:
    entry = load_bfcl()[0]
    session = record_bfcl([entry])[0]
    first = session.turns[0].calls[0]
    assert first.call == entry.ground_truth[0][0]
    assert first.ok and "current_working_directory" in first.output
    assert set(session.tools) == set(entry.tool_names)


async def test_recording_through_the_runtime_matches_direct_recording() -> None:
    from forethought.bench.workloads.bfcl import to_trajectory
    from forethought.bench.workloads.bfcl_workload import BfclWorkload

    workload = BfclWorkload()
    entries = {e.id: e for e in load_bfcl()}
    trajectories = list(workload.training())[:6]
    assert [t.id for t in trajectories] == [to_trajectory(entries[t.id]).id for t in trajectories]
    via_runtime = await record_trajectories(trajectories, lambda t: workload.session_tools(t, None).tools)
    direct = record_bfcl([entries[t.id] for t in trajectories])
    assert via_runtime == direct


class _Checked(PatternPredictor):
    """Checks on every step that no executable prediction lacks a required argument."""

    def predict_now(self, context: PredictionContext) -> list[Prediction]:
        predictions = super().predict_now(context)
        for prediction in predictions:
            required = context.tools[prediction.call.name].get("required", ())
            missing = [r for r in required if r not in prediction.call.arguments]
            assert prediction.executable == (not missing), prediction
        return predictions


def test_predictions_on_one_fold_keep_the_executable_rule() -> None:
    entries = load_bfcl()
    train_entries, test_entries = split_interleaved(entries, 0)
    predictor = _Checked()
    train(predictor, record_bfcl(train_entries[::4]))
    tallies = evaluate(predictor, record_bfcl(test_entries[::4]))
    assert sum(t.positions for t in tallies.values()) > 100


def _at_least(metrics: dict[str, float | int], targets: dict[str, float]) -> Sequence[str]:
    return [f"{k}={metrics[k]:.3f} < {v}" for k, v in targets.items() if metrics[k] < v]


def test_pattern_predictor_meets_its_targets_on_bfcl(tmp_path: Path) -> None:
    misses: list[dict[str, Any]] = []
    results = run_predict_eval("bfcl", folds=2, top_k=3, misses=misses)
    overall = results["overall"]
    assert overall["positions"] == sum(len(turn) for e in load_bfcl() for turn in e.ground_truth)
    assert set(results["by_domain"]) == {"file_system", "vehicle", "trading", "travel"}
    # Measured 0.767 / 0.607 / 0.724 (docs/patterns.md, eighth round: 876 / 693 / 827 of 1,142 positions):
    # floors one position below, predictions are deterministic (the targets: 0.72 / 0.60 / 0.72).
    assert not _at_least(overall, {"name_top1": 0.766, "exact_top1": 0.6059, "exact_top3": 0.723})
    assert len(misses) == overall["positions"] - round(overall["exact_top1"] * overall["positions"])
    assert {m["category"] for m in misses} == {"name", "args"}
    assert sum(m["category"] == "name" for m in misses) == round((1 - overall["name_top1"]) * overall["positions"])
    for miss in misses:
        assert miss["truth"]["name"] and miss["exact_rank"] in (None, 1, 2)
        if miss["category"] == "args":
            assert all({"param", "truth", "predicted", "truth_rank"} <= set(w) for w in miss["wrong"])
    write_misses(str(tmp_path / "misses.jsonl"), misses)
    assert [json.loads(line) for line in (tmp_path / "misses.jsonl").read_text("utf-8").splitlines()] == misses
    assert overall["exact_top1"] <= overall["exact_top3"] <= overall["name_top3"]
    assert overall["exact_top1"] <= overall["name_top1"]
    latency = results["latency"]
    assert 0 < latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert results["train_s"] > 0
    shares = results["derivations"]
    assert abs(sum(shares.values()) - 1.0) < 1e-9 and {"user", "arg", "out", "constant"} <= set(shares)


def test_calls_only_contexts_hold_no_user_or_system_text() -> None:
    from forethought.bench.predict_eval import calls_only

    context = PredictionContext("s", ({"role": "system", "content": "today is 2026-01-01"},
                                      {"role": "user", "content": "hi"},
                                      {"role": "tool", "tool_call_id": "1", "content": "{}"}), "hi")
    stripped = calls_only(context)
    assert stripped.user_message == "" and [m["role"] for m in stripped.messages] == ["tool"]


def test_calls_only_evaluation_is_scored_and_learns_from_calls_alone() -> None:
    results = run_predict_eval("bfcl", folds=1, top_k=3, user_text=False)
    assert results["user_text"] is False
    overall = results["overall"]
    # Measured 0.45 name / 0.32 exact top-1 on both folds: well above chance with no words at all.
    assert overall["name_top1"] > 0.3 and overall["exact_top1"] > 0.2
    assert "user" not in results["derivations"]
