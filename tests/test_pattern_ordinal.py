"""A fixed list position is a different bet when the message names an ordinal ("the third one")."""

from __future__ import annotations

import json

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.args import ORDINAL_MARK, SEP
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train

TOOLS = {
    "list_items": {"type": "object", "properties": {}},
    "open": {"type": "object", "required": ["item"], "properties": {"item": {"type": "string"}}},
}
ORDINALS = {1: "second", 2: "third"}


def _session(n: int, position: int | None) -> RecordedSession:
    items = [f"IT-{n}{k}" for k in range(4)]
    user = ("Open the newest item for me." if position is None
            else f"Open the {ORDINALS[position]} item on the list for me.")
    calls = (ObservedCall(ToolCall("list_items", {}), json.dumps({"items": items})),
             ObservedCall(ToolCall("open", {"item": items[position or 0]}), json.dumps({"ok": True})))
    return RecordedSession(f"s{n}", (RecordedTurn(user, calls),), TOOLS)


def _trained() -> PatternPredictor:
    predictor = PatternPredictor(config=PatternConfig(top_k=3))
    train(predictor, [_session(n, None) for n in range(8)] + [_session(8, 2), _session(9, 1)])
    return predictor


def _open_prediction(predictor: PatternPredictor, session: RecordedSession) -> ToolCall:
    steps = list(contexts(session))
    predictor.observe(steps[0][0], steps[0][1])
    return predictor.predict_now(steps[1][0])[0].call


def test_an_ordinal_in_the_message_beats_the_usual_position() -> None:
    predictor = _trained()
    assert _open_prediction(predictor, _session(20, 1)) == ToolCall("open", {"item": "IT-201"})
    # Without an ordinal the usual position stays the bet.
    assert _open_prediction(predictor.copy(), _session(21, None)) == ToolCall("open", {"item": "IT-210"})


def test_positional_records_apart_survive_a_copy_and_name_no_rule() -> None:
    predictor = _trained()
    apart = [k for k in predictor.counts if k.startswith("r" + SEP) and ORDINAL_MARK in k]
    assert apart, "positional rules keep a record for messages naming an ordinal"
    clone = predictor.copy()
    assert all(ORDINAL_MARK not in rule for rules in clone.args._rules.values() for rule in rules)
    assert _open_prediction(clone, _session(22, 2)) == ToolCall("open", {"item": "IT-222"})
