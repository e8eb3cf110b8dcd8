"""The closing scanner reports an arguments object closed exactly at the fragment holding its final brace."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.errors import MalformedArgumentsJSONError
from forethought.llm.closing import ArgumentStream, ObjectCloseScanner

TRICKY = st.sampled_from([*'{}[]"\\:,', "\\u0041", "é", "\n", " ", "a", "😀"])
strings = st.lists(TRICKY | st.characters(), max_size=12).map("".join)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | strings
values = st.recursive(scalars, lambda children: st.lists(children, max_size=4)
                      | st.dictionaries(strings, children, max_size=4), max_leaves=16)
objects = st.dictionaries(strings, values, max_size=6)


@st.composite
def serialized(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """An object, its JSON text (random layout), and whitespace that follows it."""
    obj = draw(objects)
    indent = draw(st.sampled_from([None, 0, 2]))
    text = json.dumps(obj, indent=indent, ensure_ascii=draw(st.booleans()))
    lead = draw(st.sampled_from(["", " ", "\n  "]))
    tail = draw(st.sampled_from(["", " ", "\n"]))
    return obj, lead + text, tail


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    edges = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=200, deadline=None)
@given(serialized(), st.lists(st.integers(min_value=0, max_value=400), max_size=25))
def test_closure_is_reported_at_the_fragment_with_the_final_brace(case: tuple[dict[str, Any], str, str],
                                                                   cuts: list[int]) -> None:
    obj, text, tail = case
    fragments = split(text + tail, cuts)
    stream = ArgumentStream("tool")
    closed_at: list[int] = []
    consumed = 0
    expected_fragment = None
    for i, fragment in enumerate(fragments):
        if expected_fragment is None and consumed + len(fragment) >= len(text):
            expected_fragment = i
        consumed += len(fragment)
        if stream.feed(fragment):
            closed_at.append(i)
    assert closed_at == [expected_fragment]
    assert stream.raw == text
    assert stream.trailing == tail
    assert stream.parse() == json.loads(text) == obj


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list('{}[]"\\ a1,:')), max_size=40).map("".join),
       st.lists(st.integers(min_value=0, max_value=40), max_size=10))
def test_where_it_closes_does_not_depend_on_fragmentation(text: str, cuts: list[int]) -> None:
    whole = ObjectCloseScanner()
    end_whole = whole.feed(text)
    pieces = ObjectCloseScanner()
    position = 0
    end_pieces = None
    for fragment in split(text, cuts):
        end = pieces.feed(fragment)
        if end is not None:
            end_pieces = position + end
        position += len(fragment)
    assert end_whole == end_pieces
    assert (whole.closed, whole.invalid) == (pieces.closed, pieces.invalid)


@pytest.mark.parametrize(("fragments", "closing_fragment"), [
    (['{"a": "}', '"}'], 1),  # a brace inside a string does not close
    (['{"a": "x\\', '"}', '"}'], 2),  # an escaped quote split across fragments
    (['{"a": "x\\\\', '"}'], 1),  # an escaped backslash, then the real closing quote
    (['{"a": [1, {"b": "]"}]', "}"], 1),
    (["  \n{", "}"], 1),
    (['{"a":1}'], 0),
])
def test_hand_picked_cases(fragments: list[str], closing_fragment: int) -> None:
    scanner = ObjectCloseScanner()
    results = [scanner.feed(f) for f in fragments]
    assert [i for i, r in enumerate(results) if r is not None] == [closing_fragment]
    assert results[closing_fragment] == len(fragments[closing_fragment])


def test_text_that_does_not_start_an_object_never_closes_and_is_an_error() -> None:
    stream = ArgumentStream("ls")
    assert not stream.feed('"{\\"a\\": 1}"')
    with pytest.raises(MalformedArgumentsJSONError, match="ls"):
        stream.finish("tool_calls")


def test_mismatched_brackets_are_an_error_at_finish() -> None:
    stream = ArgumentStream("ls")
    assert not stream.feed('{"a": [1}')
    assert stream.feed("]}") is False
    with pytest.raises(MalformedArgumentsJSONError):
        stream.finish("tool_calls")


def test_balanced_but_invalid_json_closes_and_fails_the_strict_parse() -> None:
    stream = ArgumentStream("cd")
    assert stream.feed('{"folder": "docs",}')
    with pytest.raises(MalformedArgumentsJSONError, match="cd: arguments are not valid JSON"):
        stream.parse()


def test_nan_is_rejected_by_the_strict_parse() -> None:
    stream = ArgumentStream("f")
    assert stream.feed('{"x": NaN}')
    with pytest.raises(MalformedArgumentsJSONError):
        stream.parse()


def test_cut_off_arguments_name_the_tool_and_the_finish_reason() -> None:
    stream = ArgumentStream("cat")
    stream.feed('{"file": "a.txt"')
    with pytest.raises(MalformedArgumentsJSONError, match=r"cat: arguments JSON was cut off.*'length'"):
        stream.finish("length")


@pytest.mark.parametrize("blank", ["", "  "])
def test_blank_arguments_mean_an_empty_object(blank: str) -> None:
    stream = ArgumentStream("pwd")
    stream.feed(blank)
    assert stream.finish("tool_calls") == {}


def test_text_after_the_closing_brace_is_kept_apart() -> None:
    stream = ArgumentStream("f")
    assert stream.feed('{"a": 1} ')
    assert not stream.feed("extra")
    assert stream.raw == '{"a": 1}'
    assert stream.trailing == " extra"
    assert stream.finish("stop") == {"a": 1}
