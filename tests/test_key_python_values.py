"""The key rule (docs/design.md, "Which spellings match") for what a Python tool can tell apart that JSON
cannot: a parameter left out, whose function default is not what the schema's default says (a tuple, an
enum member, a ``str`` subclass, another value); a ``str`` subclass used as a dict key; and dict keys whose
text looks like the key's own notation for types. In every case two calls key alike only if the tool
receives indistinguishable values, and a served result equals what a plain call gives.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, Tool, ToolCall, tool
from forethought.errors import InvalidArgumentsError


class Color(enum.Enum):
    RED = "red"


class Mode(enum.StrEnum):
    FAST = "fast"


class Tag(str):
    """A ``str`` subclass: equal to its text, but a tool can tell it apart."""


def _seen(value: Any) -> str:
    """What a tool can tell of ``value``: its repr with every type named, dict keys included."""
    if isinstance(value, dict):
        items = ", ".join(f"{_seen(k)}: {_seen(v)}" for k, v in value.items())
        return f"{type(value).__name__}{{{items}}}"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[{', '.join(map(_seen, value))}]"
    return f"{type(value).__qualname__}({value!r})"


@tool(effect=Effect.READ_ONLY, threaded=False)
async def pair(x: tuple[int, int] = (1, 2)) -> str:
    return _seen(x)


@tool(effect=Effect.READ_ONLY, threaded=False)
async def show(c: Color = Color.RED) -> str:
    return _seen(c)


@tool(effect=Effect.READ_ONLY, threaded=False)
async def mode(m: str = Mode.FAST) -> str:
    return _seen(m)


@tool(effect=Effect.READ_ONLY, threaded=False)
async def label(t: str = Tag("a")) -> str:
    return _seen(t)


async def _other_default(n: int = 5) -> str:
    return _seen(n)


other_default = Tool("other_default", _other_default, effect=Effect.READ_ONLY,
                     parameters={"type": "object", "properties": {"n": {"type": "integer", "default": 10}}})


@tool(effect=Effect.READ_ONLY, threaded=False)
async def plain(a: str = "x", b: float = 1.5, c: int | None = None, d: list[int] = [1, 2]) -> str:  # noqa: B006
    return _seen((a, b, c, d))


@tool(effect=Effect.READ_ONLY, threaded=False)
async def nested(x: dict[str, Any]) -> str:
    return _seen(x)


async def _anything(**arguments: Any) -> str:
    return _seen(arguments)


anything = Tool("anything", _anything, effect=Effect.READ_ONLY, parameters={"type": "object"})

TOOLS = [pair, show, mode, label, other_default, plain, nested, anything]


async def _serve(guess: ToolCall, call: ToolCall) -> tuple[str, Any]:
    """Speculate ``guess``, let it finish, claim ``call``; the outcome's kind and value."""
    runtime = Runtime(TOOLS)
    session = runtime.session()
    assert session.speculate(guess, source="p", confidence=0.9).status == "launched"
    await session.wait_speculations(timeout=5)
    outcome = await session.execute_detailed(call)
    await session.close()
    runtime.close()
    return outcome.kind, outcome.value


async def _plain(call: ToolCall) -> Any:
    runtime = Runtime(TOOLS)
    session = runtime.session()
    value = await session.execute(call)
    await session.close()
    runtime.close()
    return value


LEFT_OUT = [
    ("pair", "x", [1, 2]),
    ("show", "c", "red"),
    ("mode", "m", "fast"),
    ("label", "t", "a"),
    ("other_default", "n", 10),
]


async def test_a_left_out_argument_whose_own_default_differs_never_serves_the_schema_default_given() -> None:
    for name, parameter, schema_default in LEFT_OUT:
        left_out, given_default = ToolCall(name, {}), ToolCall(name, {parameter: schema_default})
        for guess, call in ((left_out, given_default), (given_default, left_out)):
            kind, value = await _serve(guess, call)
            assert kind == "miss", (name, guess, call)
            assert value == await _plain(call)
        kind, value = await _serve(left_out, ToolCall(name, {}))  # the same call left out twice still hits
        assert (kind, value) == ("hit", await _plain(left_out))


def test_defaults_that_json_spells_exactly_key_as_given() -> None:
    assert plain.arguments.own_defaults == frozenset()
    assert plain.key(ToolCall("plain", {})) == plain.key(ToolCall("plain", {"a": "x", "b": 1.5, "c": None,
                                                                           "d": [1, 2]}))
    assert {name: t.arguments.own_defaults for name, t in
            (("pair", pair), ("show", show), ("mode", mode), ("label", label), ("other", other_default))} == {
        "pair": {"x"}, "show": {"c"}, "mode": {"m"}, "label": {"t"}, "other": {"n"}}


async def test_a_str_subclass_as_a_dict_key_keys_apart_from_a_str() -> None:
    for name, parameter in (("nested", "x"), ("anything", "x")):
        subclassed = ToolCall(name, {parameter: {"outer": {Tag("a"): 1}}})
        plain_keyed = ToolCall(name, {parameter: {"outer": {"a": 1}}})
        t = nested if name == "nested" else anything
        assert t.key(subclassed) != t.key(plain_keyed)
        for guess, call in ((subclassed, plain_keyed), (plain_keyed, subclassed)):
            kind, value = await _serve(guess, call)
            assert kind == "miss"
            assert value == await _plain(call)


_NOTATION = st.sampled_from(["a", "b", "d", ",", "/", "=", "a=builtins.tuple", "/d/b", "[", "]", '"', "0",
                             "key:", "builtins.list", "a,b"])
_KEYS = st.lists(_NOTATION, min_size=1, max_size=3).map("".join)
_LEAVES = st.one_of(st.integers(0, 2), st.just("s"))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(_KEYS, inner, max_size=3)), max_leaves=8)
_ARGUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=3)


@settings(max_examples=400, deadline=None)
@given(_ARGUMENTS, _ARGUMENTS)
def test_calls_key_alike_only_when_the_tool_sees_the_same_values(a: dict[str, Any], b: dict[str, Any]) -> None:
    same_key = anything.key(ToolCall("anything", {"x": a})) == anything.key(ToolCall("anything", {"x": b}))
    assert same_key == (_seen(a) == _seen(b)), (a, b)


def test_the_reported_collision_of_type_notation_keys_apart() -> None:
    one = {"d": {"a": (1,), "b": (2,), "a=builtins.tuple,/d/b": [3]}}
    two = {"d": {"a": [1], "b": [2], "a=builtins.tuple,/d/b": (3,)}}
    assert anything.key(ToolCall("anything", one)) != anything.key(ToolCall("anything", two))


# --- values a framework built from the model's JSON (enum members, pydantic models, dates, UUIDs) ----------


class Point:
    """A stand-in for a pydantic model (what the key looks for: ``model_dump(mode="json")``)."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def model_dump(self, mode: str = "python") -> dict[str, int]:
        return {"x": self.x, "y": self.y}

    def __repr__(self) -> str:
        return f"Point({self.x}, {self.y})"


def _framework_tool() -> Tool:
    async def paint(color: str, p: dict[str, int], when: str, ref: str) -> str:
        return _seen((color, p, when, ref))

    return Tool("paint", paint, effect=Effect.READ_ONLY, parameters={"type": "object", "properties": {
        "color": {"type": "string", "enum": ["red", "green"]},
        "p": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}},
        "when": {"type": "string"}, "ref": {"type": "string"}}, "required": ["color", "p", "when", "ref"]})


def _framework_values() -> dict[str, Any]:
    import datetime
    import uuid

    return {"color": Color.RED, "p": Point(1, 2), "when": datetime.date(2024, 1, 2),
            "ref": uuid.UUID("12345678-1234-5678-1234-567812345678")}


async def test_values_a_framework_built_are_keyed_by_their_json_and_their_type() -> None:
    t = _framework_tool()
    built = ToolCall("paint", _framework_values())
    same = ToolCall("paint", _framework_values())
    as_json = ToolCall("paint", {"color": "red", "p": {"x": 1, "y": 2}, "when": "2024-01-02",
                                 "ref": "12345678-1234-5678-1234-567812345678"})
    assert t.key(built) == t.key(same)  # accepted (the schema checks their JSON), and alike
    assert t.key(built) != t.key(as_json)  # the tool can tell an enum member from its value
    runtime = Runtime([t])
    session = runtime.session()
    assert session.speculate(built, source="p", confidence=0.9).status == "launched"
    await session.wait_speculations(timeout=5)
    outcome = await session.execute_detailed(same)
    assert outcome.kind == "hit" and "Color" in outcome.value and "Point" in outcome.value
    plain = await session.execute_detailed(as_json)
    assert plain.kind == "miss" and "Color" not in plain.value
    await session.close()
    runtime.close()


def test_what_no_framework_builds_is_still_not_json() -> None:
    t = _framework_tool()
    for bad in ({"x", "y"}, object(), Color):
        values = {**_framework_values(), "p": bad}
        with pytest.raises(InvalidArgumentsError):
            t.key(ToolCall("paint", values))
    with pytest.raises(InvalidArgumentsError, match="not one of the allowed values"):
        t.key(ToolCall("paint", {**_framework_values(), "color": "blue"}))
