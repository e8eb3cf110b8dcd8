"""Whole-call shape learned per tool: repeated calls, distinct values, spelling alternatives, ordinals."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ObservedCall, PatternPredictor, PredictionContext, ToolCall
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_ordinal import at_ordinal, message_ordinal, ordinal_path
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.distinct import DistinctModel, assign, comparable_key, repeats_a_value
from forethought.predictors.patterns.numbers import NumberSpelling
from forethought.predictors.patterns.repeats import RECENT_CALLS, RepeatModel, call_key, recent_calls

STRING = {"type": "string"}


def _context(sid: str, text: str, history: tuple[ObservedCall, ...], tools: dict[str, Any]) -> PredictionContext:
    return PredictionContext(sid, [{"role": "user", "content": text}], text, history, tools)


# --- repeated calls ----------------------------------------------------------------------------------


def test_repeat_rate_is_learned_per_tool_and_shrunk_to_all_tools() -> None:
    model = RepeatModel(Counts())
    assert model.rate("poll") == 0.5  # nothing learned: the uninformed prior
    recent = recent_calls([("poll", {"job": 1}), ("read", {"path": "a"})])
    for _ in range(20):
        model.learn("poll", {"job": 1.0}, recent)  # 1 and 1.0 are one value
        model.learn("read", {"path": "b"}, recent)  # read again, other arguments
    assert model.rate("poll") > 0.8 and model.rate("read") < 0.1
    assert 0.1 < model.rate("never_seen") < 0.9  # the rate over all tools
    assert model.factor("read", {"path": "a"}, recent) == model.rate("read")
    assert model.factor("read", {"path": "z"}, recent) == 1.0  # not a repeat
    assert model.factor("write", {"path": "a"}, recent) == 1.0  # tool not called recently
    model.learn("write", {"path": "a"}, recent)  # a tool not called recently is no trial
    assert model.counts.get("e\x1fwrite\x1fn") == 0


def test_recent_calls_are_bounded_and_tolerate_odd_arguments() -> None:
    calls: list[tuple[str, Any]] = [("t", {"i": i}) for i in range(RECENT_CALLS + 10)]
    recent = recent_calls(calls)
    assert len(recent["t"]) == RECENT_CALLS and call_key({"i": 0}) not in recent["t"]
    assert recent_calls([]) == {}
    circular: dict[str, Any] = {}
    circular["self"] = circular
    assert call_key(circular) == ""  # cannot be compared: never a repeat
    assert recent_calls([("t", circular)]) == {}
    assert call_key({"city": "Zürich", "n": 1}) == call_key({"n": 1.0, "city": "Zürich"})


def test_a_tool_whose_calls_never_repeat_stops_proposing_the_last_call() -> None:
    tools = {"inspect": {"type": "object", "properties": {"room": STRING}, "required": ["room"]}}
    predictor = PatternPredictor()
    for n in range(6):  # the user names one room per turn and it is inspected once
        history: tuple[ObservedCall, ...] = ()
        for room in (f"R{n}a", f"R{n}b"):
            context = _context(f"s{n}", f"Inspect room '{room}'.", history, tools)
            observed = ObservedCall(ToolCall("inspect", {"room": room}), "ok")
            predictor.observe(context, observed)
            history = (*history, observed)
    done = ObservedCall(ToolCall("inspect", {"room": "Q1"}), "ok")
    best = predictor.predict_now(_context("live", "Inspect room 'Q1'.", (done,), tools))
    assert best and all(p.call != done.call or p.confidence < 0.05 for p in best)
    assert predictor.repeats.rate("inspect") < 0.2


# --- distinct values ---------------------------------------------------------------------------------


class _C:
    def __init__(self, value: Any, score: float, absent: bool = False) -> None:
        self.value, self.score, self.absent, self.key = value, score, absent, json.dumps(value)


def test_assign_gives_clashing_parameters_distinct_values_best_score_first() -> None:
    choices = {"src": [_C("LAX", 0.9), _C("SFO", 0.5)], "dst": [_C("lax", 0.7), _C("JFK", 0.6)],
               "n": [_C(2, 0.4)], "flag": [_C(True, 0.8)], "other": [_C(True, 0.3)]}
    assert assign(choices, distinct=False) == {p: 0 for p in choices}
    picks = assign(choices, distinct=True)
    assert picks["src"] == 0 and picks["dst"] == 1  # "lax" is "LAX": the better-scored parameter keeps it
    assert picks["flag"] == 0 and picks["other"] == 0  # booleans are not values that must differ
    only = {"a": [_C("x", 0.9)], "b": [_C("x", 0.8)]}
    assert assign(only, distinct=True) == {"a": 0, "b": 0}  # no other value: keeps the taken one
    assert assign({}, distinct=True) == {}
    assert assign({"a": [_C(None, 0.5, absent=True)], "b": [_C(None, 0.4, absent=True)]}, True) == {"a": 0, "b": 0}


def test_distinct_rate_counts_calls_with_two_comparable_values() -> None:
    model = DistinctModel(Counts())
    for _ in range(10):
        model.learn("fly", {"src": "LAX", "dst": "JFK", "seats": 2})
        model.learn("copy", {"src": "a.txt", "dst": "a.txt"})
        model.learn("flags", {"a": True, "b": True, "c": ""})  # nothing comparable: no trial
    assert model.rate("fly") < 0.15 < 0.85 < model.rate("copy")
    assert model.counts.get("q\x1fflags\x1fn") == 0
    assert repeats_a_value(["X", "x"]) is True and repeats_a_value(["x"]) is None
    assert repeats_a_value([1, 1.0]) is True and repeats_a_value([[1], [1]]) is None
    assert comparable_key(float("nan")) is not None and comparable_key(" ") is None


def test_predictor_keeps_two_parameters_apart() -> None:
    tools = {"rename": {"type": "object", "required": ["old", "new"],
                        "properties": {"old": STRING, "new": STRING}}}
    predictor = PatternPredictor()
    for n in range(4):  # old: the first quoted string, new: the last one
        old, new = f"file{n}.txt", f"name{n}.txt"
        predictor.observe(_context(f"s{n}", f"Rename '{old}' to '{new}'.", (), tools),
                          ObservedCall(ToolCall("rename", {"old": old, "new": new}), "ok"))
    # One quoted string: both rules give it, but a call never passed one value twice.
    best = predictor.predict_now(_context("live", "Rename 'only.txt' please.", (), tools))
    first = best[0].call.arguments
    assert first["old"] != first["new"] and "only.txt" in first.values()


# --- number spelling alternatives ---------------------------------------------------------------------


def test_other_spelling_only_for_parameters_spelt_both_ways() -> None:
    spelling = NumberSpelling()
    assert spelling.other_spelling("t", "p", None, 5) is None
    spelling.learn("t", {"p": 5, "q": 1})
    assert spelling.other_spelling("t", "p", None, 5) is None  # always an int so far
    for _ in range(3):
        spelling.learn("t", {"p": 5.0})
    other = spelling.other_spelling("t", "p", None, 7.0)
    assert other is not None and type(other[0]) is int and other[1] == 0.25
    assert spelling.other_spelling("t", "p", None, 2.5) is None
    assert spelling.other_spelling("t", "p", None, True) is None
    assert spelling.other_spelling("t", "p", None, "5") is None


# --- ordinals ----------------------------------------------------------------------------------------


def test_message_ordinal_reads_positions_after_a_determiner() -> None:
    cases = {"the first stock on the list": 0, "my last order": -1, "the second file": 1,
             "the third one": 2, "the second to last file": -2, "the second from the end": -2,
             "fly first class": None, "Lastly, do it": None, "a last-minute fix": None,
             "on the 1st of December": None, "the first-class lounge": None, "": None, "THE LAST ONE": -1}
    for text, position in cases.items():
        assert message_ordinal(text) == position, text
    assert message_ordinal(None) is None
    assert ordinal_path("items[2].id", 2) == "items[#].id" and ordinal_path("items[2].id", 1) is None
    assert ordinal_path("a.b", 0) is None and ordinal_path("x[-1][0]", -1) == "x[#][0]"
    assert at_ordinal("items[#].id", -1) == "items[-1].id"


def test_ordinal_rule_picks_the_named_item_of_an_output_list() -> None:
    listing = ObservedCall(ToolCall("list", {}), json.dumps({"items": ["alpha", "beta", "gamma", "delta"]}))
    learn = Sources("Open the second item.", (listing,))
    rules = [r for r in learn.explain("beta", "name") if r.source == "ord"]
    assert rules, "the second item is explained by its position"
    for text, expected in (("Open the last item.", "delta"), ("Open the first item.", "alpha"),
                           ("Open the third item.", "gamma"), ("Open an item.", None),
                           ("Open the tenth item.", None)):
        assert Sources(text, (listing,)).apply(rules[0]) == expected, text
    broken = ObservedCall(ToolCall("list", {}), "not json \u0000 [[[")
    assert Sources("Open the last item.", (broken,)).apply(rules[0]) is None


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=200))
def test_ordinal_never_crashes(text: str) -> None:
    position = message_ordinal(text)
    assert position is None or -2 <= position <= 9


@settings(max_examples=25, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=20),
       st.text(max_size=60))
def test_odd_outputs_and_messages_never_crash_prediction(output: Any, text: str) -> None:
    tools = {"get": {"type": "object", "properties": {"x": STRING}, "required": ["x"]},
             "put": {"type": "object", "properties": {"x": STRING, "y": {"type": "number"}}}}
    predictor = PatternPredictor()
    rendered = json.dumps(output, default=str) if not isinstance(output, str) else output
    first = ObservedCall(ToolCall("get", {"x": text}), rendered)
    predictor.observe(_context("s", text, (), tools), first)
    predictor.observe(_context("s", text, (first,), tools), ObservedCall(ToolCall("put", {"x": text, "y": 1}), ""))
    for prediction in predictor.predict_now(_context("s", f"the last {text}", (first,), tools)):
        assert prediction.call.name in tools and 0.0 <= prediction.confidence <= 1.0


def test_the_other_spelling_is_offered_after_the_first_call() -> None:
    tools = {"fill": {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}}
    predictor = PatternPredictor()
    for n, amount in enumerate((10.0, 20.0, 30, 40.0)):  # mostly floats, once an int
        predictor.observe(_context(f"s{n}", f"Add {int(amount)} litres.", (), tools),
                          ObservedCall(ToolCall("fill", {"amount": amount}), "ok"))
    best = predictor.predict_now(_context("live", "Add 50 litres.", (), tools))
    spellings = [(type(p.call.arguments["amount"]), p.confidence) for p in best if p.call.arguments.get("amount") == 50]
    assert spellings[0][0] is float and (int, spellings[1][1]) in spellings[1:]
    assert spellings[1][1] < spellings[0][1]


# --- which tool opens a turn ---------------------------------------------------------------------------


def test_the_words_of_a_turn_tell_which_of_its_tools_comes_first() -> None:
    empty = {"type": "object", "properties": {}}
    tools = {"fetch": empty, "store": empty}
    predictor = PatternPredictor()
    for n in range(8):  # both tools in every turn; the words say which one goes first
        word, order = ("archive", ("fetch", "store")) if n % 2 else ("restore", ("store", "fetch"))
        history: tuple[ObservedCall, ...] = ()
        for name in order:
            observed = ObservedCall(ToolCall(name, {}), "ok")
            predictor.observe(_context(f"s{n}", f"Please {word} everything now.", history, tools), observed)
            history = (*history, observed)
    for word, first in (("archive", "fetch"), ("restore", "store")):
        best = predictor.predict_now(_context(f"live-{word}", f"Please {word} everything now.", (), tools))
        assert best[0].call.name == first, word


def test_weight_steps_are_bounded_whatever_the_feature_scale() -> None:
    from forethought.predictors.patterns.flow import FEATURES, LEARNING_RATE

    predictor = PatternPredictor()
    tools = {f"t{i}": {"type": "object", "properties": {}} for i in range(30)}
    before = {f: predictor.flow.weight(f) for f in FEATURES}
    predictor.observe(_context("s", "zzz", (), tools), ObservedCall(ToolCall("t7", {}), "ok"))
    after = {f: predictor.flow.weight(f) for f in FEATURES}
    assert all(abs(after[f] - before[f]) <= LEARNING_RATE + 1e-12 for f in FEATURES)


def test_huge_outputs_odd_arguments_and_unicode_do_not_break_the_new_derivations() -> None:
    tools = {"list": {"type": "object", "properties": {}},
             "open": {"type": "object", "properties": {"name": STRING, "n": {"type": "number"}}, "required": ["name"]}}

    def huge(n: int) -> str:  # about 1 MB: indexed up to its byte bound
        return json.dumps({"items": [f"élément-{n}-{i}" for i in range(60_000)]})

    predictor = PatternPredictor()
    for n, word in enumerate(("first", "second", "third")):  # the ordinal, not a fixed position, names it
        listing = ObservedCall(ToolCall("list", {}), huge(n))
        predictor.observe(_context(f"s{n}", "List them.", (), tools), listing)
        opened = ObservedCall(ToolCall("open", {"name": f"élément-{n}-{n}", "n": 2}), "ok")
        predictor.observe(_context(f"s{n}", f"Open the {word} one.", (listing,), tools), opened)
        odd = ObservedCall(ToolCall("open", {"name": b"bytes", "n": {1, 2}, "x": [None, [float("nan")]]}), "")
        predictor.observe(_context(f"s{n}", "Open the last one.", (listing, opened), tools), odd)
    listing = ObservedCall(ToolCall("list", {}), huge(9))
    best = predictor.predict_now(_context("live", "Open the fourth one.", (listing,), tools))
    assert best and best[0].call.name == "open" and best[0].call.arguments["name"] == "élément-9-3"
    empty = ObservedCall(ToolCall("list", {}), json.dumps({"items": []}))
    for prediction in predictor.predict_now(_context("live2", "Open the second one.", (empty,), tools)):
        assert not str(prediction.call.arguments.get("name", "")).startswith("élément-9")  # nothing to pick
    assert call_key({"name": b"bytes", "n": {1, 2}}) != ""  # unusual types still compare (by their text)
