"""Bounded state: every table the pattern predictor keeps stays within its budget however much it sees.

A history of sessions whose values, words and outputs never repeat must leave the predictor's tables
(and its counters) no larger than their budgets allow; what is cut is discarded from the counters and,
at the next save, from a store that can delete; a store larger than the budgets is cut when loaded; the
caches of outputs are bounded by bytes and hold no output beyond them; nothing learned makes a
reference cycle per call.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns import budgets, derive_outputs
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_lists import MAX_LIST_INDEX
from forethought.predictors.patterns.derive_outputs import (
    _RecentIndexes,
    first_leaf_by_name,
    first_leaf_by_path,
    output_index,
)
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, train
from forethought.predictors.patterns.store import CompactingStore, MemoryPatternStore, SqlitePatternStore

_TOOLS: dict[str, Any] = {
    "find": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    "open": {"type": "object", "properties": {"item": {"type": "string"}, "note": {"type": "string"}},
             "required": ["item"]},
}


def _word(n: int, salt: int = 0) -> str:
    letters = "bcdfghjklmnpqrstvwz"
    n = n * 7919 + salt * 104729
    return "".join(letters[(n // 19 ** i) % 19] for i in range(5))


def _session(n: int) -> RecordedSession:
    """A session whose message words, values and output all occur nowhere else."""
    words = " ".join(_word(n, k) for k in range(12))
    query, item = _word(n, 99), f"IT-{n:06d}"
    listing = json.dumps({"items": [{"id": item, "name": _word(n, 98)}, {"id": f"IT-{n + 7:06d}"}]})
    return RecordedSession(f"s{n}", (RecordedTurn(f"Find {query} and open it, {words}.", (
        ObservedCall(ToolCall("find", {"query": query}), listing),
        ObservedCall(ToolCall("open", {"item": item, "note": _word(n, 97)}), f"opened {item} {words}"))),), _TOOLS)


def _sizes(predictor: PatternPredictor) -> dict[str, int]:
    args, flow = predictor.args, predictor.flow
    return {
        "values": max(map(len, args._values.values()), default=0),
        "cue_words": max(map(len, args._cues.values()), default=0),
        "values_per_cue": max((len(v) for cues in args._cues.values() for v in cues.values()), default=0),
        "rules": max((len(r) for level, r in args._rules.items() if level != ("*", "*")), default=0),
        "recent": len(args._recent_order),
        "flow_words": len(flow._word_tools),
        "contexts": len(flow._followers),
        "features": len(flow.maxent._rows),
        "counters": len(predictor.counts),
    }


@pytest.fixture
def small_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Budgets small enough for a short history to run over every one of them."""
    from forethought.predictors.patterns import args, args_records, flow, flow_maxent

    for module, name, value in ((args_records, "VALUES_PER_PARAMETER", 8),
                                (args_records, "CUE_WORDS_PER_PARAMETER", 16),
                                (args_records, "VALUES_PER_CUE_WORD", 2), (args_records, "RULES_PER_PARAMETER", 6),
                                (args, "KEPT_OBSERVATIONS", 12), (flow, "FLOW_WORDS", 40),
                                (flow, "NGRAM_CONTEXTS", 4), (flow_maxent, "SCORER_FEATURES", 30)):
        monkeypatch.setattr(module, name, value)


def test_tables_stay_within_their_budgets_however_long_the_history(small_budgets: None) -> None:
    predictor = PatternPredictor()
    train(predictor, [_session(n) for n in range(40)])
    early = _sizes(predictor)
    train(predictor, [_session(n) for n in range(40, 160)])
    late = _sizes(predictor)
    limits = {"values": 8, "cue_words": 16, "values_per_cue": 2, "rules": 6, "recent": 12, "flow_words": 40,
              "contexts": 4, "features": 30}
    for table, budget in limits.items():
        assert late[table] <= budget * budgets.SLACK, (table, late[table])
    assert late["counters"] <= early["counters"] * 1.5  # flat after warm-up, not growing with the history
    assert late["values"] > 0 and late["cue_words"] > 0  # the tables are in use


def test_what_is_cut_is_discarded_from_the_counters(small_budgets: None) -> None:
    predictor = PatternPredictor()
    train(predictor, [_session(n) for n in range(60)])
    stored = set(predictor.counts.stored())
    kept = {truth for values in predictor.args._values.values() for truth in values}
    value_keys = {key.split("\x1f")[3] for key in stored if key.startswith("c\x1f") and key.count("\x1f") == 3}
    assert value_keys == kept  # no counter of a value cut is left behind
    for (tool, param), cues in predictor.args._cues.items():
        for word, truths in cues.items():
            for key in stored:
                if key.startswith(f"k\x1f{tool}\x1f{param}\x1f{word}\x1f"):
                    assert key.rsplit("\x1f", 1)[1] in truths


def test_cuts_are_the_same_in_every_predictor_that_saw_the_same_calls(small_budgets: None) -> None:
    sessions = [_session(n) for n in range(50)]
    first, second = PatternPredictor(), PatternPredictor()
    train(first, sessions)
    train(second, sessions)
    assert first.counts.state() == second.counts.state()
    assert first.copy().counts.state() == first.counts.state()


def test_a_predictor_without_a_store_keeps_no_log_of_what_to_save() -> None:
    predictor = PatternPredictor()
    train(predictor, [_session(n) for n in range(5)])
    assert predictor.counts.take_pending()[0] == {}
    assert predictor.counts.take_discarded() == set()


def test_counts_discard_forgets_values_and_pending_additions() -> None:
    counts = Counts()
    counts.add_ones(["a", "b"])
    counts.take_pending()
    counts.add("b", 2.0)
    counts.discard(["b", "never"])
    assert "b" not in counts and counts.get("b") == 0.0
    assert counts.take_pending()[0] == {}
    assert counts.take_discarded() == {"b"}
    quiet = Counts(keeps_pending=False)
    quiet.add_ones(["x"])
    quiet.discard(["x"])
    assert quiet.take_pending() == ({}, 0.0) and quiet.take_discarded() == set()


@pytest.mark.parametrize("make_store", [MemoryPatternStore, "sqlite"])
def test_stores_delete_what_is_cut_before_adding_what_was_learned(make_store: Any, tmp_path: Path,
                                                                  small_budgets: None) -> None:
    store = SqlitePatternStore(tmp_path / "p.db") if make_store == "sqlite" else make_store()
    assert isinstance(store, CompactingStore)
    predictor = PatternPredictor(store, "fp", PatternConfig(flush_every=8))
    train(predictor, [_session(n) for n in range(60)])
    predictor.flush()
    saved = store.load("fp").values
    assert set(saved) == set(predictor.counts.stored())  # the store follows the budgets, not the history
    for key, value in predictor.counts.stored().items():
        assert saved[key] == pytest.approx(value)
    predictor.close()


def test_a_store_larger_than_the_budgets_is_cut_when_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryPatternStore()
    learner = PatternPredictor(store, "fp")
    train(learner, [_session(n) for n in range(60)])
    learner.flush()
    from forethought.predictors.patterns import args_records

    monkeypatch.setattr(args_records, "VALUES_PER_PARAMETER", 4)
    loaded = PatternPredictor(store, "fp")
    assert max(map(len, loaded.args._values.values())) <= 4
    assert len(loaded.counts) < len(learner.counts)


def test_output_indexes_are_kept_for_the_latest_outputs_up_to_a_byte_budget() -> None:
    indexes = _RecentIndexes(max_entries=100, max_bytes=10_000)
    outputs = [json.dumps({"n": n, "pad": "x" * 3_000}) for n in range(6)]
    for output in outputs:
        indexes(output)
    assert indexes.kept_bytes <= 10_000
    assert [indexes.holds(o) for o in outputs] == [False, False, False, True, True, True]
    assert indexes(outputs[-1]) is indexes(outputs[-1])  # kept: worked out once


def test_indexing_an_output_and_keying_values_leave_no_reference_cycles() -> None:
    output = json.dumps({"items": [{"id": f"A{n}", "tags": ["x", n]} for n in range(30)], "note": "see A3 and B-7"})
    output_index.cache_clear()
    gc.collect()
    gc.disable()
    try:
        output_index(output)
        value_key({"a": [1, 2.0, {"b": None}]})
        assert gc.collect() == 0
    finally:
        gc.enable()
        output_index.cache_clear()


def _reachable(root: Any) -> list[Any]:
    """The objects reachable from ``root`` through containers and instances (not through classes)."""
    seen: dict[int, Any] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen or isinstance(node, type):
            continue
        seen[id(node)] = node
        stack.extend(gc.get_referents(node))
    return list(seen.values())


_SCALAR = st.one_of(st.text(max_size=8), st.integers(-99, 99), st.booleans(), st.none())
_LONG = st.builds(lambda n: "w" * n, st.integers(0, 1500))
"""Strings long enough that a few of them make a container larger than MAX_KEYED_BYTES."""
_DOCUMENT = st.recursive(st.one_of(_SCALAR, _LONG), lambda inner: st.one_of(
    st.lists(inner, max_size=12), st.dictionaries(st.sampled_from(["a", "b.c", "[0]", "id", ""]), inner,
                                                  max_size=4)), max_leaves=40)


@settings(max_examples=80, deadline=None)
@given(_DOCUMENT)
def test_a_large_container_kept_as_its_route_reads_back_as_the_node_it_was(document: Any) -> None:
    # Keys with dots and brackets make paths ambiguous: the route, not the path, leads back to the node.
    output = json.dumps(document)
    index = derive_outputs._index(output)
    with mock.patch.object(derive_outputs, "MAX_KEYED_BYTES", 10**9):  # nothing is too large to keep
        whole = derive_outputs._index(output)
    assert list(index.leaves) == list(whole.leaves)
    assert index.paths == whole.paths and index.addressable == whole.addressable
    assert index.first_by_path == whole.first_by_path and index.first_by_name == whole.first_by_name
    assert [index.node(n) for n in range(len(index.paths))] == [whole.node(n) for n in range(len(whole.paths))]
    for key in index.by_key:
        assert index.candidates((key,)) == whole.candidates((key,))
    assert set(index.by_key) <= set(whole.by_key)  # large containers are not filed whole (nor were they)


_NUMBERS = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e16, 3]))
_NUMERIC_DOCUMENT = st.recursive(st.one_of(_NUMBERS, _SCALAR), lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=3), inner, max_size=4)), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(_NUMERIC_DOCUMENT)
def test_a_container_is_filed_under_its_value_key_whether_or_not_floats_are_in_it(document: Any) -> None:
    # Containers without floats are keyed by one C encoding; a whole float (2.0) must still key as 2.
    index = derive_outputs._index(json.dumps(document))
    for position, kept in index.containers.items():
        if not isinstance(kept, tuple) and index.addressable[position]:  # (a route: too large to be filed)
            assert position in index.candidates(("v:" + value_key(kept),)), kept


def test_an_index_keeps_no_record_that_no_rule_names() -> None:
    items = [{"id": f"R-{i:04d}", "tags": [i, "t"]} for i in range(500)]
    output = json.dumps({"meta": {"count": 500}, "rooms": items})
    output_index.cache_clear()
    try:
        index = output_index(output)
        assert first_leaf_by_path(output)["rooms"] == items  # read again from the text when asked
        assert first_leaf_by_path(output)["$"] == json.loads(output)
        assert first_leaf_by_name(output)["rooms"] == items
        assert first_leaf_by_path(output)["meta"] == {"count": 500}
        # The records held are those rules name (the first ones and the last two), none of the others.
        walked = {f"R-{i:04d}" for i in (*range(MAX_LIST_INDEX), 498, 499)}
        records = [node for node in _reachable(index) if isinstance(node, dict) and isinstance(node.get("tags"), list)]
        assert {record["id"] for record in records} == walked
        assert not gc.is_tracked(index.by_key)  # numbers and bytes: a table the collector never visits
    finally:
        output_index.cache_clear()


_WORDS = st.sampled_from(["book", "room", "'Blue Lagoon'", "R-204", "on", "2026-03-14", "Friday", "at", "3 pm",
                          "two", "nights", "from", "Oslo", "to", "Rome", "order", "#A77", "notes.txt", "and"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=14), st.lists(_WORDS, max_size=8),
       st.lists(st.tuples(_WORDS, _WORDS), max_size=5))
def test_a_kept_point_forgets_what_it_worked_out_and_gives_every_value_again(
        message: list[str], previous: list[str], records: list[tuple[str, str]]) -> None:
    # A point of a session kept to score rules found later on drops its caches (few objects for the garbage
    # collector): every rule it explains must give the same value after, worked out again.
    output = json.dumps({"items": [{"name": a, "code": b} for a, b in records], "note": " ".join(previous)})
    history = (ObservedCall(ToolCall("find", {"q": " ".join(previous)}), output),)
    sources = Sources(" ".join(message), history, 0, previous_message=" ".join(previous))
    rules = [rule for word in {*message, *previous, *(b for _, b in records)}
             for rule in sources.explain(word, "value")]
    before = [sources.apply_keyed(rule) for rule in rules]
    sources.forget_values()
    assert [sources.apply_keyed(rule) for rule in rules] == before
    fresh = Sources(" ".join(message), history, 0, previous_message=" ".join(previous))
    assert [fresh.apply_keyed(rule) for rule in rules] == before
