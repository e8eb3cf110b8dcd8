"""Tool descriptions as evidence for a turn's first tool (describe, flow's ``desc_match``)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.describe import description_match, description_words
from forethought.predictors.patterns.flow import FlowModel, FlowView
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, tool_schemas

PREAMBLE = "This tool belongs to the office suite, which lets users work with their documents. "
DESCRIBED = {
    "alpha": PREAMBLE + "Remove a document for good.",
    "beta": PREAMBLE + "Count the words of a document.",
    "zeta": PREAMBLE + "Display the contents of a document on the screen.",
}


def _openai(descriptions: dict[str, str]) -> tuple[dict[str, Any], ...]:
    return tuple({"type": "function", "function": {"name": name, "description": text,
                                                    "parameters": {"type": "object", "properties": {}}}}
                 for name, text in descriptions.items())


def test_description_words_read_each_description_and_name() -> None:
    words = description_words([*_openai(DESCRIBED), {"name": "bare_tool"}, {"type": "function"}, "junk"])  # type: ignore[list-item]
    assert {"display", "content", "screen", "zeta"} <= words["zeta"]
    assert "remove" in words["alpha"] and "display" not in words["alpha"]
    assert words["bare_tool"] == frozenset({"bare", "tool"})  # no description: its name words
    assert set(words) == {"alpha", "beta", "zeta", "bare_tool"}


def test_shared_preamble_weighs_nothing_and_the_described_tool_wins() -> None:
    descriptions = description_words(_openai(DESCRIBED))
    tools = sorted(descriptions)
    # Only preamble words: every tool has them, so nothing is told apart.
    assert description_match(frozenset({"office", "suite", "document"}), descriptions, tools) == {}
    shares = description_match(frozenset({"display", "document", "screen"}), descriptions, tools)
    assert shares["zeta"] == 1.0 and shares["alpha"] == shares["beta"] == 0.0
    mixed = description_match(frozenset({"display", "remove"}), descriptions, tools)
    assert math.isclose(mixed["zeta"], 0.5) and math.isclose(mixed["alpha"], 0.5)
    assert description_match(frozenset({"display"}), {}, tools) == {}
    assert description_match(frozenset(), descriptions, tools) == {}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.frozensets(st.sampled_from("uvwxyz")), min_size=1),
       st.frozensets(st.sampled_from("uvwxyz")), st.lists(st.sampled_from("abcdefg"), min_size=1, unique=True))
def test_shares_are_bounded_and_follow_the_words_held(descriptions: dict[str, frozenset[str]],
                                                     words: frozenset[str], candidates: list[str]) -> None:
    shares = description_match(words, descriptions, candidates)
    held = {tool: descriptions.get(tool, frozenset()) & words for tool in candidates}
    matched = frozenset().union(*held.values())
    if not shares:  # nothing matched, or every matched word is in every candidate's description
        assert all(held[tool] == matched for tool in candidates)
        return
    assert set(shares) == set(candidates)
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in shares.values())
    for tool in candidates:
        if not held[tool]:
            assert shares[tool] == 0.0  # a tool whose description holds none of the words gets nothing
        if held[tool] == matched:
            assert math.isclose(shares[tool], 1.0)  # one holding every matched word gets all
        for other in candidates:
            if held[tool] < held[other]:
                assert shares[tool] <= shares[other]


def test_feature_applies_at_a_turn_start_only() -> None:
    flow = FlowModel(Counts(None))
    descriptions = description_words(_openai(DESCRIBED))
    words = frozenset({"display", "report", "screen"})
    start = flow.features(FlowView(("^",), words, (), frozenset(), descriptions), sorted(DESCRIBED))
    later = flow.features(FlowView(("^", "beta"), words, ("beta",), frozenset({"beta"}), descriptions),
                          sorted(DESCRIBED))
    assert start["zeta"]["desc_match"] == 1.0 and start["alpha"]["desc_match"] == 0.0
    assert all(row["desc_match"] == 0.0 for row in later.values())
    plain = flow.features(FlowView(("^",), words, ()), sorted(DESCRIBED))
    assert all(row["desc_match"] == 0.0 for row in plain.values())


def _context(openai_tools: tuple[dict[str, Any], ...]) -> PredictionContext:
    message = "Please display what the quarterly report says on my screen."
    return PredictionContext(session_id="s", messages=({"role": "user", "content": message},), user_message=message,
                             tools=tool_schemas(_openai(DESCRIBED)), openai_tools=openai_tools)


def test_an_untrained_predictor_names_the_described_tool_first() -> None:
    """Nothing learned, tool names that say nothing: the descriptions alone pick the tool; without them
    the ranking falls back to the names' order."""
    predictor = PatternPredictor()
    described = predictor.predict_now(_context(_openai(DESCRIBED)))
    assert described[0].call.name == "zeta"
    blind = PatternPredictor().predict_now(_context(()))
    assert blind[0].call.name != "zeta"
    assert described[0].confidence > next(p.confidence for p in blind if p.call.name == "zeta")


def test_replayed_contexts_carry_the_offered_tools() -> None:
    offered = _openai(DESCRIBED)
    call = ToolCall("zeta", {})
    session = RecordedSession("s", (RecordedTurn("show it", (ObservedCall(call, "{}"), ObservedCall(call, "{}"))),),
                              tool_schemas(offered), "", offered)
    seen = [context.openai_tools for context, _, _ in contexts(session)]
    assert seen == [offered, offered]
    assert RecordedSession("t", ()).openai_tools == ()
