"""The tool decorator and registry: schemas from signatures, effects, sync and async functions."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Literal, Optional

import pytest

from conftest import FakeState, settle
from forethought import Runtime, ToolCall
from forethought._core.tools import Effect, Tool, ToolRegistry, schema_from_signature, tool
from forethought.errors import InvalidArgumentsError, ToolDefinitionError, UnknownToolError


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def props(t: Tool) -> dict[str, Any]:
    return dict(t.parameters["properties"])


def test_schema_from_plain_type_hints_and_defaults() -> None:
    @tool
    def search(query: str, limit: int = 10, ratio: float = 0.5, exact: bool = False) -> list[str]:
        """Search the index.

        Longer description that is not the summary.
        """
        return []

    assert search.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10},
                       "ratio": {"type": "number", "default": 0.5},
                       "exact": {"type": "boolean", "default": False}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert search.description == "Search the index."
    assert search.name == "search"


def test_schema_from_optional_literal_container_and_enum_hints() -> None:
    @tool
    def f(a: Optional[int], b: int | None, c: Literal["x", "y"], d: list[int], e: Sequence[str],  # noqa: UP045
          g: dict[str, float], h: tuple[int, str], i: tuple[float, ...], j: Colour, k: Level, m: Any,
          n: Colour = Colour.GREEN, o: str = None, p: set[int] | None = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
        """F."""

    p_ = props(f)
    assert p_["a"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert p_["b"] == p_["a"]
    assert p_["c"] == {"type": "string", "enum": ["x", "y"]}
    assert p_["d"] == {"type": "array", "items": {"type": "integer"}}
    assert p_["e"] == {"type": "array", "items": {"type": "string"}}
    assert p_["g"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert p_["h"] == {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                       "minItems": 2, "maxItems": 2}
    assert p_["i"] == {"type": "array", "items": {"type": "number"}}
    assert p_["j"] == {"type": "string", "enum": ["red", "green"]}
    assert p_["k"] == {"type": "integer", "enum": [1, 2]}
    assert p_["m"] == {}
    assert p_["n"] == {"type": "string", "enum": ["red", "green"], "default": "green"}
    assert p_["o"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert p_["p"]["default"] is None
    assert f.parameters["required"] == ["a", "b", "c", "d", "e", "g", "h", "i", "j", "k", "m"]


def test_derived_schemas_validate_and_key_calls() -> None:
    @tool(effect=Effect.PURE)
    def f(pair: tuple[int, str], colour: Colour = Colour.RED, note: str = None) -> str:  # type: ignore[assignment]  # noqa: RUF013
        return ""

    # Left out, colour is the function's own default, Colour.RED, which the tool can tell from the "red" a caller
    # gives: the two key apart (ArgumentSpec.own_defaults); a default JSON spells exactly (note=None) does not.
    assert f.key(ToolCall("f", {"pair": [1, "a"]})) != f.key(ToolCall("f", {"pair": [1, "a"], "colour": "red"}))
    assert f.arguments.own_defaults == {"colour"}
    # 1.0 is a valid integer but a different spelling: the tool would receive a float (issue 12.2).
    assert f.key(ToolCall("f", {"pair": [1, "a"]})) != f.key(ToolCall("f", {"pair": [1.0, "a"]}))
    assert f.key(ToolCall("f", {"pair": [1, "a"], "note": None})) == f.key(ToolCall("f", {"pair": [1, "a"]}))
    with pytest.raises(InvalidArgumentsError, match=r"argument pair\[1\]: expected string"):
        f.key(ToolCall("f", {"pair": [1, 2]}))
    with pytest.raises(InvalidArgumentsError, match="expected at most 2 items"):
        f.key(ToolCall("f", {"pair": [1, "a", 3]}))
    with pytest.raises(InvalidArgumentsError, match="colour: is not one of the allowed values"):
        f.key(ToolCall("f", {"pair": [1, "a"], "colour": "blue"}))
    with pytest.raises(InvalidArgumentsError, match="is not a parameter of this tool"):
        f.key(ToolCall("f", {"pair": [1, "a"], "extra": 1}))


def test_unsupported_signatures_are_definition_errors() -> None:
    def star(*args: int) -> None:
        """Star."""

    def kw(**kwargs: int) -> None:
        """Kw."""

    def positional_only(a: int, /) -> None:
        """Positional only."""

    def bad_default(a: object = object()) -> None:
        """Bad default."""

    def nan_default(a: float = float("nan")) -> None:
        """NaN default."""

    for fn in (star, kw, positional_only, bad_default, nan_default):
        with pytest.raises(ToolDefinitionError):
            tool(fn)


def test_bad_tool_definitions_are_definition_errors() -> None:
    def f() -> None:
        """F."""

    with pytest.raises(ToolDefinitionError, match="effect must be an Effect"):
        Tool("f", f, effect="pure")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="unusable parameters schema"):
        Tool("f", f, parameters={"type": "object", "properties": {"x": {"type": "date"}}})
    with pytest.raises(ToolDefinitionError, match="cost_units"):
        Tool("f", f, cost_units=-1)
    with pytest.raises(ToolDefinitionError, match="ttl_s"):
        Tool("f", f, ttl_s=0)
    with pytest.raises(ToolDefinitionError, match="non-empty string name"):
        Tool("", f)
    with pytest.raises(ToolDefinitionError, match="not callable"):
        Tool("f", 3)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="first parameter for the state"):
        tool(f, effect=Effect.ISOLATED_WRITE, state=FakeState({}))


def test_an_undeclared_effect_is_destructive_and_never_speculable() -> None:
    @tool
    def rm(path: str) -> None:
        """Remove."""

    assert rm.effect is Effect.DESTRUCTIVE
    assert not rm.speculable
    assert not Tool("x", lambda: None).speculable


@pytest.mark.parametrize(("effect", "with_state", "speculable"), [
    (Effect.PURE, False, True), (Effect.READ_ONLY, False, True), (Effect.ISOLATED_WRITE, False, False),
    (Effect.ISOLATED_WRITE, True, True), (Effect.DESTRUCTIVE, False, False), (Effect.DESTRUCTIVE, True, False),
])
def test_speculable_follows_the_effect(effect: Effect, with_state: bool, speculable: bool) -> None:
    state = FakeState({}) if with_state else None

    def fn(*args: Any) -> None:
        """Fn."""

    assert Tool("t", fn, effect=effect, state=state).speculable is speculable


def test_a_stateful_tool_schema_skips_the_state_parameter() -> None:
    @tool(effect=Effect.ISOLATED_WRITE, state=FakeState({}))
    def put(store: dict[str, Any], key: str, value: int) -> None:
        store[key] = value

    assert list(props(put)) == ["key", "value"]


def test_sync_functions_run_threaded_and_async_ones_on_the_loop() -> None:
    @tool
    def sync_fn(x: int) -> int:
        return x

    @tool
    async def async_fn(x: int) -> int:
        return x

    @tool(threaded=False)
    def inline(x: int) -> int:
        return x

    assert sync_fn.threaded and not async_fn.threaded and not inline.threaded


async def test_sync_and_async_tools_both_execute_and_speculate() -> None:
    @tool(effect=Effect.PURE)
    def double(x: int) -> int:
        return 2 * x

    @tool(effect=Effect.PURE)
    async def triple(x: int) -> int:
        return 3 * x

    runtime = Runtime([double, triple])
    session = runtime.session()
    try:
        assert await session.execute(ToolCall("double", {"x": 2})) == 4
        assert await session.execute(ToolCall("triple", {"x": 2})) == 6
        assert session.speculate(ToolCall("double", {"x": 5})).launched
        assert session.speculate(ToolCall("triple", {"x": 5})).launched
        await settle(session)
        assert (await session.execute_detailed(ToolCall("double", {"x": 5}))).kind == "hit"
        assert (await session.execute_detailed(ToolCall("triple", {"x": 5.0}))).value == 15
    finally:
        await session.close()
        runtime.close()


def test_decorator_options_and_openai_schema() -> None:
    @tool(name="lookup", effect=Effect.READ_ONLY, description="Look up.", cost_units=2.5, ttl_s=5)
    def f(q: str) -> str:
        return q

    assert (f.name, f.effect, f.cost_units, f.ttl_s) == ("lookup", Effect.READ_ONLY, 2.5, 5)
    assert f.openai_schema() == {"type": "function", "function": {
        "name": "lookup", "description": "Look up.", "parameters": dict(f.parameters)}}


def test_registry_lookup_and_errors() -> None:
    a = Tool("a", lambda: 1)
    registry = ToolRegistry([a])
    assert registry.get_tool("a") is a and registry["a"] is a and len(registry) == 1 and list(registry) == ["a"]
    assert registry.table().get("a") is a
    with pytest.raises(UnknownToolError, match="unknown tool 'b'"):
        registry.get_tool("b")
    with pytest.raises(UnknownToolError):
        registry.get_tool(["unhashable"])  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match=r"wrap functions with forethought\.tool"):
        registry.add(lambda: 1)  # type: ignore[arg-type]
    b = Tool("a", lambda: 2)
    merged = registry.merged([b])
    assert merged.get_tool("a") is b and registry.get_tool("a") is a


def test_schema_from_signature_rejects_unreadable_hints() -> None:
    def f(x: NotDefined) -> None:  # type: ignore[name-defined]  # noqa: F821
        """F."""

    with pytest.raises(ToolDefinitionError, match="cannot read the signature"):
        schema_from_signature(f)


# --- wrapped functions and pydantic models (issues 11.5 and 15.6) -----------------------------------


def test_a_functools_wraps_forwarder_gets_the_wrapped_functions_schema() -> None:
    import functools

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def forward(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return forward

    @tool(effect=Effect.PURE)
    @logged
    def area(width: float, height: float = 1.0) -> float:
        """Area of a rectangle."""
        return width * height

    assert area.name == "area" and area.description == "Area of a rectangle."
    assert set(props(area)) == {"width", "height"} and area.parameters["required"] == ["width"]
    assert area.fn(width=2.0, height=3.0) == 6.0


async def test_star_args_with_an_explicit_schema_is_a_tool() -> None:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return sorted(kwargs.items())

    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    t = tool(forward, name="search", effect=Effect.PURE, parameters=schema)
    assert t.parameters == schema
    runtime = Runtime([t])
    session = runtime.session()
    assert await session.execute(ToolCall("search", {"q": "x"})) == [("q", "x")]
    await session.close()
    runtime.close()
    with pytest.raises(ToolDefinitionError, match="parameters="):
        tool(forward, name="search")


try:
    import pydantic

    class Address(pydantic.BaseModel):
        street: str
        number: int = 1
except ImportError:  # pragma: no cover - pydantic is a test dependency
    pydantic = None  # type: ignore[assignment]


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_pydantic_model_parameters_get_their_json_schema() -> None:
    @tool(effect=Effect.PURE)
    def ship(to: Address, express: bool = False) -> str:
        return f"{to.street} {to.number}"

    schema = props(ship)["to"]
    assert schema["type"] == "object" and set(schema["properties"]) == {"street", "number"}
    assert schema["required"] == ["street"]
    ship.arguments.keyed(ToolCall("ship", {"to": {"street": "Main"}}))
    with pytest.raises(InvalidArgumentsError):
        ship.arguments.keyed(ToolCall("ship", {"to": {"number": 3}}))
