"""``predict-eval --policy``: predictions a policy would not let run early are not scored as made."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from forethought import Policy, ToolCall, ToolPolicy
from forethought.predictors.base import Prediction
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import train

pytest.importorskip("bfcl_eval", reason="the BFCL evaluation needs bfcl-eval installed")
from forethought.bench.predict_eval import admitted, evaluate, record_bfcl
from forethought.bench.workloads.bfcl import load_bfcl, split_interleaved
from forethought.cli import app

NAMES = ("ls", "cd", "cat")


@given(st.lists(st.tuples(st.sampled_from(NAMES), st.floats(0.0, 1.0)), max_size=8),
       st.sets(st.sampled_from(NAMES)), st.floats(0.0, 1.0))
def test_admitted_keeps_exactly_what_the_policy_lets_speculate(
        guesses: list[tuple[str, float]], forbidden: set[str], floor: float) -> None:
    predictions = [Prediction(ToolCall(name), confidence, "test") for name, confidence in guesses]
    policy = Policy(min_confidence=floor, tools={name: ToolPolicy(speculate=False) for name in forbidden})
    kept = admitted(policy, predictions)
    assert kept == [p for p in predictions if p.call.name not in forbidden and p.confidence >= floor]


def test_a_policy_that_forbids_a_tool_removes_its_predictions_and_nothing_else() -> None:
    train_entries, test_entries = split_interleaved(load_bfcl(), 0)
    trained, tested = record_bfcl(train_entries[::6]), record_bfcl(test_entries[::6])

    def run(policy: Policy | None) -> dict[str, int]:
        predictor = PatternPredictor()
        train(predictor, trained)
        tallies = evaluate(predictor, tested, policy=policy)
        return {k: sum(getattr(t, k) for t in tallies.values()) for k in ("positions", "covered", "name_top1")}

    free = run(None)
    assert run(Policy()) == free  # the default policy lets everything speculate
    forbid_all = Policy(tools={name: ToolPolicy(speculate=False)
                               for s in trained + tested for name in s.tools})
    blocked = run(forbid_all)
    assert blocked["positions"] == free["positions"] and blocked["covered"] == 0 and free["covered"] > 0


def test_a_bad_policy_file_is_one_line_with_status_2(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("[tools\n")
    result = CliRunner().invoke(app, ["predict-eval", "--policy", str(policy)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and str(policy) in lines[0], result.output
