"""Peeking into unfinished code: what launches before a statement closes, and what must not."""

from __future__ import annotations

import ast
from typing import Any

from forethought.code.peek import Deduplicating, TailPeek, preplan, repair

TOOLS = frozenset({"fetch", "summarize"})


class Recorder:
    """A fake launch: records calls, returns a marker standing for the pending result."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls.append((tool, args, kwargs))
        return {"pending": tool, "args": list(args)}


def peek(tail: str, namespace: dict[str, Any] | None = None, functions: dict[str, ast.FunctionDef] | None = None
         ) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    recorder = Recorder()
    task = TailPeek(0, tail, TOOLS, Deduplicating(recorder), 64, functions)
    if task.reads() is not None:
        task.run(namespace or {})
    return recorder.calls


def test_loop_over_a_literal_fans_out_before_it_closes() -> None:
    calls = peek('for u in ["a", "b", "c"]:\n    r = fetch(u)')
    assert calls == [("fetch", ("a",), {}), ("fetch", ("b",), {}), ("fetch", ("c",), {})]


def test_loop_over_a_known_name_uses_the_namespace() -> None:
    calls = peek("for u in urls:\n    out.append(fetch(u, depth=2))", {"urls": ["x", "y"], "out": []})
    assert calls == [("fetch", ("x",), {"depth": 2}), ("fetch", ("y",), {"depth": 2})]


def test_a_call_whose_parenthesis_has_not_arrived_does_not_launch() -> None:
    assert peek('for u in ["a"]:\n    r = fetch(u + "/pa') == []
    assert peek('x = fetch("a")\ny = fetch("b"') == [("fetch", ("a",), {})]


def test_pending_results_feed_the_next_call_of_the_same_item() -> None:
    calls = peek('for u in ["a", "b"]:\n    doc = fetch(u)\n    s = summarize(doc)')
    assert [c[0] for c in calls] == ["fetch", "summarize", "fetch", "summarize"]
    assert calls[1][1] == ({"pending": "fetch", "args": ["a"]},)


def test_unknown_condition_launches_nothing_inside_the_branch() -> None:
    assert peek("for u in urls:\n    if flag(u):\n        fetch(u)", {"urls": ["a"]}) == []


def test_known_condition_takes_its_branch() -> None:
    calls = peek('for u in ["a", "bb"]:\n    if len(u) > 1:\n        fetch(u)\n    else:\n        summarize(u)')
    assert calls == [("summarize", ("a",), {}), ("fetch", ("bb",), {})]


def test_variables_carried_across_iterations_are_unknown() -> None:
    calls = peek("total = 0\nfor u in ['a', 'b']:\n    total = total + 1\n    fetch(str(total))", {"total": 0})
    assert calls == []


def test_while_loop_is_simulated() -> None:
    calls = peek("while page <= 3:\n    fetch(f'p{page}')\n    page += 1\nprint(page)", {"page": 1})
    assert [c[1] for c in calls] == [("p1",), ("p2",), ("p3",)]


def test_break_stops_the_unrolling() -> None:
    calls = peek('for u in ["a", "stop", "c"]:\n    if u == "stop":\n        break\n    fetch(u)')
    assert calls == [("fetch", ("a",), {})]


def test_calls_of_code_defined_functions_are_followed() -> None:
    source = "def brief(x, suffix='!'):\n    doc = fetch(x + suffix)\n    return summarize(doc)"
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)

    def shadow_function() -> None:
        return None

    shadow_function.__code__ = compile("def f(): pass", "<shadow>", "exec").co_consts[0]
    namespace = {"brief": shadow_function}
    calls = peek("briefs = [brief(i) for i in ['a', 'b']]", namespace, {"brief": function})
    assert [c[0] for c in calls] == ["fetch", "summarize", "fetch", "summarize"]
    assert calls[0][1] == ("a!",)


def test_preplan_fans_out_a_closed_comprehension_with_inspected_results() -> None:
    recorder = Recorder()
    statement = ast.parse("temps = {c: fetch(c)['t'] for c in ['x', 'y', 'z']}").body[0]
    preplan(statement, {}, TOOLS, Deduplicating(recorder))
    assert [c[1] for c in recorder.calls] == [("x",), ("y",), ("z",)]


def test_repair_closes_brackets_and_blocks() -> None:
    assert repair("x = [fetch('a'),") is not None
    assert repair("for u in urls:") is not None
    assert repair("if x:\n    y = fetch(") is not None


def test_nothing_but_pure_operations_runs() -> None:
    class Trap:
        def __getitem__(self, key: Any) -> Any:
            raise AssertionError("a peek must never call model-defined methods")

        def __add__(self, other: Any) -> Any:
            raise AssertionError("a peek must never call model-defined methods")

    assert peek("for u in items:\n    fetch(u)", {"items": Trap()}) == []
    assert peek("x = fetch(obj + 1)\ny = fetch(obj[0])", {"obj": Trap()}) == []


def test_deduplicating_launch_asks_once_per_call() -> None:
    recorder = Recorder()
    launch = Deduplicating(recorder)
    launch("fetch", ("a",), {})
    launch("fetch", ("a",), {})
    launch("fetch", ("b",), {})
    assert len(recorder.calls) == 2
