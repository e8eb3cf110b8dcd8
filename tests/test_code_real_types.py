"""The real run equals plain exec in what a tool can tell apart: tuple vs list, int vs float, big integers,
arity errors; a speculation made with other Python types than the real call's is never served."""

from __future__ import annotations

from typing import Any

import pytest

from forethought import Effect, Tool, tool
from forethought.code.predictor import CodeMode
from test_code_support import run_plain, stream_and_run


def typed_tools() -> list[Tool]:
    def scale(x: float) -> float:
        return x * 2

    def kind(value: object) -> str:
        return f"{type(value).__name__}{value!r}"

    def ident(v: int) -> int:
        return v

    def pair(a: str, b: str) -> str:
        return a + b

    def keep(items: list) -> int:  # type: ignore[type-arg]
        items.append("touched")  # plain exec: the caller's own list changes
        return len(items)

    def need(key: str) -> int:
        if key.startswith("bad"):
            raise KeyError(key)
        return len(key)

    return [tool(scale, effect=Effect.PURE), tool(kind, effect=Effect.PURE), tool(ident, effect=Effect.PURE),
            tool(pair, effect=Effect.PURE), tool(keep, effect=Effect.DESTRUCTIVE), tool(need, effect=Effect.PURE)]


PROGRAMS = {
    "int_for_a_float_parameter": "print(scale(3))",
    "big_int": "print(ident(2 ** 53 + 1))",
    "tuple_argument": "print(kind((1, 2)))",
    "tuple_then_list": "a = kind((1, 2))\nb = kind([1, 2])\nprint(a, b)",
    "list_then_tuple": "a = kind([1, 2])\nb = kind((1, 2))\nprint(a, b)",
    "eager_pair": "print(kind((1, 2)), kind([1, 2]))",
    "int_float_bool": "print(kind(3), kind(3.0), kind(True), kind(1))",
    "nested_tuple": "print(kind({'k': (1, [2, (3,)])}), kind({'k': [1, [2, [3]]]}))",
    "missing_argument": "print(pair('a'))",
    "extra_argument": "print(ident(1, 2))",
    "unknown_keyword": "print(ident(w=1))",
    "results_are_plain_values": "import json\na = kind([1])\nb = kind([1])\nprint(json.dumps([a, b]))",
}


async def test_a_tool_receives_the_program_s_own_objects() -> None:
    code = "xs = ['a']\nn = keep(xs)\nprint(n, xs)"
    streamed = await stream_and_run(code, typed_tools(), mode=CodeMode.WHOLE)
    plain = await run_plain(code, typed_tools())
    assert streamed.results[0].stdout == plain.stdout == "2 ['a', 'touched']\n"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_the_real_run_equals_plain_exec_in_types(name: str) -> None:
    code = PROGRAMS[name]
    namespace: dict[str, Any] = {}
    streamed = await stream_and_run(code, typed_tools(), mode=CodeMode.WHOLE, namespace=namespace)
    plain_namespace: dict[str, Any] = {}
    plain = await run_plain(code, typed_tools(), plain_namespace)
    real = streamed.results[0]
    assert real.stdout == plain.stdout
    assert (type(real.error), str(real.error)) == (type(plain.error), str(plain.error))
    for key, value in plain_namespace.items():
        if not key.startswith("__") and not callable(value):
            assert type(namespace[key]) is type(value) and repr(namespace[key]) == repr(value), key


async def test_a_call_run_directly_for_its_types_raises_where_plain_raises_a_later_error() -> None:
    """A pending call claimed with a type mismatch runs directly; a later pending call that raises still
    rolls back to its own statement (the direct call's record belongs to its statement, not the claiming one)."""
    message = ("```python\nfirst = kind((1, 2))\nprint(first)\n```\n"
               "```python\na = need('a')\nb = kind([1, 2])\nc = need('bad1')\nprint(a, b, c)\n```\n")
    streamed = await stream_and_run(message, typed_tools())
    plain_tools = typed_tools()
    plain_namespace: dict[str, Any] = {}
    plain = [await run_plain(code, plain_tools, plain_namespace) for code in (
        "first = kind((1, 2))\nprint(first)", "a = need('a')\nb = kind([1, 2])\nc = need('bad1')\nprint(a, b, c)")]
    assert [r.stdout for r in streamed.results] == [r.stdout for r in plain]
    assert [r.error_text for r in streamed.results] == [r.error_text for r in plain] == ["", "KeyError: 'bad1'"]
