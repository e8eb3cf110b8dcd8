"""Running ahead of pending calls is bounded, and effects outside tools are barriers (issue 27).

* The real executor runs a statement ahead of pending calls only if no single operation of it costs more
  than linear time and memory in existing data (:func:`~forethought.code.safety.bounded`), and a Python-level
  loop that does is stopped past its CPU allowance, undone and run again after the earlier calls are claimed;
  so a statement plain exec never reaches (an earlier call raises) is never run through.
* An audit event of the program's own is an effect (:func:`~forethought.code.effects.is_effect`); in the real
  run it advances the session's write clock, so a read guessed before it is not served; in the shadow it
  ends the speculation of later reads (pure calls go on).
"""

from __future__ import annotations

import ast
import os
import resource
from typing import Any

import pytest

from forethought.code.effects import is_effect
from forethought.code.executor import CodeExecutor
from forethought.code.safety import bounded
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, ToolLog, make_tools, run_plain, runtime, shadow_only

_WHY = isolation_available(FAST_LIMITS)
needs_isolation = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")

UNBOUNDED = {
    "repeat_string": "s = 'x' * n",
    "repeat_list": "xs = [0] * n",
    "power": "p = 7 ** n",
    "shift": "x = 1 << n",
    "format_percent": "s = '%0*d' % (n, 1)",
    "format_spec": "s = f'{1:>{n}}'",
    "constant_format_spec": "s = f'{v:>1000000000}'",
    "augmented_multiply": "s *= n",
    "wide_constant_percent_format": "s = '%0999999999d' % 1",
    "star_percent_format": "s = '%*d' % (n, 1)",
    "power_of_a_name": "q = x ** 2",
    "padding": "s = 'a'.center(n)",
    "replace": "s = t.replace('a', u)",
    "format_method": "s = '{:>{}}'.format(1, n)",
    "range_summed": "s = sum(range(n))",
    "range_listed": "xs = list(range(n))",
    "range_constant_too_big": "xs = list(range(10 ** 9))",
    "kept_generator": "g = (fetch(x) for x in xs)",
    "matrix_multiply": "m = a @ b",
}
BOUNDED = {
    "tool_call": "a = fetch('x')",
    "comprehension": "docs = [fetch(u) for u in urls]",
    "range_loop": "for i in range(n):\n    out.append(fetch(str(i)))",
    "range_comprehension": "xs = [fetch(str(i)) for i in range(n)]",
    "small_constant_range": "xs = list(range(10))",
    "small_constants": "k = 3 * 4",
    "addition": "s = a + b",
    "f_string": "s = f'doc-{i}'",
    "consumed_generator": "t = sum(len(x) for x in xs)",
    "join": "s = ', '.join(xs)",
    "while": "while page < 5:\n    page += 1",
    "small_multiple": "s = x * 2",
    "augmented_small_multiple": "s *= 3",
    "remainder": "odd = [n for n in xs if n % 2]",
    "narrow_format_spec": "s = f'doc-{n:03d}'",
    "narrow_percent_format": "s = 'doc-%03d' % n",
}


@pytest.mark.parametrize("name", sorted(UNBOUNDED))
def test_a_statement_with_an_unbounded_operation_never_runs_ahead(name: str) -> None:
    assert not bounded(ast.parse(UNBOUNDED[name]).body[0])


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_common_statements_are_bounded(name: str) -> None:
    assert bounded(ast.parse(BOUNDED[name]).body[0])


async def _real(code: str) -> tuple[Any, CodeExecutor]:
    rt = runtime(make_tools())
    session = rt.session()
    executor = CodeExecutor(session, {})
    result = await executor.run(code)
    session.end_turn()
    await session.close()
    rt.close()
    return result, executor


LOOPS = {
    "while": "a = lookup('bad1')\nn = 0\nwhile n < 20000000:\n    n += 1\nprint(n)",
    "for_range": "a = lookup('bad2')\nt = 0\nfor i in range(20000000):\n    t = t + i\nprint(t)",
    "comprehension": "a = lookup('bad3')\nxs = [i + 1 for i in range(20000000)]\nprint(len(xs))",
    "nested": ("a = lookup('bad4')\nt = 0\nfor i in range(5000):\n    for j in range(5000):\n        t = t + j\n"
               "print(t)"),
}


@pytest.mark.parametrize("name", sorted(LOOPS))
async def test_a_loop_running_ahead_past_its_allowance_is_stopped_and_waits_for_the_failing_call(name: str) -> None:
    result, executor = await _real(LOOPS[name])
    plain = await run_plain(LOOPS[name], make_tools())
    assert result.signature() == plain.signature() and result.error_text.startswith("KeyError")
    assert executor.guard.stopped_statements == 1


async def test_a_loop_that_finishes_within_its_allowance_is_not_stopped() -> None:
    code = "a = fetch('x')\nn = 0\nwhile n < 1000:\n    n += 1\nprint(a, n)"
    result, executor = await _real(code)
    assert result.signature() == (await run_plain(code, make_tools())).signature()
    assert executor.guard.stopped_statements == 0


MEMORY = {
    "repeat": "big = 'x' * (3 * 10 ** 8)",
    "list": "big = [0] * (4 * 10 ** 7)",
    "bytes_join": "big = b''.join([b'x' * 10 ** 8, b'y' * 10 ** 8, b'z' * 10 ** 8])",
}


@pytest.mark.parametrize("name", sorted(MEMORY))
async def test_a_memory_bomb_after_a_failing_call_is_never_built(name: str) -> None:
    code = f"a = lookup('bad5')\n{MEMORY[name]}\nprint(len(big))"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result, _ = await _real(code)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert result.error_text == "KeyError: 'bad5'"
    assert grown_kib < 100 * 1024, f"the process grew {grown_kib // 1024} MiB"


async def test_many_calls_are_never_more_than_the_pending_cap_at_once() -> None:
    from forethought.code.real_calls import MAX_PENDING
    code = f"xs = [fetch(str(i)) for i in range({MAX_PENDING * 2 + 7})]\nprint(len(xs), xs[-1])"
    result, _ = await _real(code)
    assert result.signature() == (await run_plain(code, make_tools())).signature()


# --- effects ---------------------------------------------------------------------------------------------

EFFECTS = [("open", ("f", "w", 0)), ("open", ("f", "a", 0)), ("open", ("f", "r+", 0)), ("open", ("f", "x", 0)),
           ("open", ("f", None, os.O_WRONLY)), ("open", ("f", None, os.O_RDWR | os.O_CREAT)), ("os.remove", ("f",)),
           ("os.rename", ("a", "b")), ("os.mkdir", ("d", 0o777, -1)), ("os.putenv", (b"K", b"V")),
           ("os.unsetenv", (b"K",)), ("os.chdir", ("/",)), ("subprocess.Popen", ("sh",)), ("os.system", (b"true",)),
           ("socket.connect", (None, ("127.0.0.1", 1))), ("ctypes.call_function", (0, ())),
           ("sqlite3.connect", ("db",)), ("object.__setattr__", (int, "x", 1)), ("shutil.rmtree", ("d",)),
           ("some.future.event", ())]
HARMLESS = [("open", ("f", "r", 0)), ("open", ("f", "rb", 0)), ("open", ("f", None, os.O_RDONLY)),
            ("import", ("json",)), ("exec", (None,)), ("compile", (b"", "<x>")), ("os.listdir", (".",)),
            ("sys._getframe", (None,)), ("builtins.id", (1,)), ("time.sleep", (0.1,))]


@pytest.mark.parametrize(("event", "args"), EFFECTS)
def test_events_that_may_change_what_a_tool_reads_are_effects(event: str, args: tuple[Any, ...]) -> None:
    assert is_effect(event, args)


@pytest.mark.parametrize(("event", "args"), HARMLESS)
def test_reads_and_the_interpreter_s_own_events_are_not(event: str, args: tuple[Any, ...]) -> None:
    assert not is_effect(event, args)


def _read_tools(log: ToolLog, path: str) -> list[Any]:
    from forethought import Effect, tool

    def read_note(name: str) -> str:
        with log.lock:
            log.calls.append(("read_note", (name,), 0.0, 0.0))
        return open(os.path.join(path, name)).read() if os.path.exists(os.path.join(path, name)) else "<none>"

    def fetch(url: str) -> str:
        with log.lock:
            log.calls.append(("fetch", (url,), 0.0, 0.0))
        return url

    return [tool(read_note, effect=Effect.READ_ONLY), tool(fetch, effect=Effect.PURE)]


SHADOW_EFFECTS = {
    "write": "open('scratch.txt', 'w').write('x')",
    "remove": "import os\nopen('a', 'w').close()\nos.remove('a')",
    "environment": "import os\nos.environ['FT_SHADOW_X'] = '1'",
    "spawn": "import os\ntry:\n    os.system('true')\nexcept OSError:\n    pass",
    "ctypes": "import ctypes\nctypes.CDLL(None).getpid()",
    "ctypes_held": "import ctypes\nlibc = ctypes.CDLL(None)\npid = libc.getpid\npid()",
    "skipped_unknown": "handle.write('x')",
}


@needs_isolation
@pytest.mark.parametrize("name", sorted(SHADOW_EFFECTS))
async def test_after_an_effect_the_shadow_speculates_no_read_but_pure_calls_go_on(name: str, tmp_path: Any) -> None:
    log = ToolLog()
    code = f"before = read_note('n')\n{SHADOW_EFFECTS[name]}\nafter = read_note('m')\npure = fetch('p')"
    with open(os.devnull, "w") as handle:  # noqa: ASYNC230 - not data: blocked in the shadow
        phase = await shadow_only(code, log, {"handle": handle}, tools=_read_tools(log, str(tmp_path)), tail="")
    speculated = [c[:2] for c in log.calls]
    assert ("read_note", ("n",)) in speculated and ("fetch", ("p",)) in speculated, phase.notes
    assert ("read_note", ("m",)) not in speculated, (speculated, phase.notes)
    assert any("later reads not speculated" in n for n in phase.notes), phase.notes


WRITES = {
    "open": "open(NOTE, 'w').write('new')",
    "pathlib": "import pathlib\npathlib.Path(NOTE).write_text('new')",
    "os_level": "import os\nfd = os.open(NOTE, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'new')\nos.close(fd)",
    "in_a_function": "def save():\n    with open(NOTE, 'w') as f:\n        f.write('new')\nsave()",
    "subprocess": "import subprocess\nsubprocess.run(['sh', '-c', 'printf new > ' + NOTE])",
    "rename_over": "import os\nopen(NOTE + '.tmp', 'w').write('new')\nos.replace(NOTE + '.tmp', NOTE)",
    "os_write_on_a_held_descriptor": "import os\nos.write(FD, b'new')",
    "ctypes_on_a_held_descriptor": "import ctypes\nlibc = ctypes.CDLL(None)\nw = libc.write\nw(FD, b'new', 3)",
}


@pytest.mark.parametrize("name", sorted(WRITES))
async def test_a_read_guessed_before_the_real_run_s_own_write_is_not_served(name: str, tmp_path: Any) -> None:
    from forethought import ToolCall

    note = tmp_path / "n"
    note.write_text("old")
    log = ToolLog()
    rt = runtime(_read_tools(log, str(tmp_path)))
    session = rt.session()
    session.speculate(ToolCall("read_note", {"name": "n"}))  # a guess made before the write (any source)
    await session.wait_speculations(5.0)
    code = f"{WRITES[name]}\nv = read_note('n')\nprint(v)"
    fd = os.open(note, os.O_WRONLY | os.O_TRUNC)  # a descriptor the program holds before the block
    try:
        result = await CodeExecutor(session, {"NOTE": str(note), "FD": fd}).run(code)
    finally:
        os.close(fd)
    session.end_turn()
    await session.close()
    rt.close()
    assert result.stdout == "new\n", result
    assert [c.kind for c in result.calls if c.call.name == "read_note"] == ["miss"]
