"""The shadow worker: the typed data encoding, the namespace copy, degrading without isolation, the pool.

Also the behaviours the in-process shadow had that the worker keeps: changes never reach the real
namespace, non-data arguments are not speculated but run for real, values that are not data are blocked
(not shared), definitions of earlier turns are re-created, and programs the shadow could not speculate still
run exactly as plainly.
"""

from __future__ import annotations

import asyncio
import math
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.code import wire
from forethought.code.predictor import CodeMode, CodePredictor
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import WorkerPool, isolation_available
from test_code_support import (
    FAST_LIMITS,
    ToolLog,
    make_tools,
    run_plain,
    shadow_only,
    stream_and_run,
    user_names,
)

_WHY = isolation_available(FAST_LIMITS)
needs_isolation = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")

_scalars = st.none() | st.booleans() | st.integers() | st.sampled_from([2 ** 53 + 1, -(10 ** 300), 10 ** 1000]) \
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8) | st.binary(max_size=8)
_hashables = st.recursive(_scalars.filter(lambda v: not (isinstance(v, float) and math.isnan(v))),
                          lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                       | st.dictionaries(_hashables, inner, max_size=3) | st.sets(_hashables, max_size=3)
                       | st.frozensets(_hashables, max_size=3), max_leaves=12)


def _canon(v: Any) -> str:
    """A rendering that differs whenever a type or value differs (set order aside; NaN equals NaN)."""
    kind = type(v).__name__
    if isinstance(v, float):
        return f"float:{'nan' if math.isnan(v) else repr(v)}"
    if isinstance(v, list | tuple):
        return f"{kind}[{','.join(_canon(x) for x in v)}]"
    if isinstance(v, dict):
        return f"dict[{','.join(_canon(k) + ':' + _canon(x) for k, x in v.items())}]"
    if isinstance(v, set | frozenset):
        return f"{kind}[{','.join(sorted(_canon(x) for x in v))}]"
    return f"{kind}:{v!r}"


@settings(max_examples=150, deadline=None)
@given(_values)
def test_the_encoding_keeps_every_type_and_value(value: Any) -> None:
    copied = wire.decode(wire.parse(wire.frame({"op": "x", "v": wire.encode(value)})[wire.HEADER_SIZE:])["v"])
    assert _canon(copied) == _canon(value)


@pytest.mark.parametrize("value", [object(), print, os, type, Exception("x"), range(3), 1j, bytearray(b"x")])
def test_anything_but_data_is_refused(value: Any) -> None:
    with pytest.raises(wire.NotData):
        wire.encode(value)


@pytest.mark.parametrize("data", [
    {"tuple": [1], "set": [2]}, {"pickle": "gASV"}, {"set": [[1]]}, {"dict": [[[1], 2]]}, {"bytes": "!!"},
    {"float": "1e999x"}, {"dict": [[1]]}, {"frozenset": "ab"}, {"object": ["os", "system"]},
])
def test_decoding_is_strict(data: Any) -> None:
    with pytest.raises(wire.NotData):
        wire.decode(data)


def test_too_deep_or_too_large_is_refused() -> None:
    deep: Any = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.NotData):
        wire.encode(deep)
    with pytest.raises(wire.NotData):
        wire.encode(list(range(100)), max_nodes=50)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(wire.NotData):
        wire.encode(loop)


async def test_without_isolation_code_speculation_turns_off_with_one_warning_and_runs_plainly() -> None:
    impossible = ShadowLimits(min_landlock_abi=10 ** 6)
    pool = WorkerPool(impossible)
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=impossible, pool=pool)
    code = "a = fetch('x')\nprint(a)"
    try:
        with pytest.warns(RuntimeWarning, match="code speculation is off"):
            first = await stream_and_run(code, make_tools(), predictor=predictor)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # one warning, not one per turn
            second = await stream_and_run(code, make_tools(), predictor=predictor)
    finally:
        pool.close()
    plain = await run_plain(code, make_tools())
    for run in (first, second):
        assert run.hits == 0 and run.results[0].signature() == plain.signature()
        assert any("code speculation is off" in n for n in run.turn.notes)


@needs_isolation
async def test_the_scratch_directory_is_discarded_after_the_turn() -> None:
    log = ToolLog()
    phase = await shadow_only("import os\nopen('left.txt', 'w').write('x')\nwhere = os.getcwd()\n"
                              "fetch(where)", log)
    scratch = next(args[0] for name, args in phase.launched_args if name == "fetch" and args != ("independent",))
    assert scratch.startswith("/tmp/forethought-shadow-") or "forethought-shadow-" in scratch
    gone = Path(scratch)
    for _ in range(200):
        if not gone.exists():  # noqa: ASYNC240 - a stat of a local directory
            break
        await asyncio.sleep(0.01)
    assert not gone.exists()  # noqa: ASYNC240


@needs_isolation
async def test_shadow_changes_never_reach_the_real_namespace() -> None:
    log = ToolLog()
    namespace: dict[str, Any] = {"data": [1, 2], "config": {"k": "v"}}
    await shadow_only("data.append(3)\nconfig['k'] = 'changed'\ndel data[0]", log, namespace)
    assert namespace == {"data": [1, 2], "config": {"k": "v"}}


@needs_isolation
async def test_results_sent_into_the_worker_are_copies() -> None:
    log = ToolLog()
    tools = make_tools(log)
    code = "r = fetch('abc')\nr['url'] = 'changed'\nr2 = fetch(r['url'])\nprint(r, r2)"
    streamed = await stream_and_run(code, tools, mode=CodeMode.WHOLE)
    plain = await run_plain(code, make_tools())
    assert streamed.results[0].signature() == plain.signature()


@needs_isolation
async def test_tuples_sets_and_big_ints_are_speculated_with_their_types() -> None:
    seen: list[Any] = []

    from forethought import Effect, tool

    def inspect(value: Any) -> str:
        seen.append(value)
        return f"{type(value).__name__}:{value!r}"

    tools = [tool(inspect, effect=Effect.PURE)]
    code = "a = inspect((1, 2))\nb = inspect(2 ** 53 + 1)\nc = inspect(3)\nprint(a, b, c)"
    streamed = await stream_and_run(code, tools, mode=CodeMode.WHOLE)
    plain = await run_plain(code, [tool(inspect, effect=Effect.PURE)])
    assert streamed.results[0].stdout == plain.stdout == "tuple:(1, 2) int:9007199254740993 int:3\n"
    assert streamed.hits == 3


@needs_isolation
async def test_non_data_arguments_are_not_speculated_but_run_for_real() -> None:
    log = ToolLog()
    tools = make_tools(log)
    code = "x = fetch(object())\nprint(x)"
    streamed = await stream_and_run(code, tools, mode=CodeMode.WHOLE)
    plain = await run_plain(code, make_tools())
    assert [c.kind for c in streamed.results[0].calls] == ["direct"]
    real = streamed.results[0]
    assert real.stdout == plain.stdout and repr(real.error) == repr(plain.error)
    assert log.names() == ["fetch"]


@needs_isolation
async def test_values_that_are_not_data_are_blocked_not_shared() -> None:
    class Handle:
        def __init__(self) -> None:
            self.touched = False

        def poke(self) -> None:
            self.touched = True

    handle = Handle()
    log = ToolLog()
    namespace: dict[str, Any] = {"handle": handle, "items": ["a"]}
    phase = await shadow_only("handle.poke()\nr = fetch(items[0])", log, namespace)
    assert not handle.touched
    assert ("a",) in [c[1] for c in log.calls]
    assert any("handle" in n for n in phase.notes)


@needs_isolation
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


REAL_FINE = {
    "import_os": "import os\nname = os.path.basename('/a/b.txt')\nprint(fetch(name))",
    "long_loop": "n = 0\nwhile n < 300000:\n    n += 1\nprint(fetch(str(n)))",
    "big_string": "s = 'a' * 6000000\nprint(len(s), fetch(s[:3]))",
    "deep_but_finite": "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(fetch(str(depth(400))))",
    "introspection": "v = sorted(vars())[:1]\nprint(fetch('x'), len(v))",
    "read_a_file": "import os\nprint(fetch(str(os.path.exists('/etc/hostname'))))",
}


@needs_isolation
@pytest.mark.parametrize("name", sorted(REAL_FINE))
async def test_the_real_run_is_unaffected_by_what_the_shadow_could_not_do(name: str) -> None:
    code = REAL_FINE[name]
    streamed = await stream_and_run(code, make_tools(), mode=CodeMode.WHOLE)
    plain = await run_plain(code, make_tools())
    assert streamed.results[0].signature() == plain.signature()
    assert streamed.results[0].error is None


@needs_isolation
async def test_a_policy_cap_that_stops_speculation_is_in_the_turn_s_notes() -> None:
    from forethought import Policy, Runtime
    from forethought.code.executor import CodeExecutor

    tools = make_tools()
    rt = Runtime(tools, Policy(max_calls_per_turn=1))
    session = rt.session()
    namespace: dict[str, Any] = {}
    turn = CodePredictor(mode=CodeMode.WHOLE, limits=FAST_LIMITS).begin(session, namespace)
    code = "a = fetch('x')\nb = fetch('yy')\nc = fetch('zzz')\nprint(a['n'], b['n'], c['n'])"
    turn.feed(code + "\n")
    turn.finish()
    await turn.settle(5.0)
    await session.wait_speculations(5.0)
    result = await CodeExecutor(session, namespace, link=turn.link).run(code)
    await turn.close()
    session.end_turn()
    plain = await run_plain(code, make_tools())
    assert result.stdout == plain.stdout
    assert any("not speculated" in n for n in turn.notes), turn.notes
    await session.close()
    rt.close()


@needs_isolation
async def test_an_answer_keeps_the_worker_busy_until_it_has_run_what_the_answer_unblocked() -> None:
    """The worker counts as busy from each answer it is sent until it reports idle after it: so a real call
    about to miss, which first lets a busy shadow settle, finds the shadow's launch of a chain's next call
    (and claims it) instead of racing it, however fast the real run reaches that call."""
    import threading

    from forethought import Effect, Runtime, ToolCall, tool

    gate = threading.Event()

    def lookup(key: str) -> int:
        if key == "start":
            gate.wait(30)  # held until the test lets it end
        return len(key)

    rt = Runtime([tool(lookup, effect=Effect.PURE)])
    session = rt.session()
    turn = CodePredictor(mode=CodeMode.WHOLE, limits=FAST_LIMITS).begin(session, {})
    turn.feed("a = lookup('start')\nb = lookup(f'next-{a}')\nprint(b)\n")
    turn.finish()
    await turn.settle(5.0)  # the first call is launched; the second statement waits for its value
    _, _, second = session.resolve(ToolCall("lookup", {"key": "next-5"}))
    assert not session.has_speculation(second)
    gate.set()
    await session.wait_speculations(5.0)  # the first call ended: its answer is on its way to the worker
    assert not turn.idle
    await turn.settle(5.0)
    assert session.has_speculation(second)  # (its own answer may already have made the worker busy again)
    await turn.close()
    session.end_turn()
    await session.close()
    rt.close()
