"""The discriminative next-tool scorer (flow_maxent): what it learns, what it updates, how it persists."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.flow_maxent import UPDATE_FLOOR, ToolScorer, context_features
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.store import MemoryPatternStore

TOOLS = ("lookup", "book", "cancel")


def _feats(last: str, word: str, start: bool = False) -> tuple[str, ...]:
    return context_features((last,), frozenset({word}), start, frozenset({last}), ())


def test_learns_an_interaction_of_last_call_and_word() -> None:
    """Which tool follows depends on the pair (last call, word), not on either alone: a per (feature,
    tool) model learns the two words apart after the same call."""
    scorer = ToolScorer(Counts(None))
    cases = [(_feats("lookup", "confirm"), "book"), (_feats("lookup", "drop"), "cancel"),
             (_feats("book", "confirm"), "lookup"), (_feats("book", "drop"), "lookup")]
    for _ in range(30):
        for feats, tool in cases:
            scorer.learn(feats, TOOLS, tool)
    for feats, tool in cases:
        probs = scorer.log_probs(feats, TOOLS)
        assert max(probs, key=lambda t: probs[t]) == tool
        assert math.isclose(sum(math.exp(v) for v in probs.values()), 1.0, rel_tol=1e-9)


def test_untrained_scorer_is_uniform_and_unknown_tools_get_their_share() -> None:
    scorer = ToolScorer(Counts(None))
    probs = scorer.log_probs(_feats("x", "y"), TOOLS)
    assert all(math.isclose(v, -math.log(3)) for v in probs.values())
    scorer.learn(_feats("x", "y"), TOOLS, "book")
    widened = scorer.log_probs(_feats("x", "y"), (*TOOLS, "never_seen"))
    assert set(widened) == {*TOOLS, "never_seen"}
    assert max(widened, key=lambda t: widened[t]) == "book"
    assert scorer.log_probs(_feats("x", "y"), ()) == {}


def test_tools_below_the_floor_are_not_updated() -> None:
    scorer = ToolScorer(Counts(None))
    feats = _feats("lookup", "confirm")
    for _ in range(400):
        scorer.learn(feats, TOOLS, "book")
    assert math.exp(scorer.log_probs(feats, TOOLS)["cancel"]) < UPDATE_FLOOR
    before = scorer.weights("b")["cancel"]
    scorer.learn(feats, TOOLS, "book")
    assert scorer.weights("b")["cancel"] == before  # negligible gradient: left alone
    assert scorer.weights("b")["book"] > 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TOOLS), st.sampled_from(("a", "b", "c")), st.sampled_from(TOOLS)),
                min_size=1, max_size=20))
def test_probabilities_stay_normalised_and_finite(steps: list[tuple[str, str, str]]) -> None:
    scorer = ToolScorer(Counts(None))
    for last, word, tool in steps:
        scorer.learn(_feats(last, word), TOOLS, tool)
        for feat in _feats(last, word):  # the mirror the logits are read from holds the counters' values
            assert scorer.mirrored(feat) == scorer.weights(feat)
        probs = scorer.log_probs(_feats(last, word), TOOLS)
        assert all(math.isfinite(v) and v <= 0 for v in probs.values())
        assert math.isclose(sum(math.exp(v) for v in probs.values()), 1.0, rel_tol=1e-9)


def test_weights_survive_a_store_round_trip() -> None:
    """The scorer's weights are counters: a predictor loaded from the store scores as the one that learned."""
    store = MemoryPatternStore()
    learned = PatternPredictor(store, "fp")
    feats = _feats("lookup", "confirm", start=True)
    for _ in range(5):
        learned.flow.maxent.learn(feats, TOOLS, "book")
    learned.flush()
    loaded = PatternPredictor(store, "fp")
    assert loaded.flow.maxent.log_probs(feats, TOOLS) == learned.flow.maxent.log_probs(feats, TOOLS)
    assert loaded.flow.maxent.weights("b") == learned.flow.maxent.weights("b")
    assert loaded.flow.maxent.mirrored("b") == loaded.flow.maxent.weights("b")


def test_context_features_are_sorted_and_bounded() -> None:
    words = frozenset(f"w{i:02d}" for i in range(40))
    feats = context_features(("^", "a"), words, True, frozenset({"b", "a"}), ("a", "a"))
    assert feats[0] == "b"
    word_feats = [f for f in feats if f.startswith("w\x1f")]
    assert word_feats == sorted(word_feats) and len(word_feats) == 24
    assert feats == context_features(("^", "a"), words, True, frozenset({"a", "b"}), ("a", "a"))
    assert sum(f.startswith("i\x1f") for f in feats) == 1


def test_two_learners_merged_through_a_store_score_with_the_summed_weights() -> None:
    """Weights are additive counters: after both sync, each predictor's mirror holds the sum of both steps."""
    store = MemoryPatternStore()
    first, second = PatternPredictor(store, "fp"), PatternPredictor(store, "fp")
    feats = _feats("lookup", "confirm")
    first.flow.maxent.learn(feats, TOOLS, "book")
    second.flow.maxent.learn(feats, TOOLS, "cancel")
    alone = {t: first.flow.maxent.weights("b")[t] + second.flow.maxent.weights("b")[t] for t in TOOLS}
    first.sync()
    second.sync()  # the store now holds both steps
    first.sync()
    for predictor in (first, second):
        assert predictor.flow.maxent.weights("b") == predictor.flow.maxent.mirrored("b")
        assert all(math.isclose(predictor.flow.maxent.weights("b")[t], alone[t], abs_tol=1e-12) for t in TOOLS)
    assert first.flow.maxent.log_probs(feats, TOOLS) == second.flow.maxent.log_probs(feats, TOOLS)
