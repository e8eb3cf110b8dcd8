"""The pattern predictor's shortcuts compute exactly what the plain definitions do.

Prediction is kept cheap by skipping work that cannot change the answer (less likely tools, values that
cannot make the cut), by remembering per-message and per-step work, and by faster forms of a few
functions. Each is checked here against the plain computation it replaces.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.patterns.counts import Counts, wilson_lower
from forethought.predictors.patterns.derive_rules import Rule, Sources
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.mentions import alnum_words as _alnum_words
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train
from forethought.predictors.patterns.select import best_first
from forethought.predictors.patterns.text import _WORD, _neighbours, _word_neighbours


def _schema(*required: str, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    props = {name: {"type": "string"} for name in (*required, *optional)}
    return {"type": "object", "properties": props, "required": list(required)}


TOOLS = {"search": _schema("query"), "read_file": _schema("path"), "summarize": _schema(optional=("style",)),
         "book": _schema("city", optional=("seat",)), "invoice": _schema("booking_id")}
TOPICS = ["otters", "comets", "tides", "lichens", "moss", "quartz", "dunes", "reefs"]
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Kyoto", "Quito"]


def _session(n: int) -> RecordedSession:
    topic, city = TOPICS[n % len(TOPICS)], CITIES[n % len(CITIES)]
    path = f"/notes/{topic}_{n}.md"
    research = (ObservedCall(ToolCall("search", {"query": topic}), json.dumps({"files": [path, "/notes/x.md"]})),
                ObservedCall(ToolCall("read_file", {"path": path}), f"all about {topic}"),
                ObservedCall(ToolCall("summarize", {"style": "short"} if n % 3 else {}), "done"))
    booking = (ObservedCall(ToolCall("book", {"city": city}), json.dumps({"booking_id": f"BK-{n}{n}7"})),
               ObservedCall(ToolCall("invoice", {"booking_id": f"BK-{n}{n}7"}), json.dumps({"total": n})))
    turns = (RecordedTurn(f"Research '{topic}' for me", research), RecordedTurn(f"Book a trip to {city}", booking))
    return RecordedSession(f"s{n}", turns if n % 2 else turns[::-1], TOOLS)


def _unpruned(predictor: PatternPredictor, context: PredictionContext) -> list[Prediction]:
    """The prediction with every ranked tool scored in full and calls keyed by their arguments' JSON."""
    config = predictor.config
    step = predictor._step(context)
    options: dict[str, Prediction] = {}
    for tool, p_name in predictor.flow.rank(step.view, predictor._candidates(context))[: config.name_candidates]:
        for _, prediction in predictor._calls_for(tool, p_name, context.tools.get(tool), step):
            key = tool + "\x1f" + value_key(dict(prediction.call.arguments))
            if key not in options or options[key].confidence < prediction.confidence:
                options[key] = prediction
    ordered = sorted(options.values(), key=lambda p: (not p.executable, -p.confidence))
    return [p for p in ordered if p.confidence >= config.min_confidence][: config.top_k]


def test_skipping_tools_that_cannot_make_the_top_k_changes_no_prediction() -> None:
    for top_k, name_candidates in ((1, 5), (2, 3), (3, 5), (4, 6)):
        # name_mass above 1: only the exact pruning (tools that cannot beat the k-th call) is on.
        config = PatternConfig(top_k=top_k, name_candidates=name_candidates, name_mass=2.0)
        predictor = PatternPredictor(config=config)
        train(predictor, [_session(n) for n in range(8)])
        compared = 0
        for n in range(8, 14):
            for context, observed, _ in contexts(_session(n)):
                assert predictor.predict_now(context) == _unpruned(predictor, context)
                predictor.observe(context, observed)
                compared += 1
        assert compared == 30


def test_tools_left_untried_by_name_mass_change_only_unlikely_calls() -> None:
    config = PatternConfig(top_k=3, name_candidates=6, name_mass=0.9)
    predictor = PatternPredictor(config=config)
    train(predictor, [_session(n) for n in range(8)])
    for n in range(8, 14):
        for context, observed, _ in contexts(_session(n)):
            # The tools left out hold at most 1 - name_mass of the tool probability, so only calls below
            # that confidence can differ.
            likely = [p for p in predictor.predict_now(context) if p.confidence > 1 - config.name_mass]
            assert likely == [p for p in _unpruned(predictor, context) if p.confidence > 1 - config.name_mass]
            predictor.observe(context, observed)


def test_a_prediction_and_the_learning_of_its_call_share_one_step() -> None:
    shared, fresh = PatternPredictor(), PatternPredictor()
    for n in range(6):
        for context, observed, _ in contexts(_session(n)):
            assert shared.predict_now(context) == fresh.predict_now(replace(context))
            shared.observe(context, observed)  # the context the prediction was made in: its step is reused
            fresh.observe(replace(context), observed)  # an equal copy: worked out again
    assert shared.counts.state() == fresh.counts.state()


def test_remembered_rule_values_are_handed_out_as_fresh_containers() -> None:
    message = "Post #alpha and #beta now"
    everything = Rule("all", ("hashtag",), "all.id", wrap=True)
    wrapped = Rule("user", ("hashtag", "i", "0"), "all.id", wrap=True)
    sources = Sources(message)
    for rule in (everything, wrapped):
        first = sources.apply(rule)
        first.append("#mutated")
        assert "#mutated" not in sources.apply(rule)
        assert "#mutated" not in Sources(message).apply(rule)  # remembered per message, across steps
    assert Sources(message).apply(everything) == ["#alpha", "#beta"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans(), st.floats(0, 0.5)), max_size=12))
def test_best_first_is_a_stable_sort_that_scores_only_what_it_must(entries: list[tuple[float, bool, float]]) -> None:
    scores = [round(score, 2) for score, _, _ in entries]  # rounded: ties happen
    items = [(score if exact else score + slack, exact, i) for i, (score, (_, exact, slack))
             in enumerate(zip(scores, entries, strict=True))]
    expected = sorted(((score, i) for i, score in enumerate(scores)), key=lambda pair: pair[0], reverse=True)
    scored: list[int] = []

    def score_of(i: int) -> float:
        scored.append(i)
        return scores[i]

    assert list(best_first(items, score_of)) == expected
    assert len(scored) == len(set(scored)) == sum(not exact for _, exact, _ in entries)


def _canonical(value: Any) -> str:
    """value_key as first written: normalise, then canonical JSON."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float):
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            return int(v) if float(v).is_integer() else float(v)
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {str(k): norm(x) for k, x in v.items()}
        return str(v)

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_SCALARS = st.one_of(st.text(), st.booleans(), st.none(), st.integers(-(10**40), 10**40), st.floats())


@settings(max_examples=300, deadline=None)
@given(st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3), st.dictionaries(st.text(max_size=3), _SCALARS, max_size=3)))
def test_value_keys_of_scalars_are_the_canonical_json(value: Any) -> None:
    assert value_key(value) == _canonical(value)


_TEXT = st.lists(st.sampled_from(["a", "b ", " ", "Z9", "_", "-", "'", ".", ",", "/", "\n", "word ", "the ",
                                  "x" * 38, "y" * 45, "Mr ", "12 "]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_neighbours_of_words_read_from_the_word_list_match_the_text_search(text: str) -> None:
    spans = [m.span() for m in _WORD.finditer(text)]
    words = _WORD.findall(text)
    for i, (start, end) in enumerate(spans):
        assert _word_neighbours(text, spans, words, i) == _neighbours(text, start, end)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_alphanumeric_words_are_those_of_str_isalnum(text: str) -> None:
    plain = " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())
    assert _alnum_words(text) == f" {plain} "


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e6), st.floats(1e-6, 1e6), st.floats(0, 3))
def test_a_wilson_lower_bound_never_exceeds_successes_over_trials_plus_z_squared(
        successes: float, trials: float, z: float) -> None:
    assert wilson_lower(successes, trials, z) <= successes / (trials + z * z) + 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "~w"]), st.floats(-2, 2), st.integers(0, 3)), max_size=20),
       st.sampled_from([None, 3.0, 50.0]))
def test_stored_numbers_times_the_scale_are_the_counts(steps: list[tuple[str, float, int]],
                                                       half_life: float | None) -> None:
    counts = Counts(half_life)
    for key, delta, ticks in steps:
        counts.add(key, delta)
        counts.tick(ticks)
    for key in ("a", "b", "~w", "never"):
        stored = counts.stored()
        now = (stored[key] if key.startswith("~") else stored[key] * counts.scale) if key in stored else 0.0
        assert now == counts.get(key)
