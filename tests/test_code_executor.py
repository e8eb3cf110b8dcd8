"""Real execution: independent calls run concurrently, everything observable stays as in plain execution."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import Policy, Runtime
from forethought.code.executor import CodeExecutor
from forethought.code.results import ExecResult
from test_code_support import ToolLog, comparable, make_tools, run_plain, runtime, user_names


async def run_lazy(code: str, log: ToolLog | None = None, latency_s: float = 0.0, policy: Policy | None = None,
                   outbox: list[str] | None = None) -> tuple[ExecResult, dict[str, Any]]:
    tools = make_tools(log, latency_s, outbox)
    rt = Runtime(tools, policy) if policy is not None else runtime(tools)
    session = rt.session()
    namespace: dict[str, Any] = {}
    result = await CodeExecutor(session, namespace).run(code)
    session.end_turn()
    await session.close()
    rt.close()
    return result, user_names(namespace, tools)


async def both(code: str) -> tuple[ExecResult, ExecResult, dict[str, Any], dict[str, Any], list[str], list[str]]:
    lazy_outbox: list[str] = []
    plain_outbox: list[str] = []
    lazy, lazy_ns = await run_lazy(code, outbox=lazy_outbox)
    plain_ns: dict[str, Any] = {}
    tools = make_tools(outbox=plain_outbox)
    plain = await run_plain(code, tools, plain_ns)
    return lazy, plain, lazy_ns, user_names(plain_ns, tools), lazy_outbox, plain_outbox


PROGRAMS = {
    "independent": 'a = fetch("x")\nb = fetch("yy")\nc = fetch("zzz")\nprint(a["n"] + b["n"] + c["n"])',
    "fail_in_the_middle": 'a = fetch("x")\nb = lookup("bad1")\nc = fetch("zzz")\nprint(a, b, c)',
    "fail_inside_a_loop": 'out = []\nfor u in ["a", "bad", "c"]:\n    out.append(lookup(u))\nprint(out)',
    "fail_after_later_statements": 'out = []\nk = 0\nfor u in ["a", "b", "bad", "c"]:\n    k = k + 1\n'
                                   '    out.append(lookup(u))\nz = 5',
    "caught": 'try:\n    a = lookup("bad")\nexcept KeyError as e:\n    a = "caught " + str(e)\nprint(a)',
    "write_in_between": 'a = fetch("x")\nb = fetch("y")\nsend("hello " + a["url"])\nc = fetch("z")\nprint(c)',
    "chain": 'docs = [fetch(u) for u in ["a", "bb", "ccc"]]\nsums = [summarize(d["url"]) for d in docs]\nprint(sums)',
    "dict_store": 'd = {}\nfor u in ["a", "bb"]:\n    d[u] = fetch(u)\nprint(d)',
    "program_error": 'a = fetch("x")\nb = fetch("y")\nz = 1 / 0\nc = fetch("q")',
    "program_error_after_failing_call": 'a = lookup("bad")\nb = fetch("y")\nz = 1 / 0',
    "inspect_in_loop": 'total = 0\nfor u in ["a", "bb"]:\n    r = fetch(u)\n    total = total + r["n"]\nprint(total)',
    "function": 'def get(u):\n    return fetch(u)["n"]\nprint([get(u) for u in ["a", "bb"]])',
    "keywords_and_defaults": 'a = search("q")\nb = search(query="q", k=2)\nc = search("q", k=3)\nprint(a, b, c)',
    "aliases": 'x = [fetch("a")]\ny = x\ny.append(fetch("b"))\nprint(len(x), x is y)',
    "future_annotations": "from __future__ import annotations\ndef f(a: Undefined) -> Missing:\n    return 1\n"
                          "print(f(0))",
    "no_inherited_future": "def f(a: Undefined):\n    return 1",
    "non_json_argument": "x = fetch({1, 2})\nprint(x)",
    "syntax_error": "x = fetch('a')\ny = = 2",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_output_error_calls_namespace_equal_plain(name: str) -> None:
    lazy, plain, lazy_ns, plain_ns, lazy_out, plain_out = await both(PROGRAMS[name])
    assert lazy.signature() == plain.signature()
    assert comparable(lazy_ns) == comparable(plain_ns)
    assert lazy_out == plain_out


async def test_independent_calls_overlap() -> None:
    log = ToolLog()
    result, _ = await run_lazy('a = fetch("x")\nb = fetch("y")\nc = fetch("z")\nprint(a, b, c)', log, 0.05)
    assert result.error is None
    starts = sorted(c[2] for c in log.calls)
    ends = sorted(c[3] for c in log.calls)
    assert starts[-1] < ends[0]  # every call started before any finished
    assert all(c.parallel for c in result.calls)


async def test_writes_wait_for_earlier_calls_and_later_calls_wait_for_writes() -> None:
    log = ToolLog()
    result, _ = await run_lazy('a = fetch("x")\nsend("m")\nb = fetch("y")\nprint(a, b)', log, 0.02)
    assert result.error is None
    by_name = {(c[0], c[1][0]): c for c in log.calls}
    assert by_name[("fetch", "x")][3] <= by_name[("send", "m")][2]
    assert by_name[("send", "m")][3] <= by_name[("fetch", "y")][2]


async def test_a_failed_call_stops_the_authoritative_sequence_where_plain_stops() -> None:
    result, namespace = await run_lazy('a = fetch("x")\nb = lookup("bad")\nc = fetch("later")\nd = 1')
    assert [r.call.name for r in result.calls] == ["fetch", "lookup"]
    assert result.error_text == "KeyError: 'bad'"
    assert "c" not in namespace and "d" not in namespace


async def test_speculation_budget_exhausted_still_equivalent() -> None:
    code = "\n".join(f'v{i} = fetch("u{i}")' for i in range(6)) + "\nprint(v0, v5)"
    result, namespace = await run_lazy(code, policy=Policy(max_calls_per_turn=2))
    plain_ns: dict[str, Any] = {}
    tools = make_tools()
    plain = await run_plain(code, tools, plain_ns)
    assert result.signature() == plain.signature() and comparable(namespace) == comparable(user_names(plain_ns, tools))


async def test_blocks_run_one_at_a_time_in_call_order() -> None:
    tools = make_tools(latency_s=0.02)
    rt = runtime(tools)
    session = rt.session()
    namespace: dict[str, Any] = {}
    executor = CodeExecutor(session, namespace)
    first = asyncio.create_task(executor.run('x = fetch("a")\norder = ["first"]'))
    second = asyncio.create_task(executor.run('order.append("second")\nprint(order, x["n"])'))
    results = await asyncio.gather(first, second)
    assert results[1].stdout == "['first', 'second'] 1\n"
    await session.close()
    rt.close()


# --- generated programs ----------------------------------------------------------------------------

_KEYS = st.sampled_from(["a", "bb", "ccc", "bad1", "bad2"])


@st.composite
def programs(draw: st.DrawFn) -> str:
    lines = ["lst = []"]
    defined: list[str] = []
    for i in range(draw(st.integers(min_value=1, max_value=9))):
        name = f"v{i}"
        earlier = draw(st.sampled_from(defined)) if defined else None
        choice = draw(st.integers(min_value=0, max_value=9 if earlier else 5))
        if choice == 0:
            lines.append(f'{name} = fetch("{draw(_KEYS)}")')
        elif choice == 1:
            lines.append(f'{name} = lookup("{draw(_KEYS)}")')
        elif choice == 2:
            lines.append(f'lst.append(fetch("{draw(_KEYS)}"))')
            continue
        elif choice == 3:
            lines.append(f'{name} = [lookup(k) for k in ["{draw(_KEYS)}", "{draw(_KEYS)}"]]')
        elif choice == 4:
            lines.append(f'send("m{i}")')
            continue
        elif choice == 5:
            lines.append(f'try:\n    {name} = lookup("{draw(_KEYS)}")\nexcept KeyError:\n    {name} = -1')
        elif choice == 6:
            lines.append(f"{name} = summarize(str({earlier}))")
        elif choice == 7:
            lines.append(f"print({earlier})")
            continue
        elif choice == 8:
            lines.append(f"{name} = {earlier} + 1")
        else:
            lines.append(f'{name} = fetch(str(len(str({earlier}))))\nlst.append({name})')
        defined.append(name)
    lines.append("print(lst)")
    return "\n".join(lines)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(programs())
async def test_generated_programs_equal_plain_execution(code: str) -> None:
    lazy, plain, lazy_ns, plain_ns, lazy_out, plain_out = await both(code)
    assert lazy.signature() == plain.signature(), code
    assert comparable(lazy_ns) == comparable(plain_ns), code
    assert lazy_out == plain_out, code
