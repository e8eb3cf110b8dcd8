"""No placeholder of the real run reaches a value the program keeps (issue 27, "placeholders escape").

Generated programs put the results of lazily issued calls into lists, tuples, dicts, sets, aliases of those,
attributes of objects, closures and default arguments, mixing statements that run ahead of pending calls
with ones that are barriers. After the run, a walk of everything reachable from the namespace (through the
interpreter's own references: containers, instance dictionaries, closure cells, defaults) finds no
:class:`~forethought.code.real_calls.PendingCall`, and the program printed, and kept, exactly what plain exec
does, identities of aliases included.
"""

from __future__ import annotations

import gc
import re
import types
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought.code.executor import CodeExecutor
from forethought.code.real_calls import PendingCall
from test_code_support import comparable, make_tools, run_plain, runtime, user_names

_ADDRESS = re.compile(r"0x[0-9a-f]+")


def _reachable_pending(namespace: dict[str, Any], limit: int = 200_000) -> list[str]:
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(name, value) for name, value in namespace.items() if not name.startswith("__")]
    while stack and len(seen) < limit:
        path, item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if type(item) is PendingCall:
            found.append(path)
            continue
        if isinstance(item, types.ModuleType | type) or item is namespace:
            continue
        stack.extend((f"{path}>{type(ref).__name__}", ref) for ref in gc.get_referents(item))
    return found


@st.composite
def programs(draw: st.DrawFn) -> str:
    lines: list[str] = ["class Box:\n    pass"]
    values: list[str] = []
    containers: list[str] = []
    hashables: list[str] = []
    for i in range(draw(st.integers(min_value=3, max_value=14))):
        kind = draw(st.sampled_from(["call", "call", "hashable", "list", "tuple", "dict", "set", "alias", "append",
                                     "nest", "attribute", "closure", "default", "print", "item", "inspect",
                                     "inspect"]))
        if kind == "call" or not values:
            lines.append(f"v{i} = fetch('u{i}')")
            values.append(f"v{i}")
        elif kind == "hashable":
            lines.append(f"h{i} = lookup('k{i}')")
            hashables.append(f"h{i}")
        elif kind == "list":
            lines.append(f"c{i} = [{', '.join(draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)))}]")
            containers.append(f"c{i}")
        elif kind == "tuple":
            lines.append(f"c{i} = ({', '.join(draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)))},)")
            containers.append(f"c{i}")
        elif kind == "dict":
            lines.append(f"c{i} = {{'a': {draw(st.sampled_from(values))}, 'b': [{draw(st.sampled_from(values))}]}}")
            containers.append(f"c{i}")
        elif kind == "set" and hashables:
            lines.append(f"c{i} = {{{', '.join(draw(st.lists(st.sampled_from(hashables), min_size=1, max_size=3)))}}}")
            containers.append(f"c{i}")
        elif kind == "alias" and containers:
            lines.append(f"c{i} = {draw(st.sampled_from(containers))}")
            containers.append(f"c{i}")
        elif kind == "append" and containers:
            target = draw(st.sampled_from(containers))
            lines.append(f"if type({target}) is list:\n    {target}.append({draw(st.sampled_from(values))})")
        elif kind == "nest" and containers:
            inner, value = draw(st.sampled_from(containers)), draw(st.sampled_from(values))
            lines.append(f"c{i} = {{'in': {inner}, 't': ({value},)}}")
            containers.append(f"c{i}")
        elif kind == "attribute":
            lines.append(f"o{i} = Box()\no{i}.value = {draw(st.sampled_from(values))}")
        elif kind == "closure":
            lines.append(f"def f{i}():\n    return {draw(st.sampled_from(values))}")
        elif kind == "default":
            lines.append(f"def g{i}(x={draw(st.sampled_from(values))}):\n    return x")
        elif kind == "inspect":  # reading one result claims every earlier one; the others flow along
            lines.append(f"c{i} = {{'a': {draw(st.sampled_from(values))}, 'n': {values[-1]}['n']}}")
            containers.append(f"c{i}")
        elif kind == "item" and containers:
            target = draw(st.sampled_from(containers))
            lines.append(f"if type({target}) is dict:\n    {target}['new'] = {draw(st.sampled_from(values))}")
        else:
            lines.append(f"print({draw(st.sampled_from(values))})")
    names = values + containers
    lines.append("print(" + ", ".join(names) + ")")
    pairs = [(a, b) for a in containers for b in containers if a < b]
    if pairs:
        lines.append("print(" + ", ".join(f"{a} is {b}" for a, b in pairs[:20]) + ")")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
async def test_no_placeholder_is_reachable_after_a_run_and_values_equal_plain(code: str) -> None:
    tools = make_tools()
    rt = runtime(tools)
    session = rt.session()
    namespace: dict[str, Any] = {}
    result = await CodeExecutor(session, namespace).run(code)
    session.end_turn()
    await session.close()
    rt.close()
    assert _reachable_pending(namespace) == [], code
    plain_namespace: dict[str, Any] = {}
    plain = await run_plain(code, make_tools(), plain_namespace)
    assert result.signature() == plain.signature(), code
    ours, theirs = (_ADDRESS.sub("0x?", comparable(user_names(ns, tools))) for ns in (namespace, plain_namespace))
    assert ours == theirs, code


async def test_the_issue_s_example_keeps_no_placeholder() -> None:
    code = ("a = summarize('x')\no = fetch('k')\nresult = {'a': a, 'o': o['url']}\nimport json\n"
            "print(json.dumps(result))")
    tools = make_tools()
    rt = runtime(tools)
    session = rt.session()
    namespace: dict[str, Any] = {}
    result = await CodeExecutor(session, namespace).run("a = summarize('x')\no = fetch('k')\n"
                                                        "result = {'a': a, 'o': o['url']}")
    assert _reachable_pending(namespace) == []
    assert type(namespace["result"]["a"]) is str
    second = await CodeExecutor(session, namespace).run("import json\nprint(json.dumps(result))")
    session.end_turn()
    await session.close()
    rt.close()
    plain = await run_plain(code, make_tools())
    assert result.error is None and second.stdout == plain.stdout
