"""Enumerations in a message ("'Travel' and 'Adventure'", "a.txt, b.txt or c.txt") as list arguments."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.derive_index import atom_runs
from forethought.predictors.patterns.derive_rules import Rule, Sources
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train


def _runs(text: str) -> dict[str, list[list[str]]]:
    return {kind: [[a.text for a in run] for run in runs] for kind, runs in atom_runs(text).items()}


def test_runs_are_items_joined_by_separators_only() -> None:
    runs = _runs("Tag it 'TravelUpdate' and 'BusinessTrip' for travel, say 'Just cancelled', user 'john' "
                 "and password 'j1'. Compare a.txt, b.txt or c.txt; then d.txt too.")
    # "for travel", "user", "and password" are more than separators: only the two tags make a run
    assert runs["quoted"] == [["TravelUpdate", "BusinessTrip"]]
    assert runs["file"] == [["a.txt", "b.txt", "c.txt", "d.txt"]]  # "; then" is a separator
    assert _runs("only 'one' here") == {}
    assert _runs("") == {}


def test_a_run_needs_two_items_and_stops_at_a_word() -> None:
    assert _runs("files x.txt and y.txt please z.txt")["file"] == [["x.txt", "y.txt"]]
    assert "file" not in _runs("x.txt please y.txt")


@settings(max_examples=120, deadline=None)
@given(st.lists(st.sampled_from(["'alpha'", "'Beta Two'", "r.txt", "#tag", "@bob", "and", "or", ",", "then",
                                 "please", "12", "USR042", "'x'"]), max_size=14))
def test_run_items_are_in_order_and_separated_by_separators(words: list[str]) -> None:
    text = " ".join(words)
    for runs in atom_runs(text).values():
        for run in runs:
            assert len(run) >= 2
            starts = [a.start for a in run]
            assert starts == sorted(starts) and len(set(starts)) == len(starts)
            for a, b in itertools.pairwise(run):
                gap = text[text.find(a.text, a.start) + len(a.text):b.start]
                assert not re.search(r"[A-Za-z0-9]", re.sub(r"\b(?:and|or|plus|then)\b", "", gap, flags=re.I)), gap


TOOLS = {
    "post": {"type": "object", "required": ["content", "tags"],
             "properties": {"content": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}},
}


def _session(n: int, content: str, tags: list[str]) -> RecordedSession:
    named = " and ".join(f"'{t}'" for t in tags)
    user = f"Log in as 'user{n}' with password 'pw{n}x', then post '{content}' with the hashtags {named} please."
    call = ToolCall("post", {"content": content, "tags": ["#" + t for t in tags]})
    return RecordedSession(f"s{n}", (RecordedTurn(user, (ObservedCall(call, json.dumps({"ok": True})),)),), TOOLS)


def test_an_enumeration_after_a_cue_word_becomes_a_list_argument() -> None:
    predictor = PatternPredictor(config=PatternConfig(top_k=3))
    train(predictor, [_session(0, "Hello", ["Sun", "Sea"]), _session(1, "Trip done", ["Road", "Map", "Fuel"]),
                      _session(2, "Back home", ["Home", "Rest"])])
    context, observed, _ = next(iter(contexts(_session(7, "New post", ["Alpha", "Beta", "Gamma"]))))
    best = predictor.predict_now(context)[0]
    assert best.call == observed.call == ToolCall("post", {"content": "New post",
                                                           "tags": ["#Alpha", "#Beta", "#Gamma"]})
    assert best.executable


def test_run_rules_name_nothing_in_a_message_without_runs() -> None:
    sources = Sources("nothing listed here")
    for locator in (("quoted", "run", "i", "0"), ("quoted", "run", "r", "1"), ("file", "run", "b", "file")):
        assert sources.apply(Rule("all", locator, "all.id", wrap=True)) is None


@st.composite
def _enumeration(draw: st.DrawFn) -> tuple[Sources, list[Any]]:
    items = draw(st.lists(st.sampled_from(["alpha", "Beta", "notes.txt", "USR7", "Zed", "q_1"]), min_size=2,
                          max_size=4, unique=True))
    quote = draw(st.booleans())
    joined = ", ".join(f"'{i}'" if quote else i for i in items[:-1]) + " and " + (
        f"'{items[-1]}'" if quote else items[-1])
    prefix = draw(st.sampled_from(["", "Use ", "Tag them: ", "files 'x.py' or "]))
    value: list[Any] = draw(st.sampled_from([items, ["#" + i for i in items], items[:2]]))
    return Sources(prefix + joined + draw(st.sampled_from(["", ".", " now"]))), value


@settings(max_examples=120, deadline=None)
@given(_enumeration())
def test_every_run_rule_found_reproduces_the_list(case: tuple[Sources, list[Any]]) -> None:
    sources, value = case
    for rule in sources.explain(value):
        assert value_key(sources.apply(rule)) == value_key(value), rule
