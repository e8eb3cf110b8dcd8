"""The next-tool scorer's rehearsal (earlier calls re-learned after each one) and its turn-position feature."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns import flow_maxent
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.flow_maxent import ToolScorer, context_features
from forethought.predictors.patterns.predictor import PatternPredictor

TOOLS = ("lookup", "book", "cancel", "notify")


def _feats(last: str, word: str) -> tuple[str, ...]:
    return context_features(("^", last), frozenset({word}), False, frozenset({last}), (last,))


CASES = [(_feats("lookup", "confirm"), "book"), (_feats("lookup", "drop"), "cancel"),
         (_feats("book", "confirm"), "notify"), (_feats("book", "drop"), "lookup")]


def _taught(steps: int, rounds: int = 2) -> ToolScorer:
    scorer = ToolScorer(Counts(None))
    for _ in range(rounds):
        for feats, tool in CASES:
            scorer.learn(feats, TOOLS, tool)
            scorer.rehearse(feats, TOOLS, tool, steps)
    return scorer


def test_rehearsal_learns_more_from_the_same_calls() -> None:
    """Each case seen twice: with rehearsal every right tool is likelier than without, and ranked first."""
    plain, rehearsed = _taught(0), _taught(8)
    for feats, tool in CASES:
        with_rehearsal = rehearsed.log_probs(feats, TOOLS)
        assert with_rehearsal[tool] > plain.log_probs(feats, TOOLS)[tool]
        assert max(with_rehearsal, key=lambda t: with_rehearsal[t]) == tool
        assert math.isclose(sum(math.exp(v) for v in with_rehearsal.values()), 1.0, rel_tol=1e-9)


def test_rehearsal_memory_is_bounded_and_keeps_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow_maxent, "REHEARSE_MEMORY", 5)
    scorer = ToolScorer(Counts(None))
    for i in range(12):
        feats = _feats("lookup", f"w{i}")
        scorer.learn(feats, TOOLS, "book")
        scorer.rehearse(feats, TOOLS, "book", 2)
        assert scorer.remembered == min(i + 1, 5)
    kept = {feats for feats, _, _ in scorer._memory}
    assert kept == {_feats("lookup", f"w{i}") for i in range(7, 12)}  # the oldest were overwritten


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TOOLS), st.sampled_from(("a", "b", "c")), st.sampled_from(TOOLS)),
                min_size=1, max_size=15))
def test_rehearsal_is_deterministic_and_keeps_the_mirror_exact(steps: list[tuple[str, str, str]]) -> None:
    """The same calls give the same weights in two scorers (seeded draws), the mirror the logits are read
    from equals the counters, and probabilities stay normalised."""
    first, second = ToolScorer(Counts(None)), ToolScorer(Counts(None))
    for last, word, tool in steps:
        for scorer in (first, second):
            scorer.learn(_feats(last, word), TOOLS, tool)
            scorer.rehearse(_feats(last, word), TOOLS, tool)
    for last, word, _ in steps:
        for feat in _feats(last, word):
            assert first.weights(feat) == second.weights(feat) == first.mirrored(feat)
        probs = first.log_probs(_feats(last, word), TOOLS)
        assert probs == second.log_probs(_feats(last, word), TOOLS)
        assert all(math.isfinite(v) for v in probs.values())
        assert math.isclose(sum(math.exp(v) for v in probs.values()), 1.0, rel_tol=1e-9)


def test_turn_position_tells_calls_that_differ_only_in_how_far_the_turn_is() -> None:
    """Same last call, words and tools of the turn; only the number of calls so far differs: the scorer
    learns the second call of a turn apart from the third."""
    second = context_features(("^", "lookup"), frozenset({"go"}), False, frozenset({"lookup"}), ("lookup",))
    third = context_features(("lookup", "lookup"), frozenset({"go"}), False, frozenset({"lookup"}),
                             ("lookup", "lookup"))
    assert "tp\x1f1" in second and "tp\x1f2" in third
    scorer = ToolScorer(Counts(None))
    for _ in range(20):
        scorer.learn(second, TOOLS, "lookup")
        scorer.learn(third, TOOLS, "book")
    at_second, at_third = scorer.log_probs(second, TOOLS), scorer.log_probs(third, TOOLS)
    assert max(at_second, key=lambda t: at_second[t]) == "lookup"
    assert max(at_third, key=lambda t: at_third[t]) == "book"


def test_turn_position_is_capped() -> None:
    many = context_features(("a", "a"), frozenset(), False, frozenset({"a"}), ("a",) * 9)
    assert [f for f in many if f.startswith("tp\x1f")] == [f"tp\x1f{flow_maxent.TURN_POSITIONS}"]
    start = context_features(("^",), frozenset(), True, frozenset(), ())
    assert [f for f in start if f.startswith("tp\x1f")] == ["tp\x1f0"]


def test_the_predictor_rehearses_every_call_it_learns() -> None:
    tools = {"lookup": {"type": "object", "properties": {}}, "book": {"type": "object", "properties": {}}}
    predictor = PatternPredictor()
    history: list[ObservedCall] = []
    for i, name in enumerate(["lookup", "book", "lookup"]):
        context = PredictionContext("s", [{"role": "user", "content": "go"}], "go", tuple(history), tools)
        observed = ObservedCall(ToolCall(name, {}), "ok", True)
        before = predictor.flow.maxent.weights("b")
        predictor.observe(context, observed)
        history.append(observed)
        assert predictor.flow.maxent.remembered == i + 1
        assert predictor.flow.maxent.weights("b") != before


def _session_steps(sid: str, names: list[str]) -> list[tuple[PredictionContext, ObservedCall]]:
    tools = {name: {"type": "object", "properties": {}} for name in ("lookup", "book", "cancel")}
    history: list[ObservedCall] = []
    out = []
    for name in names:
        observed = ObservedCall(ToolCall(name, {}), "ok", True)
        out.append((PredictionContext(sid, [{"role": "user", "content": "go on"}], "go on", tuple(history), tools),
                    observed))
        history.append(observed)
    return out


def test_copies_and_pickles_carry_the_rehearsal_memory() -> None:
    """A copy (or an unpickled predictor, as a restarted worker is) learns on exactly as the original: the
    calls it rehearses are drawn from the same memory by the same generator state."""
    import pickle

    original = PatternPredictor()
    for context, observed in _session_steps("a", ["lookup", "book", "cancel", "lookup", "book"]):
        original.observe(context, observed)
    copies = [original.copy(), pickle.loads(pickle.dumps(original))]
    for copy in copies:
        assert copy.flow.maxent.remembered == original.flow.maxent.remembered == 5
    for context, observed in _session_steps("b", ["book", "cancel", "cancel"]):
        for predictor in (original, *copies):
            predictor.observe(context, observed)
    feats = ("b",)
    for copy in copies:
        assert copy.flow.maxent.weights("b") == original.flow.maxent.weights("b")
        assert copy.flow.maxent.log_probs(feats, ("lookup", "book", "cancel")) == original.flow.maxent.log_probs(
            feats, ("lookup", "book", "cancel"))
