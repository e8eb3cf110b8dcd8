"""What a pattern store holds never reaches the predictor: counter names another program (or a damaged file)
left there, and rows whose numbers are not numbers, are skipped on loading; saving goes on."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import ObservedCall, PatternPredictor, PredictionContext, ToolCall
from forethought.predictors.patterns.store import MemoryPatternStore, SqlitePatternStore, tool_set_fingerprint

S = "\x1f"
TOOLS = {"search": {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}}}
FP = tool_set_fingerprint(TOOLS)
VALUE = S.join(("c", "search", "q", '"cats"'))


def _context(sid: str) -> PredictionContext:
    return PredictionContext(sid, [{"role": "user", "content": "search cats"}], "search cats", (), TOOLS)


def _learnt(store: MemoryPatternStore | SqlitePatternStore) -> None:
    predictor = PatternPredictor.for_tools(TOOLS, store)
    for i in range(5):
        predictor.observe(_context(f"s{i}"), ObservedCall(ToolCall("search", {"q": "cats"}), "ok"))
    predictor.close()


def _still_works(store: MemoryPatternStore | SqlitePatternStore) -> PatternPredictor:
    """A predictor loading ``store`` predicts, learns and saves."""
    predictor = PatternPredictor.for_tools(TOOLS, store)
    predictions = predictor.predict_now(_context("n"))
    assert all(0.0 <= p.confidence <= 1.0 for p in predictions)
    predictor.observe(_context("n"), ObservedCall(ToolCall("search", {"q": "cats"}), "ok"))
    predictor.flush()
    return predictor


GARBAGE_NAMES = [
    S.join(("c", "search", "q", "{broken")),  # a value key that is not JSON
    S.join(("c", "search", "q", "9" * 5000)),  # an int past Python's digit limit
    S.join(("c", "search", "q", "[" * 5000)),  # nesting past the recursion limit
    S.join(("k", "search", "q", "cats", "{broken")),
    S.join(("r", "search", "q", "[not json", "n")),
    S.join(("r", "search", "q", '{"a":1}', "s")),  # JSON, not a rule's shape
    S.join(("r", "search", "q", "7", "s")),
    "~M" + S + "zz", S.join(("n", "", "")), "",
]


@pytest.mark.parametrize("name", GARBAGE_NAMES, ids=range(len(GARBAGE_NAMES)))
def test_a_counter_name_the_model_did_not_write_is_skipped(name: str) -> None:
    store = MemoryPatternStore()
    _learnt(store)
    store.merge(FP, {name: 1.0}, 0.0, 0.0, None)
    predictor = _still_works(store)
    assert predictor.predict_now(_context("m"))[0].call == ToolCall("search", {"q": "cats"})


PARTS = st.one_of(
    st.text(alphabet=st.sampled_from('ab[]{}"\\,:0123456789.-e \x1f\x1e'), max_size=12),
    st.builds(lambda *rule: json.dumps(list(rule), separators=(",", ":")),  # shaped as a rule's key
              st.sampled_from(["user", "prev", "sys", "all", "arg", "out", "tok", "ord", "walk", "zz"]),
              st.lists(st.sampled_from(["tool", "back", "name", "key", "run", "i", "r", "u", "b", "0", "-1", "x",
                                        "search", "q", "a[#]"]), max_size=6),
              st.sampled_from(["", "id", "lower", "x"]), st.booleans()))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["c", "k", "r", "n", "w", "~M", "h", "t"]), st.sampled_from(["search", "*"]),
                          st.sampled_from(["q", "*"]), PARTS, st.sampled_from(["s", "n", "", '"cats"'])),
                max_size=8))
def test_no_counter_name_makes_loading_predicting_or_saving_raise(
        names: list[tuple[str, str, str, str, str]]) -> None:
    store = MemoryPatternStore()
    _learnt(store)
    store.merge(FP, {S.join(parts): 1.0 for parts in names}, 0.0, 0.0, None)
    _still_works(store)


@pytest.mark.parametrize(("sql", "args"), [
    ("UPDATE pattern_counts SET value = 'abc' WHERE key = ?", (VALUE,)),
    ("UPDATE pattern_counts SET value = x'00ff' WHERE key = ?", (VALUE,)),
    ("UPDATE pattern_counts SET value = 9e999 WHERE key = ?", (VALUE,)),
    ("UPDATE pattern_meta SET clock = 'x'", ()),
    ("UPDATE pattern_meta SET epoch = x'00'", ()),
    ("UPDATE pattern_meta SET clock = 9e999", ()),
    ("INSERT INTO pattern_counts VALUES (?, x'ff00', 1.0)", (FP,)),  # a name that is not text
], ids=["text value", "blob value", "inf value", "text clock", "blob epoch", "inf clock", "blob name"])
def test_a_sqlite_row_that_is_not_a_number_is_skipped_and_saving_goes_on(sql: str, args: tuple[str, ...],
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _learnt(SqlitePatternStore(path))
    conn = sqlite3.connect(path)
    conn.execute(sql, args)
    conn.commit()
    conn.close()
    store = SqlitePatternStore(path)
    loaded = store.load(FP)
    assert all(isinstance(v, float) and abs(v) < float("inf") for v in loaded.values.values())
    assert abs(loaded.clock) < float("inf") and abs(loaded.epoch) < float("inf")
    predictor = _still_works(store)
    predictor.close()
    again = SqlitePatternStore(path).load(FP)
    assert again.clock >= 1 and VALUE in again.values  # saved, the bad value repaired by the merge
