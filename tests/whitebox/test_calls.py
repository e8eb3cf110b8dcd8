"""Canonical keys: equal exactly when a tool cannot tell two calls apart, and typed errors for bad input."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, tool
from forethought._core.calls import (
    ArgumentSpec,
    ToolCall,
    compile_arguments,
    dumps_canonical,
    parse_arguments_json,
)
from forethought.errors import CallError, InvalidArgumentsError, MalformedArgumentsJSONError, UnknownToolError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "default": 3},
        "budget": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "weights": {"type": "array", "items": {"type": "number"}},
        "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "filters": {"type": "object", "properties": {"min": {"type": "number"}, "max": {"type": "number"}}},
        "flag": {"type": "boolean"},
    },
    "required": ["city"],
    "additionalProperties": False,
}
SPEC = compile_arguments("trip", SCHEMA)
OPEN = compile_arguments("open", {"type": "object"})

json_scalars = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False,
                                                                                    allow_infinity=False) | st.text()
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)
numbers = st.integers(-10**18, 10**18) | st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def trip_arguments(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"city": draw(st.text())}
    if draw(st.booleans()):
        out["days"] = draw(st.integers(0, 30))
    if draw(st.booleans()):
        out["budget"] = draw(numbers)
    if draw(st.booleans()):
        out["tags"] = draw(st.lists(st.text(), max_size=4))
    if draw(st.booleans()):
        out["weights"] = draw(st.lists(numbers, max_size=4))
    if draw(st.booleans()):
        out["units"] = draw(st.sampled_from(["metric", "imperial"]))
    if draw(st.booleans()):
        out["limit"] = draw(st.none() | st.integers(0, 100))
    if draw(st.booleans()):
        out["filters"] = draw(st.fixed_dictionaries({}, optional={"min": numbers, "max": numbers}))
    if draw(st.booleans()):
        out["flag"] = draw(st.booleans())
    return out


def key(arguments: Any, spec: ArgumentSpec = SPEC, positional: tuple[Any, ...] = ()) -> str:
    return spec.key(ToolCall(spec.tool, arguments, positional))


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's key order shuffled (recursively)."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def as_floats(value: Any) -> Any:
    """Every integer in ``value`` written as a float (only where it is exactly representable)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return float(value) if float(value) == value else value
    if isinstance(value, list):
        return [as_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: as_floats(v) for k, v in value.items()}
    return value


# --- equal keys ------------------------------------------------------------------------------------


@given(trip_arguments(), st.randoms(use_true_random=False))
def test_key_ignores_argument_order(arguments: dict[str, Any], rng: random.Random) -> None:
    assert key(arguments) == key(shuffled(arguments, rng))


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.randoms(use_true_random=False))
def test_key_ignores_order_without_a_schema(arguments: dict[str, Any], rng: random.Random) -> None:
    assert key(arguments, OPEN) == key(shuffled(arguments, rng), OPEN)


@given(trip_arguments())
def test_an_integer_respelled_as_a_float_is_another_key(arguments: dict[str, Any]) -> None:
    """A tool can tell 3 from 3.0 (it receives the caller's own value), so they never share a result."""
    typed = {k: (as_floats(v) if k in ("days", "budget", "weights", "limit", "filters") else v)
             for k, v in arguments.items()}
    same_spelling = json.dumps(arguments, sort_keys=True) == json.dumps(typed, sort_keys=True)
    assert (key(arguments) == key(typed)) == same_spelling


@given(numbers, numbers)
def test_number_keys_are_equal_exactly_when_the_spellings_are(a: float, b: float) -> None:
    same = type(a) is type(b) and json.dumps(a) == json.dumps(b)  # 1 vs 1.0 and 0.0 vs -0.0 differ
    assert (key({"city": "x", "budget": a}) == key({"city": "x", "budget": b})) == same


def test_schema_equal_spellings_key_alike() -> None:
    base = key({"city": "Paris"})
    assert key({"city": "Paris", "days": 3}) == base  # default filled in
    assert key({"city": "Paris", "units": "metric"}) == base  # enum default
    assert key({"days": 3, "city": "Paris"}) == base  # order
    # Spellings a tool receives differently are different keys (issue 12.2):
    assert key({"city": "Paris", "days": 3.0}) != base  # integer written as a float
    assert key({"city": "Paris", "budget": 10}) != key({"city": "Paris", "budget": 10.0})
    assert key({"city": "Paris", "weights": [1, 2.5]}) != key({"city": "Paris", "weights": [1.0, 2.5]})
    assert key({"city": "Paris", "filters": {"min": 0.0}}) != key({"city": "Paris", "filters": {"min": -0.0}})
    assert key({"city": "Paris", "limit": 5.0}) != key({"city": "Paris", "limit": 5})


def test_positional_arguments_map_to_parameter_names() -> None:
    spec = compile_arguments("mv", {"type": "object", "properties": {"source": {"type": "string"},
                                                                     "destination": {"type": "string"}},
                                    "required": ["source", "destination"]})
    named = key({"source": "a.txt", "destination": "docs"}, spec)
    assert key({}, spec, ("a.txt", "docs")) == named
    assert key({"destination": "docs"}, spec, ("a.txt",)) == named
    assert key({}, spec, ("docs", "a.txt")) != named


def test_an_explicit_parameter_order_wins_over_the_schema_order() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}}
    spec = compile_arguments("f", schema, parameter_order=["a", "b"])
    assert spec.canonical_arguments(ToolCall("f", {}, ("1", "2"))) == {"a": "1", "b": "2"}


def test_defaults_are_normalised_like_explicit_values() -> None:
    @tool(effect=Effect.PURE)
    def scale(x: float = 1.0, factor: float = 2) -> float:
        return x * factor

    assert scale.key(ToolCall("scale", {})) == scale.key(ToolCall("scale", {"x": 1.0, "factor": 2}))
    assert scale.key(ToolCall("scale", {})) != scale.key(ToolCall("scale", {"x": 1, "factor": 2}))


def test_a_mutable_default_is_never_shared_between_calls() -> None:
    spec = compile_arguments("f", {"type": "object", "properties": {"xs": {"type": "array", "default": [1]}}})
    first = spec.canonical_arguments(ToolCall("f", {}))
    first["xs"].append(2)
    assert spec.canonical_arguments(ToolCall("f", {})) == {"xs": [1]}


def test_canonical_arguments_are_a_fresh_copy() -> None:
    arguments = {"city": "Paris", "tags": ["a"], "filters": {"min": 1}}
    out = SPEC.canonical_arguments(ToolCall("trip", arguments))
    out["tags"].append("b")
    out["filters"]["min"] = 7
    assert arguments == {"city": "Paris", "tags": ["a"], "filters": {"min": 1}}


# --- different keys --------------------------------------------------------------------------------


def leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in leaf_paths(v, (*prefix, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in leaf_paths(v, (*prefix, i))]
    return [prefix]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    out = list(value)
    out[head] = replaced(out[head], rest, new)
    return out


def get_at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@given(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=6), st.data())
def test_changing_any_leaf_changes_the_key(arguments: dict[str, Any], data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(leaf_paths(arguments)))
    old = get_at(arguments, path)
    new = data.draw(json_values)
    assume(dumps_canonical(new) != dumps_canonical(old))
    assert key(arguments, OPEN) != key(replaced(arguments, path, new), OPEN)


@given(trip_arguments(), st.data())
def test_changing_any_typed_leaf_to_a_different_valid_value_changes_the_key(
        arguments: dict[str, Any], data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(leaf_paths(arguments)))
    old = get_at(arguments, path)
    if isinstance(old, bool):
        new: Any = not old
    elif isinstance(old, str):
        new = old + data.draw(st.text(min_size=1, max_size=2))
    elif isinstance(old, int | float):
        new = data.draw(numbers.filter(lambda n: n != old))
        if path[0] in ("days", "limit"):
            new = int(new) if float(new).is_integer() and new != old else old + 1
    else:
        return  # an empty list or dict: nothing below it to change
    if path[0] == "units":
        new = "imperial" if old == "metric" else "metric"
    assert key(arguments) != key(replaced(arguments, path, new))


def test_unconstrained_numbers_keep_their_json_spelling() -> None:
    assert key({"x": 1}, OPEN) != key({"x": 1.0}, OPEN)
    assert key({"x": True}, OPEN) != key({"x": 1}, OPEN)


@pytest.mark.parametrize(("a", "b"), [
    ("\u00e9", "e\u0301"),  # NFC vs NFD: the same glyph, different strings
    ("a", "a "), (" a", "a"), ("a\tb", "a b"), ("line\n", "line\r\n"), ("\u2126", "\u03a9"), ("", " "),
    ("\ufb01", "fi"), ("\u200b", ""), ("\u00df", "ss"), ("\u0130", "i\u0307"), ("\ud800", "\ufffd"),
])
def test_strings_are_never_altered(a: str, b: str) -> None:
    assert a != b
    assert key({"city": a}) != key({"city": b})
    assert SPEC.canonical_arguments(ToolCall("trip", {"city": a}))["city"] == a


@given(st.text())
def test_any_string_survives_canonicalisation_unchanged(text: str) -> None:
    assert SPEC.canonical_arguments(ToolCall("trip", {"city": text}))["city"] == text
    assert key({"city": text}) == key({"city": text + ""})


def test_tool_names_separate_keys() -> None:
    a = compile_arguments("a", {"type": "object"})
    b = compile_arguments("b", {"type": "object"})
    assert a.key(ToolCall("a", {"x": 1})) != b.key(ToolCall("b", {"x": 1}))


# --- hashing ---------------------------------------------------------------------------------------


@given(st.dictionaries(st.text(max_size=4), json_scalars, max_size=4))
def test_equal_tool_calls_hash_alike(arguments: dict[str, Any]) -> None:
    twin = {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) and float(v) == v else v)
            for k, v in arguments.items()}
    a, b = ToolCall("f", arguments), ToolCall("f", twin)
    assert a == b
    assert hash(a) == hash(b)


def test_true_and_one_calls_are_equal_so_hash_alike() -> None:
    assert hash(ToolCall("f", {"x": True})) == hash(ToolCall("f", {"x": 1}))
    assert {ToolCall("f", {"x": [1]}), ToolCall("f", {"x": [1]})} == {ToolCall("f", {"x": [1]})}


# --- malformed input -------------------------------------------------------------------------------


class Weird:
    pass


@pytest.mark.parametrize(("arguments", "message"), [
    (["city", "Paris"], "must be a JSON object, got array"),
    ("city=Paris", "must be a JSON object, got string"),
    (None, "must be a JSON object, got null"),
    (42, "must be a JSON object, got number"),
    ({"city": "Paris", "budget": math.nan}, "argument budget: is not a finite JSON number"),
    ({"city": "Paris", "budget": math.inf}, "argument budget: is not a finite JSON number"),
    ({"city": "Paris", "weights": [1, -math.inf]}, "argument weights[1]: is not a finite JSON number"),
    ({"city": "Paris", "filters": {"min": math.nan}}, "argument filters.min: is not a finite JSON number"),
    ({"city": 5}, "argument city: expected string, got number"),
    ({}, "missing required city"),
    ({"city": "Paris", "days": 1.5}, "argument days: expected integer, got a number with a fractional part"),
    ({"city": "Paris", "days": True}, "argument days: expected integer, got boolean"),
    ({"city": "Paris", "budget": "10"}, "argument budget: expected number, got string"),
    ({"city": "Paris", "units": "kelvin"}, "argument units: is not one of the allowed values ['metric', 'imperial']"),
    ({"city": "Paris", "limit": "5"}, "argument limit: matches none of the allowed forms"),
    ({"city": "Paris", "tags": ["a", 1]}, "argument tags[1]: expected string, got number"),
    ({"city": "Paris", "tags": "a"}, "argument tags: expected array, got string"),
    ({"city": "Paris", "flag": 1}, "argument flag: expected boolean, got number"),
    ({"city": "Paris", "colour": "red"}, "argument colour: is not a parameter of this tool"),
    ({"city": "Paris", 7: "x"}, "an object key is a number, not a string"),
    ({"city": "Paris", "filters": {1: 2}}, "argument filters: an object key is a number, not a string"),
    ({"city": "Paris", "tags": [Weird()]}, "argument tags[0]: expected string, got Weird"),
])
def test_malformed_arguments_raise_a_clear_typed_error(arguments: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentsError) as info:
        key(arguments)
    assert str(info.value).startswith("trip: ")
    assert message in str(info.value)


@pytest.mark.parametrize(("value", "message"), [
    (math.nan, "is not a finite JSON number"),
    ({"a": [1, {"b": math.inf}]}, "argument x.a[1].b: is not a finite JSON number"),
    ({3: 1}, "argument x: an object key is a number, not a string"),
    (Weird(), "argument x: Weird is not a JSON value"),
    ({1.5}, "set is not a JSON value"),
])
def test_values_without_a_schema_must_still_be_plain_json(value: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentsError, match="open: ") as info:
        key({"x": value}, OPEN)
    assert message in str(info.value)


def test_circular_or_absurdly_deep_arguments_raise_the_typed_error() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(InvalidArgumentsError, match="nested too deeply"):
        key({"x": loop}, OPEN)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidArgumentsError, match="nested too deeply"):
        key({"x": deep}, OPEN)


def test_positional_misuse_raises_the_typed_error() -> None:
    spec = compile_arguments("cd", {"type": "object", "properties": {"folder": {"type": "string"}}})
    with pytest.raises(InvalidArgumentsError, match="2 positional arguments given, the tool takes at most 1"):
        key({}, spec, ("a", "b"))
    with pytest.raises(InvalidArgumentsError, match="'folder' given both by position and by name"):
        key({"folder": "a"}, spec, ("b",))
    with pytest.raises(InvalidArgumentsError, match="positional arguments must be a sequence"):
        spec.key(ToolCall("cd", {}, 5))  # type: ignore[arg-type]


async def test_unknown_tools_raise_the_typed_error() -> None:
    session = Runtime([]).session()
    with pytest.raises(UnknownToolError, match="unknown tool 'nope'"):
        session.resolve(ToolCall("nope", {}))
    with pytest.raises(UnknownToolError):
        session.resolve(ToolCall(["not", "hashable"], {}))  # type: ignore[arg-type]
    with pytest.raises(CallError, match="expected a ToolCall, got dict"):
        session.resolve({"name": "nope"})  # type: ignore[arg-type]


# --- argument JSON text ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ['{"a": 1,}', '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}',
                                  '{"a": 1e400}', '[1, 2]', '"text"', '{"a": 1', "null", "{'a': 1}",
                                  "[" * 100_000 + "]" * 100_000])
def test_malformed_argument_json_raises_the_typed_error(text: str) -> None:
    with pytest.raises(MalformedArgumentsJSONError):
        parse_arguments_json(text, "tool")


def test_argument_json_errors_name_the_tool_and_where_never_the_text() -> None:
    with pytest.raises(MalformedArgumentsJSONError, match=r"search: arguments are not valid JSON \(.* 6 char") as info:
        parse_arguments_json('{"q": ', "search")
    assert '"q"' not in str(info.value)
    with pytest.raises(MalformedArgumentsJSONError, match="must be a JSON object, got array"):
        parse_arguments_json("[]")


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=5))
def test_argument_json_round_trips(arguments: dict[str, Any]) -> None:
    assert parse_arguments_json(json.dumps(arguments)) == arguments


def test_empty_argument_text_means_no_arguments() -> None:
    assert parse_arguments_json("") == {}


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(trip_arguments())
def test_parsed_text_and_python_arguments_key_alike(arguments: dict[str, Any]) -> None:
    assert key(parse_arguments_json(json.dumps(arguments))) == key(arguments)
