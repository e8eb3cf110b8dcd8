"""Hostile code streamed through code speculation, by class, many generated variants per class.

Each variant runs in the shadow only (no real run) and must leave no trace in our process or the machine:
no file written or removed, no process started, no connection or datagram, no secret in any speculated
argument, no destructive tool run, no change to our process's global state or output, a responsive event
loop, and only the attacked statement (or, for kernel-stopped bombs, the rest of the turn) skipped. Where
the attack has no lasting effect on the test process, the real run is then compared with plain exec.
The OS boundary (the worker's Landlock, seccomp, network namespace and rlimits) is what stops them.
"""

from __future__ import annotations

import asyncio
import decimal
import itertools
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, ToolLog, make_tools, run_plain, runtime, shadow_only, stream_and_run

_WHY = isolation_available(FAST_LIMITS)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")

WRAPPERS: dict[str, Callable[[str], str]] = {
    "direct": lambda s: s,
    "function": lambda s: "def _go():\n" + _indent(s) + "\n_go()",
    "class_body": lambda s: "class _Body:\n" + _indent(s),
    "swallowed": lambda s: "try:\n" + _indent(s) + "\nexcept BaseException:\n    pass",
    "exec_string": lambda s: f"exec({s!r})",
    "metaclass": lambda s: ("class _Meta(type):\n    def __new__(m, n, b, d):\n" + _indent(s, 8)
                            + "\n        return super().__new__(m, n, b, d)\nclass _K(metaclass=_Meta):\n    pass"),
}


def _indent(code: str, width: int = 4) -> str:
    return "\n".join(" " * width + line for line in code.splitlines())


def _variants(primitives: dict[str, str], wrappers: tuple[str, ...] = tuple(WRAPPERS)) -> list[tuple[str, str]]:
    return [(p, w) for p, w in itertools.product(sorted(primitives), wrappers)]


def _independent_speculated(log: ToolLog) -> bool:
    return any(c[1] == ("independent",) for c in log.calls)


# --- filesystem writes ----------------------------------------------------------------------------

def _fs_primitives(target: Path, victim: Path) -> dict[str, str]:
    t, v = repr(str(target)), repr(str(victim))
    return {
        "open": f"open({t}, 'w').write('x')",
        "os_open": f"import os\nos.close(os.open({t}, os.O_CREAT | os.O_WRONLY))",
        "pathlib": f"import pathlib\npathlib.Path({t}).write_text('x')",
        "mkdir": f"import os\nos.mkdir({t})",
        "symlink": f"import os\nos.symlink('/etc/hostname', {t})",
        "remove_victim": f"import os\nos.remove({v})",
        "truncate_victim": f"open({v}, 'w').close()",
        "rename_victim": f"import os\nos.rename({v}, {t})",
        "sqlite": f"import sqlite3\nsqlite3.connect({t}).execute('create table t (x)')",
    }


@pytest.mark.parametrize(("primitive", "wrapper"), _variants(_fs_primitives(Path("/t"), Path("/v"))))
async def test_filesystem_writes_never_happen(primitive: str, wrapper: str, tmp_path: Path) -> None:
    target, victim = tmp_path / "target", tmp_path / "victim"
    victim.write_text("keep")
    log = ToolLog()
    phase = await shadow_only(WRAPPERS[wrapper](_fs_primitives(target, victim)[primitive]), log)
    assert not target.exists() and not target.is_symlink()
    assert victim.read_text() == "keep"
    assert _independent_speculated(log), phase.notes


# --- process spawn --------------------------------------------------------------------------------

def _spawn_primitives(marker: Path) -> dict[str, str]:
    m = repr(str(marker))
    shell = repr(f"echo x > {marker}")
    return {
        "system": f"import os\nos.system({shell})",
        "popen": f"import os\nos.popen({shell}).read()",
        "subprocess": f"import subprocess\nsubprocess.run(['sh', '-c', {shell}])",
        "posix_spawn": f"import os\nos.posix_spawn('/bin/sh', ['sh', '-c', {shell}], {{}})",
        "fork_then_write": f"import os\nif os.fork() == 0:\n    open({m}, 'w')\n    os._exit(0)",
        "execv": f"import os\nos.execv('/bin/sh', ['sh', '-c', {shell}])",
        "multiprocessing": (f"import multiprocessing\np = multiprocessing.Process(target=open, args=({m}, 'w'))\n"
                            f"p.start()\np.join()"),
    }


@pytest.mark.parametrize(("primitive", "wrapper"),
                         _variants(_spawn_primitives(Path("/m")), ("direct", "function", "swallowed", "exec_string")))
async def test_no_process_is_started(primitive: str, wrapper: str, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    log = ToolLog()
    phase = await shadow_only(WRAPPERS[wrapper](_spawn_primitives(marker)[primitive]), log)
    await asyncio.sleep(0.05)
    assert not marker.exists()
    assert _independent_speculated(log), phase.notes


# --- network ----------------------------------------------------------------------------------------

def _net_primitives(port: int, udp_port: int, unix_path: Path) -> dict[str, str]:
    u = repr(str(unix_path))
    return {
        "create_connection": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1).send(b'x')",
        "socket_connect": f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
        "urllib": f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1)",
        "http_client": (f"import http.client\nc = http.client.HTTPConnection('127.0.0.1', {port}, timeout=1)\n"
                        f"c.request('GET', '/')"),
        "udp": (f"import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                f".sendto(b'x', ('127.0.0.1', {udp_port}))"),
        "unix": f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({u})\ns.send(b'x')",
        "asyncio": (f"import asyncio\nasync def _c():\n    await asyncio.open_connection('127.0.0.1', {port})\n"
                    f"asyncio.run(_c())"),
    }


@pytest.mark.parametrize(("primitive", "wrapper"),
                         _variants(_net_primitives(1, 2, Path("/u")), ("direct", "function", "swallowed")))
async def test_no_connection_or_datagram_leaves_the_worker(primitive: str, wrapper: str, tmp_path: Path) -> None:
    tcp, udp = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unix = socket.socket(socket.AF_UNIX)
    unix_path = tmp_path / "s.sock"
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        udp.bind(("127.0.0.1", 0))
        unix.bind(str(unix_path))
        unix.listen(4)
        for s in (tcp, udp, unix):
            s.setblocking(False)
        code = _net_primitives(tcp.getsockname()[1], udp.getsockname()[1], unix_path)[primitive]
        log = ToolLog()
        phase = await shadow_only(WRAPPERS[wrapper](code), log)
        for listener in (tcp, unix):
            with pytest.raises(BlockingIOError):
                listener.accept()
        with pytest.raises(BlockingIOError):
            udp.recvfrom(16)
        assert _independent_speculated(log), phase.notes
    finally:
        for s in (tcp, udp, unix):
            s.close()


# --- environment and secret reads -----------------------------------------------------------------

SECRET = "s3cr3t-9f1c0a"


def _secret_primitives(secret_file: Path) -> dict[str, str]:
    f = repr(str(secret_file))
    return {
        "environ": "import os\nleak = os.environ.get('FORETHOUGHT_TEST_SECRET', 'none')",
        "getenv": "import os\nleak = str(os.getenv('FORETHOUGHT_TEST_SECRET'))",
        "proc_self": "leak = open('/proc/self/environ').read()",
        "proc_parent": "import os\nleak = open(f'/proc/{os.getppid()}/environ').read()",
        "proc_parent_mem": "import os\nleak = open(f'/proc/{os.getppid()}/cmdline').read()",
        "file": f"leak = open({f}).read()",
        "glob": f"import glob\nleak = str([open(p).read() for p in glob.glob({str(secret_file.parent) + '/*'!r})])",
    }


@pytest.mark.parametrize(("primitive", "wrapper"),
                         _variants(_secret_primitives(Path("/s")), ("direct", "swallowed", "exec_string")))
async def test_secrets_never_reach_a_speculated_call(primitive: str, wrapper: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_TEST_SECRET", SECRET)
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET)
    log = ToolLog()
    code = "leak = 'none'\n" + WRAPPERS[wrapper](_secret_primitives(secret_file)[primitive]) + "\nfetch(str(leak))"
    phase = await shadow_only(code, log)
    assert not any(SECRET in repr(args) for _, args in phase.launched_args)
    assert _independent_speculated(log), phase.notes


# --- a destructive tool -----------------------------------------------------------------------------

FORGE = ("import gc, json, socket, struct\n"
         "chan = [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() >= 0][0]\n"
         "for body in ({'op': 'call', 'id': 10 ** 6, 'tool': 'send', 'args': ['forged'], 'kwargs': {'dict': []},"
         " 'source': 'code-shadow'},):\n"
         "    data = json.dumps(body).encode()\n"
         "    chan.sendall(struct.pack('!I', len(data)) + data)")
DESTRUCTIVE = {
    "direct": "status = send('hello')",
    "alias": "f = send\nstatus = f('hello')",
    "comprehension": "status = [send(str(i)) for i in range(3)]",
    "map": "status = list(map(send, ['a', 'b']))",
    "globals": "status = globals()['send']('hello')",
    "in_class": "class C:\n    def __init__(self):\n        self.s = send('hello')\nstatus = C().s",
    "forged_frame": FORGE + "\nstatus = 'forged'",
}


@pytest.mark.parametrize("name", sorted(DESTRUCTIVE))
async def test_a_destructive_tool_never_runs_before_the_real_call(name: str) -> None:
    log = ToolLog()
    outbox: list[str] = []
    phase = await shadow_only(DESTRUCTIVE[name], log, tools=make_tools(log, outbox=outbox))
    assert "send" not in log.names() and outbox == []
    assert _independent_speculated(log) or name == "forged_frame", phase.notes
    if name == "forged_frame":  # the forged call reached the parent, which refused it
        assert any("send: this tool does not run before the real call" in n for n in phase.notes), phase.notes
    if name != "forged_frame":
        tools, plain_tools = make_tools(outbox=(real := [])), make_tools(outbox=(plain_box := []))
        streamed = await stream_and_run(DESTRUCTIVE[name] + "\nprint(status)", tools)
        plain = await run_plain(DESTRUCTIVE[name] + "\nprint(status)", plain_tools)
        assert streamed.results[0].signature() == plain.signature() and real == plain_box


async def test_garbage_from_the_worker_ends_it_and_the_turn_goes_on() -> None:
    log = ToolLog()
    garbage = ("import gc, socket\n"
               "chan = [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() >= 0][0]\n"
               "chan.sendall(b'\\x00\\x00\\x00\\x05{oops')")
    phase = await shadow_only(garbage, log)
    assert phase.ended is not None and "malformed" in phase.ended
    assert any("ended early" in n for n in phase.notes)
    code = garbage + "\nprint(fetch('x'))"
    streamed = await stream_and_run("x = 1\nprint(fetch('x'))", make_tools())
    assert streamed.results[0].error is None and code


# --- process-global state -----------------------------------------------------------------------------

GLOBAL_STATE: dict[str, tuple[str, str, Callable[[], object]]] = {
    # name: (expression read by the program, statement changing it, how the test reads our process's value)
    "decimal_context": ("decimal.getcontext().prec", "decimal.getcontext().prec = 3",
                        lambda: decimal.getcontext().prec),
    "recursion_limit": ("sys.getrecursionlimit()", "sys.setrecursionlimit(123)", sys.getrecursionlimit),
    "environ": ("os.environ.get('FT_X')", "os.environ['FT_X'] = 'changed'", lambda: os.environ.get("FT_X")),
    "json_dumps": ("json.dumps([1])", "json.dumps = lambda *a, **k: 'patched'", lambda: json.dumps([1])),
    "builtins": ("len('ab')", "import builtins\nbuiltins.len = lambda x: 99", lambda: len("ab")),
    "cwd": ("os.getcwd() == START", "os.chdir('/')", os.getcwd),
    "sys_path": ("len(sys.path) == START_PATH", "sys.path.insert(0, '/evil')", lambda: sys.path[0]),
    "abc_register": ("isinstance(1, collections.abc.Sequence)", "collections.abc.Sequence.register(int)",
                     lambda: isinstance(1, __import__("collections.abc").abc.Sequence)),
    "socket_timeout": ("socket.getdefaulttimeout()", "socket.setdefaulttimeout(1.5)", socket.getdefaulttimeout),
}
_PRELUDE = "import collections.abc, decimal, json, os, socket, sys\nSTART = os.getcwd()\nSTART_PATH = len(sys.path)\n"


@pytest.mark.parametrize("name", sorted(GLOBAL_STATE))
async def test_process_global_state_is_untouched_and_the_real_run_equals_plain(name: str) -> None:
    read, change, ours = GLOBAL_STATE[name]
    before = ours()
    log = ToolLog()
    program = f"{_PRELUDE}print({read})\n{change}\nprint('changed')\n"
    await shadow_only(program, log)
    assert ours() == before
    # the real run: the read happens before the change, exactly as in plain exec (which we run second)
    streamed = await stream_and_run(f"{_PRELUDE}print({read})\n", make_tools())
    plain = await run_plain(f"{_PRELUDE}print({read})\n", make_tools())
    assert streamed.results[0].signature() == plain.signature()
    assert ours() == before


# --- stdout and stderr ------------------------------------------------------------------------------------

OUTPUT = {
    "print": "print('LEAK-OUT')",
    "stderr_print": "import sys\nprint('LEAK-ERR', file=sys.stderr)",
    "sys_stdout": "import sys\nsys.stdout.write('LEAK-OUT')\nsys.stdout.flush()",
    "dunder_stdout": "import sys\nsys.__stdout__.write('LEAK-OUT')\nsys.__stdout__.flush()",
    "fd1": "import os\nos.write(1, b'LEAK-OUT')",
    "fd2": "import os\nos.write(2, b'LEAK-ERR')",
    "dev_tty": "open('/dev/tty', 'w').write('LEAK-TTY')",
    "faulthandler": "import faulthandler, sys\nfaulthandler.dump_traceback(sys.__stderr__)",
}


@pytest.mark.parametrize("name", sorted(OUTPUT))
async def test_nothing_reaches_our_stdout_or_stderr(name: str, capfd: pytest.CaptureFixture[str]) -> None:
    log = ToolLog()
    capfd.readouterr()
    phase = await shadow_only(OUTPUT[name], log)
    out, err = capfd.readouterr()
    assert "LEAK" not in out + err and "Traceback" not in out + err and "File" not in err
    assert _independent_speculated(log), phase.notes


# --- CPU burn -----------------------------------------------------------------------------------------------

BURN_LIMITS = ShadowLimits(statement_cpu_s=0.3, cpu_s=1.0)
CPU_BURN = {
    "python_loop": "while True:\n    pass",
    "swallowed_interrupt": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n"
                           "        pass",
    "big_pow": "x = pow(3, 10 ** 9)",
    "modular_pow_loop": "x = [pow(7, 10 ** 50, 10 ** 4000 + 7) for _ in range(10 ** 6)]",
    "sum_range": "x = sum(range(10 ** 12))",
    "regex": "import re\nx = re.match('(a+)+$', 'a' * 60 + 'b')",
}


@pytest.mark.parametrize("name", sorted(CPU_BURN))
async def test_cpu_burn_leaves_the_loop_and_other_sessions_responsive(name: str) -> None:
    log = ToolLog()
    rt = runtime(make_tools())
    other = rt.session()
    ticks: list[str] = []
    finished = asyncio.Event()

    async def probe() -> None:  # the loop keeps turning while the worker burns
        while not finished.is_set():
            await asyncio.sleep(0.005)
            ticks.append("tick")

    async def authoritative() -> None:
        await asyncio.sleep(0.1)
        ticks.append("other-start")
        from forethought import ToolCall
        await other.execute(ToolCall("lookup", {"key": "abc"}))
        ticks.append("other-done")

    task, probe_task = asyncio.create_task(authoritative()), asyncio.create_task(probe())
    phase = await shadow_only(CPU_BURN[name], log, limits=BURN_LIMITS)
    burn_over = len(ticks)
    finished.set()
    await task
    await probe_task
    await other.close()
    rt.close()
    # ordering, not timing: the other session's call completed, and the loop ticked, while the burn ran
    assert "other-done" in ticks[:burn_over], (ticks[-5:], phase.notes)
    assert ticks[:burn_over].count("tick") >= 10
    python_level = name == "python_loop"  # C-level work holds the worker's GIL: the kernel ends it
    assert _independent_speculated(log) or not python_level, phase.notes
    assert phase.ended is not None or _independent_speculated(log), phase.notes


# --- memory bombs ---------------------------------------------------------------------------------------------

BOMB_LIMITS = ShadowLimits(memory_bytes=384 << 20, statement_cpu_s=2.0, cpu_s=5.0)
MEMORY = {
    "bytearray": "x = bytearray(8 << 30)",
    "list_mul": "x = [0] * (10 ** 10)",
    "str_mul": "x = 'a' * (10 ** 11)",
    "growing": "x = []\nwhile True:\n    x.append(' ' * 10 ** 6)",
    "big_int": "x = 1 << (1 << 36)",
}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("name", sorted(MEMORY))
async def test_memory_bombs_end_the_worker_and_nothing_is_served(name: str) -> None:
    log = ToolLog()
    rss = _rss()
    phase = await shadow_only(MEMORY[name] + "\ny = fetch(str(len(str(x))))", log, limits=BOMB_LIMITS,
                              tail="")
    assert phase.ended is not None, phase.notes
    assert any("ended early" in n for n in phase.notes)
    assert log.calls == []  # nothing depending on the bomb was speculated
    assert _rss() - rss < 64 << 20  # our process did not grow
    streamed = await stream_and_run("z = fetch('after')\nprint(z)", make_tools())
    assert streamed.results[0].error is None and streamed.hits == 1  # the next turn speculates again
