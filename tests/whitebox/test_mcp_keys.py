"""A guess serves a call only if the upstream could not tell them apart: the core's one key rule, through the
proxy (issue 28: a guessed ``x=3`` served a client's ``x=3.0``, which the server reads as a float).

The state server's ``typed(x)`` answers with what it received of ``x`` (its Python type and ``repr``), so a
served guess whose JSON differs from the client's shows at once. Each variant guesses one spelling, calls
another, and compares with a direct client; a hit happens exactly when the JSON is the same (key order
aside). A property test checks the proxy's tools key that way for any JSON arguments, and the re-spelling of
a prediction on the guessing side (an integral float where the schema says ``integer``) is checked apart.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import ToolCall
from forethought.mcp.effects import policy_from_data
from forethought.mcp.guessing import spelt_as_client
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import direct, proxied

STATE = Path(__file__).parent.with_name("mcp_servers") / "state_server.py"


class Guesses:
    """Guesses one call after every answer."""

    name = "script"

    def __init__(self, call: ToolCall) -> None:
        self.call = call

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(self.call, 0.9, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


VARIANTS: list[tuple[Any, Any]] = [
    (3, 3.0), (3.0, 3), (0.0, -0.0), (True, 1), (1, True), (False, 0), ("3", 3), (None, "null"),
    ([1, 2], [2, 1]), ([3], [3.0]), ({"a": 3}, {"a": 3.0}), ({"a": [True]}, {"a": [1]}),
    (1e16, 10_000_000_000_000_000), (2**53 + 1, float(2**53 + 1)), ("é", "e\u0301"), ("a ", "a"),
    # the same JSON: these must hit
    (3, 3), (3.5, 3.5), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([{"y": 1, "z": [0.5]}], [{"z": [0.5], "y": 1}]),
]


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize(("guessed", "called"), VARIANTS, ids=[f"{g!r}-vs-{c!r}" for g, c in VARIANTS])
async def test_a_guess_serves_only_a_call_the_server_cannot_tell_from_it(tmp_path: Path, guessed: Any,
                                                                        called: Any) -> None:
    command = [sys.executable, str(STATE), str(tmp_path / "log")]
    async with direct(command, "legacy") as session:
        expected = _text(await session.call_tool("typed", {"x": called}))

    def factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
        return Guesses(ToolCall("typed", {"x": guessed})), "script"

    policy = policy_from_data({"servers": {"state": {"trusted": True}}, "mcp": {"max_upstream_ratio": 4.0}})
    async with proxied(command, policy, "legacy", predictor_for=factory) as (session, handle):
        await session.list_tools()
        await session.call_tool("peek", {})  # its answer makes the proxy guess typed(guessed)
        await asyncio.sleep(0.2)  # the guess has its answer
        got = _text(await session.call_tool("typed", {"x": called}))
    assert got == expected, f"the guess of {guessed!r} was served to a call of {called!r}"
    assert "typed" in handle.speculated
    assert handle.stats.hits == int(_same_json(guessed, called))


# --- the proxy's tools key by the JSON the server parses, for any arguments --------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8)
arguments = st.dictionaries(st.sampled_from(["x", "y", "é"]), json_values, max_size=3)


def _session() -> Any:
    from forethought._core.runtime import Runtime
    from forethought._core.versions import StateVersion
    from forethought.mcp.tooling import build_tools, decide

    listing = {"t": {"name": "t", "inputSchema": {"type": "object", "properties": {
        "x": {"type": "integer", "default": 3}}}, "annotations": {"readOnlyHint": True}}}
    runtime = Runtime()
    decisions = decide(listing, runtime.policy, "s")

    async def fn(**_: Any) -> None:
        return None

    tools = build_tools(listing, decisions, 30.0, StateVersion(), lambda _: fn, lambda *_: fn)
    return runtime, runtime.session(tools=tools, server="s")


@settings(max_examples=300, deadline=None)
@given(arguments, arguments)
def test_two_calls_key_alike_exactly_when_their_json_is_the_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    runtime, session = _session()
    try:
        key_a, key_b = (session.resolve(ToolCall("t", args))[2] for args in (a, b))
        assert (key_a == key_b) == _same_json(a, b)
        assert key_a == session.resolve(ToolCall("t", dict(reversed(list(a.items())))))[2]  # key order aside
    finally:
        runtime.close()


def test_no_schema_default_is_filled_in() -> None:
    runtime, session = _session()
    try:  # the schema says x defaults to 3, but a server need not apply it: {} and {"x": 3} differ
        assert session.resolve(ToolCall("t", {}))[2] != session.resolve(ToolCall("t", {"x": 3}))[2]
    finally:
        runtime.close()


# --- a prediction re-spelt as the client spells (never a loose match) ------------------------------------

SCHEMA = {"type": "object", "properties": {
    "n": {"type": "integer"}, "f": {"type": "number"}, "either": {"type": ["integer", "null"]},
    "xs": {"type": "array", "items": {"type": "integer"}},
    "o": {"type": "object", "properties": {"k": {"type": "integer"}}}, "any": {}}}


def test_an_integral_float_where_the_schema_says_integer_is_spelt_as_an_integer() -> None:
    spelt = spelt_as_client({"n": 3.0, "f": 3.0, "either": 2.0, "xs": [1.0, 2.5], "o": {"k": 4.0}, "any": 5.0},
                            SCHEMA, frozenset())
    assert spelt == {"n": 3, "f": 3.0, "either": 2, "xs": [1, 2.5], "o": {"k": 4}, "any": 5.0}
    assert [type(spelt[k]) for k in ("n", "f", "either", "any")] == [int, float, int, float]
    assert type(spelt["xs"][0]) is int and type(spelt["o"]["k"]) is int


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.booleans() | st.text(max_size=2))
def test_only_integral_floats_change_and_only_to_the_same_number(value: Any) -> None:
    spelt = spelt_as_client({"n": value, "f": value}, SCHEMA, frozenset())
    assert spelt["f"] is value or spelt["f"] == value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        assert type(spelt["n"]) is int and spelt["n"] == value
    else:
        assert type(spelt["n"]) is type(value) and (spelt["n"] == value or value != value)
