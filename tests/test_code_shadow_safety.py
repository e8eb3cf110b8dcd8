"""Adversarial code in the shadow: no side effect escapes, nothing hangs, only dependents are skipped,
and the real run still computes exactly what plain execution computes."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from forethought.code.predictor import CodeMode, CodePredictor
from test_code_support import FAST_LIMITS, ToolLog, make_tools, run_plain, runtime, stream_and_run, user_names

SETTLE_S = 15.0


async def shadow_only(code: str, log: ToolLog, namespace: dict[str, Any] | None = None) -> Any:
    """Stream ``code`` (plus an independent final call) into the shadow and let it finish; no real run."""
    rt = runtime(make_tools(log))
    session = rt.session()
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=FAST_LIMITS)
    turn = predictor.begin(session, namespace if namespace is not None else {})
    turn.feed(code + "\nafter = fetch('independent')\n")
    turn.finish()
    for _ in range(int(SETTLE_S / 0.05)):
        await turn.settle(0.05)
        stats = turn.stats()
        if turn.runner.idle and stats.executed + stats.blocked + stats.failed >= stats.statements:
            break
    stats = turn.stats()
    for _ in range(100):  # the independent call's speculation is on its way to the tool
        if any(c[1] == ("independent",) for c in log.calls):
            break
        await asyncio.sleep(0.01)
    stopped = await turn.close(wait_s=5.0)
    session.end_turn()
    await session.close()
    rt.close()
    return stats, stopped, turn.notes


def _escapes(marker: Path) -> dict[str, str]:
    m = repr(str(marker))
    return {
        "open": f"f = open({m}, 'w')\nf.write('x')",
        "os_system": f"import os\nos.system('touch ' + {m})",
        "subprocess": f"import subprocess\nsubprocess.run(['touch', {m}])",
        "pathlib": f"import pathlib\npathlib.Path({m}).write_text('x')",
        "io": f"import io\nio.open({m}, 'w').write('x')",
        "builtins": f"b = __builtins__\nb['open']({m}, 'w')",
        "dunder_import": f"__import__('os').system('touch ' + {m})",
        "importlib": f"import importlib\nimportlib.import_module('os').system('touch ' + {m})",
        "subclasses": (f"io = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'FileIO'][0]\n"
                       f"io({m}, 'w')"),
        "func_globals": f"g = getattr(fetch, '__globals__')\ng['__builtins__']['open']({m}, 'w')",
        "format_escape": "leak = '{0.__globals__}'.format(fetch)",
        "gen_frame": f"def g():\n    yield 1\nit = g()\nit.gi_frame.f_globals['__builtins__']['open']({m}, 'w')",
        "traceback_frame": (f"try:\n    1 / 0\nexcept Exception as e:\n"
                            f"    e.__traceback__.tb_frame.f_globals['__builtins__']['open']({m}, 'w')"),
        "attrgetter": "import operator\nop = operator.attrgetter('__globals__')(fetch)",
        "eval": f"eval(\"open({m}, 'w')\")",
        "exec": f"exec(\"open({m}, 'w')\")",
        "compile": "c = compile('1', 'x', 'eval')",
        "statistics_sys": f"import statistics\nstatistics.sys.modules['os'].system('touch ' + {m})",
        "setattr_module": "import json\njson.loads = print\nsetattr(json, 'dumps', print)",
        "class_attr": "import collections\ncollections.OrderedDict.extra = 1",
        "type3": "T = type('T', (), {'x': 1})",
    }


@pytest.mark.parametrize("name", sorted(_escapes(Path("/x"))))
async def test_escape_attempts_have_no_effect(name: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    log = ToolLog()
    _stats, stopped, notes = await shadow_only(_escapes(marker)[name], log)
    assert not marker.exists()
    assert stopped
    assert any(c[1] == ("independent",) for c in log.calls), notes


async def test_socket_connections_do_not_happen() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    try:
        log = ToolLog()
        await shadow_only(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}))\ns.send(b'x')", log)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


RUNAWAY = {
    "infinite_loop": "while True:\n    pass",
    "swallowed_budget": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n"
                        "        pass",
    "huge_string": "s = 'a' * 10 ** 10",
    "huge_list": "l = [0] * 10 ** 10",
    "huge_int": "x = 10 ** 10 ** 10",
    "huge_range": "l = list(range(10 ** 12))",
    "doubling": "s = 'ab'\nfor i in range(100):\n    s = s + s",
    "join_doubling": "s = 'ab'\nfor i in range(100):\n    s = ''.join([s, s])",
    "extend_doubling": "l = [1]\nfor i in range(100):\n    l.extend(l)",
    "infinite_consumer": "import itertools\nx = sum(itertools.count())",
    "infinite_unpack": "import itertools\nx = [*itertools.count()]",
    "deep_recursion": "def f(n):\n    return f(n + 1)\nx = f(0)",
    "exponential": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nx = fib(60)",
    "regex_backtracking": "import re\nx = re.match('(a+)+$', 'a' * 40 + 'b')",
    "factorial": "import math\nx = math.factorial(10 ** 7)",
    "wide_format": "x = f'{1:>1000000000}'",
    "zfill": "x = '1'.zfill(10 ** 10)",
    "to_bytes": "x = (1).to_bytes(10 ** 10, 'big')",
    "pow_builtin": "x = pow(3, 10 ** 9)",
}


@pytest.mark.parametrize("name", sorted(RUNAWAY))
async def test_runaway_statements_are_stopped_and_only_they_are_skipped(name: str) -> None:
    log = ToolLog()
    stats, stopped, notes = await shadow_only(RUNAWAY[name], log)
    assert stopped
    assert stats.blocked >= 1, notes
    assert any(c[1] == ("independent",) for c in log.calls), notes


REAL_FINE = {
    "unsafe_import": "import os\nname = os.path.basename('/a/b.txt')\nprint(fetch(name))",
    "long_loop": "n = 0\nwhile n < 300000:\n    n += 1\nprint(fetch(str(n)))",
    "big_string": "s = 'a' * 6000000\nprint(len(s), fetch(s[:3]))",
    "deep_but_finite": "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(fetch(str(depth(400))))",
    "blocked_builtin": "v = sorted(vars())[:1]\nprint(fetch('x'), len(v))",
}


@pytest.mark.parametrize("name", sorted(REAL_FINE))
async def test_the_real_run_is_unaffected_by_what_the_shadow_refused(name: str) -> None:
    code = REAL_FINE[name]
    tools = make_tools()
    streamed = await stream_and_run(code, tools, mode=CodeMode.WHOLE)
    plain = await run_plain(code, make_tools())
    assert streamed.results[0].signature() == plain.signature()
    assert streamed.results[0].error is None


async def test_a_blocked_import_skips_only_its_dependents() -> None:
    log = ToolLog()
    _stats, _, notes = await shadow_only("import os\nsep = os.sep\nx = fetch('free')\ny = fetch(sep)", log)
    fetched = [c[1] for c in log.calls if c[0] == "fetch"]
    assert ("free",) in fetched and ("/",) not in fetched
    assert any("import of 'os'" in n for n in notes)


async def test_shadow_changes_never_reach_the_real_namespace() -> None:
    log = ToolLog()
    namespace: dict[str, Any] = {"data": [1, 2], "config": {"k": "v"}}
    await shadow_only("data.append(3)\nconfig['k'] = 'changed'\ndel data[0]", log, namespace)
    assert namespace == {"data": [1, 2], "config": {"k": "v"}}


async def test_destructive_tools_never_run_in_the_shadow() -> None:
    log = ToolLog()
    outbox: list[str] = []
    await shadow_only("status = send('hello')\nx = fetch(status)", log)
    assert "send" not in log.names() and outbox == []


async def test_non_json_arguments_are_not_speculated_but_run_for_real() -> None:
    log = ToolLog()
    tools = make_tools(log)
    code = "x = fetch({1, 2})\nprint(x)"
    streamed = await stream_and_run(code, tools, mode=CodeMode.WHOLE)
    plain = await run_plain(code, make_tools())
    assert [c.kind for c in streamed.results[0].calls] == ["direct"]
    assert streamed.results[0].signature() == plain.signature()
    assert log.names() == ["fetch"]


async def test_values_the_shadow_cannot_copy_are_blocked_not_shared(tmp_path: Path) -> None:
    class Handle:
        def __init__(self) -> None:
            self.touched = False

        def poke(self) -> None:
            self.touched = True

    handle = Handle()
    log = ToolLog()
    namespace: dict[str, Any] = {"handle": handle, "items": ["a"]}
    _, _, notes = await shadow_only("handle.poke()\nr = fetch(items[0])", log, namespace)
    assert not handle.touched
    assert ("a",) in [c[1] for c in log.calls]
    assert any("handle" in n for n in notes)


async def test_definitions_from_earlier_turns_are_recreated_in_the_shadow() -> None:
    tools = make_tools()
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=FAST_LIMITS)
    namespace: dict[str, Any] = {}
    first = await stream_and_run("def key(x):\n    return x.upper()\n", tools, namespace=namespace,
                                 predictor=predictor)
    assert first.results[0].error is None and callable(namespace["key"])
    second = await stream_and_run("v = fetch(key('abc'))\nprint(v)", tools, namespace=namespace, predictor=predictor)
    assert second.hits == 1
    assert user_names(namespace, tools)["v"] == {"url": "ABC", "n": 3}
