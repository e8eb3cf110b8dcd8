"""The pattern predictor as an agent sees it: protocol, control flow, turns, thresholds, chaining."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext, Predictor
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import (
    RecordedSession,
    RecordedTurn,
    contexts,
    from_trajectory,
    tool_schemas,
    train,
)
from forethought.predictors.patterns.store import MemoryPatternStore, tool_set_fingerprint
from forethought.predictors.trajectory import Trajectory, Turn

OBJECT = {"type": "object", "properties": {}}
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = {"list_dir": OBJECT, "read_file": PATH, "summarize": OBJECT, "search": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}


def _research(n: int, topic: str) -> RecordedSession:
    path = f"/notes/{topic}_{n}.md"
    listing = json.dumps({"files": [path, f"/notes/other_{n}.md"]})
    calls = (ObservedCall(ToolCall("search", {"query": topic}), listing),
             ObservedCall(ToolCall("read_file", {"path": path}), f"all about {topic}"),
             ObservedCall(ToolCall("summarize"), "short"))
    return RecordedSession(f"r{n}", (RecordedTurn(f"Research '{topic}' for me", calls),), TOOLS)


TOPICS = ["otters", "comets", "tides", "lichens", "moss", "quartz"]


def _trained(**config: float) -> PatternPredictor:
    predictor = PatternPredictor(config=PatternConfig(**config))  # type: ignore[arg-type]
    train(predictor, [_research(n, topic) for n, topic in enumerate(TOPICS)])
    return predictor


def test_is_a_predictor() -> None:
    assert isinstance(PatternPredictor(), Predictor)


async def test_predict_follows_the_learned_sequence_and_derives_arguments() -> None:
    predictor = _trained()
    steps = list(contexts(_research(50, "glaciers")))
    for context, observed, _ in steps:
        predictions = await predictor.predict(context)
        assert predictions[0].call == observed.call
        assert predictions[0].executable
        assert predictions[0].source == "pattern"
        predictor.observe(context, observed)


def test_untrained_predictor_only_guesses_from_names() -> None:
    context = PredictionContext("s", [], "please search the web for otters", (), TOOLS)
    predictions = PatternPredictor().predict_now(context)
    assert max(predictions, key=lambda p: p.confidence).call.name == "search"


def test_hints_never_rank_above_executable_calls() -> None:
    # Untrained, "search" is the likeliest tool but its query cannot be derived: it stays a hint, ranked
    # after every call that could run, however confident it is.
    context = PredictionContext("s", [], "please search the web for otters", (), TOOLS)
    predictions = PatternPredictor(config=PatternConfig(top_k=10)).predict_now(context)
    flags = [p.executable for p in predictions]
    assert set(flags) == {True, False}  # both kinds are present
    assert flags == sorted(flags, reverse=True)
    hints = [p for p in predictions if not p.executable]
    assert max(hints, key=lambda p: p.confidence).call.name == "search"
    assert max(p.confidence for p in hints) > min(p.confidence for p in predictions if p.executable)


def test_confidence_threshold_and_top_k() -> None:
    context, _, _ = next(iter(contexts(_research(60, "reefs"))))
    everything = _trained(top_k=10).predict_now(context)
    assert len(everything) > 3
    for executable in (True, False):
        ranked = [p.confidence for p in everything if p.executable is executable]
        assert ranked == sorted(ranked, reverse=True)
    assert len(_trained().predict_now(context)) == 3
    cut = everything[1].confidence
    kept = _trained(top_k=10, min_confidence=cut).predict_now(context)
    assert kept and all(p.confidence >= cut for p in kept)
    assert len(kept) < len(everything)


def test_chained_prediction_uses_the_speculative_output() -> None:
    predictor = _trained()
    context, first, _ = next(iter(contexts(_research(70, "dunes"))))
    speculated = ObservedCall(ToolCall("search", {"query": "dunes"}), json.dumps({"files": ["/x/dunes_9.md"]}))
    chained = predictor.predict_after(context, speculated)
    assert chained[0].call == ToolCall("read_file", {"path": "/x/dunes_9.md"})
    assert predictor.predict_now(context)[0].call == first.call, "chaining learns nothing"


def test_a_repeated_user_message_still_starts_a_new_turn() -> None:
    same = "Do it again"
    calls = (ObservedCall(ToolCall("list_dir"), "[]"),)
    session = RecordedSession("rep", (RecordedTurn(same, calls), RecordedTurn(same, calls)), TOOLS)
    predictor = PatternPredictor()
    for context, observed, _ in contexts(session):
        predictor.observe(context, observed)
    assert predictor.counts.get("T") == pytest.approx(2, rel=1e-3), "two turns counted"


def test_trajectories_without_outputs_train_control_flow() -> None:
    tools = [{"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in TOOLS.items()]
    trajectory = Trajectory("t", (Turn("Look around", ((ToolCall("list_dir"),), (ToolCall("summarize"),))),),
                            tuple(tools))
    session = from_trajectory(trajectory)
    assert session.tools == tool_schemas(tools) == TOOLS
    predictor = PatternPredictor()
    for _ in range(3):
        train(predictor, [session])
    context = PredictionContext("new", [], "Look around", (ObservedCall(ToolCall("list_dir"), ""),), TOOLS)
    assert predictor.predict_now(context)[0].call == ToolCall("summarize", {})


def test_for_tools_stores_under_the_tool_set_fingerprint() -> None:
    store = MemoryPatternStore()
    predictor = PatternPredictor.for_tools(TOOLS, store, PatternConfig(flush_every=1))
    train(predictor, [_research(1, "moss")])
    assert store.load(tool_set_fingerprint(TOOLS)).clock == 3
    reloaded = PatternPredictor.for_tools(TOOLS, store)
    assert reloaded.counts.get("N") == pytest.approx(3, rel=1e-3)


def test_parallel_calls_observed_with_one_context_are_learned_in_order() -> None:
    predictor = PatternPredictor()
    for n in range(4):
        context = PredictionContext(f"par{n}", [{"role": "user", "content": "Look around"}], "Look around", (), TOOLS)
        predictor.observe(context, ObservedCall(ToolCall("list_dir"), "[]"))
        predictor.observe(context, ObservedCall(ToolCall("summarize"), "ok"))
    after_list = PredictionContext("new", [{"role": "user", "content": "Look around"}], "Look around",
                                   (ObservedCall(ToolCall("list_dir"), "[]"),), TOOLS)
    assert predictor.predict_now(after_list)[0].call == ToolCall("summarize", {})


def test_trained_on_and_copies_are_independent() -> None:
    trained = PatternPredictor.trained_on([_research(n, t) for n, t in enumerate(TOPICS)])
    copy = trained.copy()
    context, observed, _ = list(contexts(_research(80, "fjords")))[1]
    assert copy.predict_now(context) == trained.predict_now(context)
    assert copy.predict_now(context)[0].call == observed.call
    copy.observe(context, observed)
    assert copy.counts.get("N") > trained.counts.get("N")
    tools = [{"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in TOOLS.items()]
    from_trajectories = PatternPredictor.trained_on(
        [Trajectory("t", (Turn("Look around", ((ToolCall("list_dir"),),)),), tuple(tools))])
    assert from_trajectories.counts.get("N") == pytest.approx(1, rel=1e-3)


_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)
_JSONISH = st.one_of(_TEXT, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                     st.none(), st.lists(_TEXT, max_size=3), st.dictionaries(_TEXT, _TEXT, max_size=3))


@st.composite
def _session_steps(draw: st.DrawFn) -> list[tuple[PredictionContext, ObservedCall]]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c_d", "eF"]), min_size=1, max_size=3, unique=True))
    tools = {n: {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}},
                 "required": draw(st.sampled_from([[], ["x"], ["x", "y"]]))} for n in names}
    steps = []
    history: list[ObservedCall] = []
    for _ in range(draw(st.integers(1, 5))):
        message = draw(_TEXT)
        arguments = draw(st.dictionaries(st.sampled_from(["x", "y", "z"]), _JSONISH, max_size=3))
        output = draw(st.one_of(_TEXT, _JSONISH.map(lambda v: json.dumps(v))))
        observed = ObservedCall(ToolCall(draw(st.sampled_from(names)), arguments), output, draw(st.booleans()))
        steps.append((PredictionContext("h", [{"role": "user", "content": message}], message, tuple(history), tools),
                      observed))
        history.append(observed)
    return steps


@settings(max_examples=60, deadline=None)
@given(_session_steps())
def test_arbitrary_sessions_never_break_the_predictor(steps: list[tuple[PredictionContext, ObservedCall]]) -> None:
    predictor = PatternPredictor(config=PatternConfig(top_k=6))
    for _ in range(2):
        for context, observed in steps:
            for prediction in predictor.predict_now(context):
                required = context.tools[prediction.call.name]["required"]
                assert prediction.executable == all(r in prediction.call.arguments for r in required)
            predictor.observe(context, observed)
