"""The shortcuts that keep learning (``observe``) cheap compute what the plain definitions do.

Output atoms are built only where a rule can name them, long text leaves are filed as copies, counters
are added in batches, and learning the call that follows a prediction reuses the prediction's feature
rows. Each is checked here against the plain computation it replaces.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_index import MAX_FROM_END, MAX_ORDINAL
from forethought.predictors.patterns.derive_lookup import MAX_KEYED_BYTES, target_keys
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.text import output_atoms, text_atoms

_PIECES = ["a", "b ", " ", "Z9", "_", "-", "'", '"', "‘", "’", ".", ",", "/", "#", "@", "$", "%", "\n", "word ",
           "file.txt ", "v2 ", "12 ", "3.5 ", "-7 ", "twelve ", "2026-03-04 ", "March 5th, 2026 ", "http://x.y/z ",
           "ID-42 ", "I ", "Could "]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


def _fields(atom: object) -> tuple[object, ...]:
    return tuple(getattr(atom, f) for f in ("text", "kind", "start", "number", "date"))


@settings(max_examples=300, deadline=None)
@given(_TEXT, st.integers(0, 5), st.integers(0, 3))
def test_output_atoms_are_the_first_and_last_of_each_kind_of_text_atoms(text: str, first: int, last: int) -> None:
    exclude = text.strip()
    grouped: dict[str, list[object]] = {}
    for atom in text_atoms(text, words_too=False):
        if atom.text != exclude:
            grouped.setdefault(atom.kind, []).append(atom)
    found = output_atoms(text, exclude, first, last)
    assert set(found) == set(grouped)
    for kind, atoms in grouped.items():
        count, kept = found[kind]
        assert count == len(atoms)
        places = [i for i, _ in kept]
        expected = list(range(count)) if count <= first + last else [*range(first), *range(count - last, count)]
        assert places == expected
        assert [_fields(a) for _, a in kept] == [_fields(atoms[i]) for i in places]
        assert all(a.before == a.after == "" for _, a in kept)


def test_atoms_of_a_dense_text_field_no_rule_can_name_are_not_kept() -> None:
    text = " ".join(f"tag-{n}" for n in range(300))
    index = output_index(json.dumps({"log": text}))
    numbers = index.tokens["log"]["number"]
    assert len(numbers) == MAX_ORDINAL + MAX_FROM_END
    assert [a.text for a in numbers] == [*(str(n) for n in range(MAX_ORDINAL)),
                                         *(str(n) for n in range(300 - MAX_FROM_END, 300))]
    # The last ones are still found (from the end; a number is looked up with its neighbouring integers),
    # the middle ones are not filed at all.
    assert sorted(t.from_end for t in index.token_candidates(target_keys("299")) if t.kind == "number") == [0, 1]
    assert not [t for t in index.token_candidates(target_keys("150")) if t.kind == "number"]


def test_a_long_text_leaf_is_found_as_a_copy_and_by_its_first_and_last_words() -> None:
    long_text = "Opening " + "filler words here " * (MAX_KEYED_BYTES // 10) + "Closing"
    assert len(long_text) > MAX_KEYED_BYTES
    output = json.dumps({"body": long_text, "id": "x1"})
    index = output_index(output)
    body = next(i for i, (path, _) in enumerate(index.leaves) if path == "body")
    assert body in index.candidates(target_keys(long_text))
    assert body in index.candidates(target_keys("opening"))
    assert body in index.candidates(target_keys("CLOSING"))
    assert body not in index.candidates(target_keys(long_text.upper()))  # a long value is a copy
    history = (ObservedCall(ToolCall("fetch", {"id": "x1"}), output),)
    sources = Sources("Save it.", history, 0)
    rules = sources.explain(long_text, "content")
    assert any(rule.source == "out" and rule.locator[-1] == "body" for rule in rules)
    assert all(sources.apply(rule) == long_text for rule in rules)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "~w", "c\x1fd"]), max_size=6), max_size=10),
       st.sampled_from([None, 3.0, 50.0]))
def test_adding_ones_in_a_batch_is_adding_them_one_by_one(batches: list[list[str]], half_life: float | None) -> None:
    one_by_one, batched = Counts(half_life), Counts(half_life)
    for step, keys in enumerate(batches):
        for key in keys:
            one_by_one.add(key)
        batched.add_ones(keys)
        one_by_one.tick(step % 3)
        batched.tick(step % 3)
    assert one_by_one.state() == batched.state()
    assert one_by_one.take_pending() == batched.take_pending()


def test_plain_additions_take_only_keys_that_never_decay_and_every_change_moves_the_version() -> None:
    counts = Counts(10.0)
    versions = [counts.version]
    counts.add_plain([("~a", 0.5), ("~a", 0.25)])
    versions.append(counts.version)
    assert counts.get("~a") == 0.75
    with pytest.raises(ValueError):
        counts.add_plain([("decays", 1.0)])
    counts.add("b")
    versions.append(counts.version)
    counts.add_ones(["b"])
    versions.append(counts.version)
    counts.tick()
    versions.append(counts.version)
    counts.load(counts.state())
    versions.append(counts.version)
    assert len(set(versions)) == len(versions)


TOOLS = {"find": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
         "open": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
         "close": {"type": "object", "properties": {}}}


def _steps(n: int) -> list[tuple[PredictionContext, ObservedCall]]:
    calls = [ObservedCall(ToolCall("find", {"q": f"topic{n}"}), json.dumps({"ids": [f"d{n}", f"e{n}"]})),
             ObservedCall(ToolCall("open", {"id": f"d{n}"}), "text"),
             ObservedCall(ToolCall("close"), "ok")]
    message = f"Find 'topic{n}' and open the first one."
    out, history = [], []
    for observed in calls:
        out.append((PredictionContext(f"s{n}", [{"role": "user", "content": message}], message, tuple(history),
                                      TOOLS), observed))
        history.append(observed)
    return out


def test_learning_right_after_a_prediction_learns_what_learning_alone_does() -> None:
    """observe reuses the rows predict ranked (while no counter changed): the same counters result."""
    predicting, learning = PatternPredictor(), PatternPredictor()
    for n in range(6):
        for context, observed in _steps(n):
            predicting.predict_now(context)
            predicting.observe(context, observed)
            learning.observe(context, observed)
    assert predicting.counts.state() == learning.counts.state()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["id", "name", "n", "tags"]),
                    st.one_of(st.text(max_size=6), st.integers(-3, 3), st.floats(allow_nan=False), st.booleans(),
                              st.none(), st.lists(st.integers(0, 2), max_size=2)), max_size=4),
    st.text(max_size=6), st.integers(-3, 3), st.booleans()), max_size=12))
def test_list_items_are_filed_under_their_walk_keys(items: list[object]) -> None:
    from forethought.predictors.patterns.derive_lists import walk_key

    index = output_index(json.dumps({"items": items}))
    expected: dict[str, tuple[str, int, str | None]] = {}
    for i, item in enumerate(items):
        for name, value in (item.items() if isinstance(item, dict) else ((None, item),)):
            key = walk_key(value)
            if key is not None:
                expected.setdefault(key, ("items", i, name))
    assert {k: v for k, v in index.in_lists.items() if v[0] == "items"} == expected


def _codes_by_definition(output: str) -> tuple[str, ...]:
    """The codes among the scalar items of every list walked, shallow lists first, 256 items in all."""
    from forethought.predictors.patterns.mentions import is_code

    index = output_index(output)
    lists = index.lists_at(index.lists.list_paths)
    codes: dict[str, None] = {}
    budget = 256
    for path in sorted(dict.fromkeys(index.lists.list_paths), key=lambda p: p.count("[") + p.count(".")):
        items = lists.get(path, [])
        if not items or isinstance(items[0], list | dict):
            continue
        for item in items[:budget]:
            if is_code(item):
                codes.setdefault(item)
        budget -= min(budget, len(items))
        if budget <= 0:
            break
    return tuple(codes)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.sampled_from(["SFO", "LAX", "ab", "X1", "NYC", 3, None]),
                    lambda inner: st.lists(inner, max_size=300) | st.dictionaries(st.sampled_from(["a", "b"]), inner,
                                                                                  max_size=2), max_leaves=400))
def test_codes_of_an_output_are_read_while_indexing_as_by_their_definition(value: object) -> None:
    from forethought.predictors.patterns.derive_calls import output_codes

    output = json.dumps({"v": value})
    assert output_codes(ObservedCall(ToolCall("t", {}), output)) == _codes_by_definition(output)
