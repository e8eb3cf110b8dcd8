"""The hostile and tricky program suite (issue 27): 0 side effects before the real run, real run == plain exec.

Each program is streamed into a code turn (the shadow speculates it in its worker), then, before the real run,
the host is checked for any trace of it: the work directory's files, the environment, the working directory,
process state a tool reads (``code_suite.STATE``), System V IPC objects, the outbox of the one destructive
tool. Then the speculative executor runs it for real (claiming the shadow's speculations) and the result is
compared with plain exec of the same blocks **in a fresh process** against a copy of the work directory:
printed output, errors, the authoritative call sequence, the final namespace and the work directory's files.

Programs are written by someone who read the worker. Attacks only the shadow should see are guarded by
``SHADOW`` (the worker is PID 1 of its own PID namespace), so the real run and plain exec skip them alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import code_suite
from forethought import Policy, Runtime
from forethought.code.executor import CodeExecutor
from forethought.code.predictor import CodeMode, CodePredictor
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import isolation_available

LIMITS = ShadowLimits(statement_cpu_s=0.5, cpu_s=4.0, memory_bytes=512 << 20)
_WHY = isolation_available(LIMITS)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")

GUARD = "import os as _os\nSHADOW = _os.getpid() == 1\n"
CHANNEL = GUARD + ("import gc, json, socket, struct\n"
                   "def _send_raw(body):\n"
                   "    for o in gc.get_objects():\n"
                   "        if isinstance(o, socket.socket) and o.fileno() >= 0:\n"
                   "            o.sendall(struct.pack('!I', len(body)) + body)\n"
                   "            return\n"
                   "def _call(i, args, tool='fetch'):\n"
                   "    _send_raw(json.dumps({'op': 'call', 'id': 10 ** 6 + i, 'tool': tool, 'args': args, "
                   "'kwargs': {'dict': []}, 'source': 'code-shadow'}).encode())\n")
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
P = (1 << 61) - 1
TAIL = "\nprint(fetch('after'), lookup('tail'))\n"

PROGRAMS: dict[str, list[str]] = {
    # --- IPC: nothing a shadow creates outlives it or reaches the host -------------------------------
    "ipc_shm_roundtrip": [LIBC + "i = libc.shmget(0, 64, 0o1000 | 0o600)\na = libc.shmat(i, None, 0)\n"
                                 "ctypes.memmove(a, b'hello', 5)\nprint(ctypes.string_at(a, 5))\n"
                                 "libc.shmdt(ctypes.c_void_p(a))\nlibc.shmctl(i, 0, None)\ndel i, a" + TAIL],
    "ipc_msg_roundtrip": [LIBC + "class M(ctypes.Structure):\n"
                                 "    _fields_ = [('t', ctypes.c_long), ('x', ctypes.c_char * 8)]\n"
                                 "q = libc.msgget(0, 0o1000 | 0o600)\nlibc.msgsnd(q, ctypes.byref(M(1, b'hi')), 8, 0)\n"
                                 "m = M()\nlibc.msgrcv(q, ctypes.byref(m), 8, 0, 0)\nprint(m.x)\n"
                                 "libc.msgctl(q, 0, None)\ndel q, m"
                          + TAIL],
    "ipc_sem_roundtrip": [LIBC + "s = libc.semget(0, 1, 0o1000 | 0o600)\nlibc.semctl(s, 0, 16, ctypes.c_int(7))\n"
                                 "print(libc.semctl(s, 0, 12))\nlibc.semctl(s, 0, 0)\ndel s" + TAIL],
    "ipc_shadow_shm_key": [GUARD + LIBC + "KEY = 0x5EC2E7\nif SHADOW:\n    i = libc.shmget(KEY, 64, 0o1000 | 0o666)\n"
                                          "    ctypes.memmove(libc.shmat(i, None, 0), b'secret', 6)\n"
                                          "j = libc.shmget(KEY, 0, 0)\nleak = 'none' if j < 0 else "
                                          "ctypes.string_at(libc.shmat(j, None, 0), 6).decode()\nprint(fetch(leak))"],
    "ipc_shadow_msg_key": [GUARD + LIBC + "KEY = 0x5EC2E8\nif SHADOW:\n    libc.msgget(KEY, 0o1000 | 0o666)\n"
                                          "q = libc.msgget(KEY, 0)\nprint(fetch('leaked' if q >= 0 else 'none'))"],
    "ipc_posix_mq": [LIBC + "libc.mq_open.restype = ctypes.c_int\n"
                            "q = libc.mq_open(b'/ft-suite', 0o100 | 0o2, 0o600, None)\n"
                            "libc.mq_send(q, b'mq', 2, 0)\nb = ctypes.create_string_buffer(8192)\n"
                            "n = libc.mq_receive(q, b, 8192, None)\nprint(b.raw[:n])\nlibc.mq_close(q)\n"
                            "libc.mq_unlink(b'/ft-suite')\ndel q, b, n" + TAIL],
    # --- the channel: frames of the program's own -----------------------------------------------------
    "chan_colliding_set": [CHANNEL + f"if SHADOW:\n    _call(1, [{{'set': [k * {P} for k in range(15000)]}}])" + TAIL],
    "chan_colliding_dict": [CHANNEL + f"if SHADOW:\n    _call(1, [{{'dict': [[k * {P}, 0] for k in range(6000)]}}])"
                            + TAIL],
    "chan_too_many_values": [CHANNEL + "if SHADOW:\n    _send_raw(b'[' + b'0,' * 300000 + b'0]')" + TAIL],
    "chan_garbage": [CHANNEL + "if SHADOW:\n    _send_raw(b'{not json')" + TAIL],
    "chan_forged_destructive": [CHANNEL + "if SHADOW:\n    _call(1, ['forged'], tool='send')" + TAIL],
    "chan_call_flood": [CHANNEL + "if SHADOW:\n    for i in range(1500):\n        _call(i, [f'flood-{i}'])" + TAIL],
    # --- resources -------------------------------------------------------------------------------------------
    "res_threads": [GUARD + "import threading, time\nthreading.stack_size(1 << 16)\nn = 0\nif SHADOW:\n    try:\n"
                            "        for _ in range(2000):\n"
                            "            threading.Thread(target=time.sleep, args=(20,), daemon=True).start()\n"
                            "            n += 1\n    except RuntimeError:\n        pass\nprint(fetch('t'))" + TAIL],
    "res_pthreads": [GUARD + "import ctypes\nif SHADOW:\n    libc = ctypes.CDLL(None)\n"
                             "    start = ctypes.cast(libc.pause, ctypes.c_void_p)\n    for _ in range(2000):\n"
                             "        libc.pthread_create(ctypes.byref(ctypes.c_ulong()), None, start, None)\n"
                             "print(fetch('p'))" + TAIL],
    "res_disk_fill": [GUARD + "if SHADOW:\n    try:\n        for i in range(400):\n"
                              "            open(f'fill{i}', 'wb').write(b'x' * (1 << 20))\n    except OSError:\n"
                              "        pass\nprint(fetch('d'))" + TAIL],
    "res_inode_fill": [GUARD + "if SHADOW:\n    try:\n        for i in range(100000):\n"
                               "            open(f'i{i}', 'w').close()\n    except OSError:\n        pass\n"
                               "print(fetch('i'))" + TAIL],
    "res_memory_bomb": [GUARD + "x = bytearray(8 << 30) if SHADOW else b''\nprint(fetch(str(len(x))))" + TAIL],
    "res_cpu_burn": [GUARD + "n = 0\nwhile SHADOW:\n    n += 1\nprint(fetch('c'))" + TAIL],
    # --- effects the shadow cannot model: the real run reads what plain exec reads ---------------------
    "fx_write_then_read": ["open(f'{WORK}/notes.txt', 'w').write('new')\nprint(read_text('notes.txt'))"],
    "fx_pathlib_then_read": ["import pathlib\npathlib.Path(WORK, 'notes.txt').write_text('via pathlib')\n"
                             "r = read_text('notes.txt')\nprint(r)"],
    "fx_append_then_read": ["with open(f'{WORK}/notes.txt', 'a') as f:\n    f.write('+more')\n"
                            "print(read_text('notes.txt'))"],
    "fx_remove_then_exists": ["import os\nos.remove(f'{WORK}/victim.txt')\nprint(exists('victim.txt'))"],
    "fx_rename_then_read": ["import os\nos.rename(f'{WORK}/victim.txt', f'{WORK}/moved.txt')\n"
                            "print(read_text('moved.txt'), read_text('victim.txt'))"],
    "fx_mkdir_then_exists": ["import os\nos.mkdir(f'{WORK}/sub')\nprint(exists('sub'))"],
    "fx_env_set_then_read": ["import os\nos.environ['FT_SUITE_VAR'] = 'set by code'\nprint(env('FT_SUITE_VAR'))"],
    "fx_env_del_then_read": ["import os\nos.environ.pop('FT_SUITE_PRESET', None)\nprint(env('FT_SUITE_PRESET'))"],
    "fx_chdir_relative": ["import os\nos.chdir(WORK)\nopen('rel.txt', 'w').write('relative')\n"
                          "print(read_text('rel.txt'))"],
    "fx_subprocess_write": ["import subprocess\nsubprocess.run(['sh', '-c', f'echo from-shell > {WORK}/notes.txt'])\n"
                            "print(read_text('notes.txt'))"],
    "fx_sqlite_then_exists": ["import sqlite3\nc = sqlite3.connect(f'{WORK}/db.sqlite')\n"
                              "c.execute('create table t (x)')\n"
                              "c.commit()\nc.close()\nprint(exists('db.sqlite'))"],
    "fx_module_state": ["import code_suite\ncode_suite.STATE['mode'] = 'changed'\nprint(config('mode'))"],
    "fx_module_update": ["import code_suite\ncode_suite.STATE.update(mode='updated')\nprint(config('mode'))"],
    "fx_ctypes_write": ["import ctypes, os\nlibc = ctypes.CDLL(None)\n"
                        "fd = os.open(f'{WORK}/notes.txt', os.O_WRONLY | os.O_TRUNC)\n"
                        "libc.write(fd, b'by ctypes', 9)\nos.close(fd)\ndel fd\nprint(read_text('notes.txt'))"],
    "fx_read_write_read_one_statement": ["print(read_text('notes.txt'), open(f'{WORK}/notes.txt', 'w').write('new'), "
                                         "read_text('notes.txt'))"],
    "fx_in_function": ["def save(text):\n    with open(f'{WORK}/notes.txt', 'w') as f:\n        f.write(text)\n"
                       "before = read_text('notes.txt')\nsave('from a function')\nafter = read_text('notes.txt')\n"
                       "print(before, after)"],
    "fx_in_loop": ["for i in range(3):\n    open(f'{WORK}/n{i}.txt', 'w').write(str(i))\n"
                   "    print(read_text(f'n{i}.txt'))"],
    "fx_reads_stay_pure": ["open(f'{WORK}/notes.txt', 'w').write('changed')\n"
                           "print(fetch('pure'), read_text('notes.txt'))"],
    "fx_across_blocks": ["open(f'{WORK}/notes.txt', 'w').write('block one')", "print(read_text('notes.txt'))"],
    "fx_send_then_read": ["print(send('hello'))\nprint(read_text('outbox.txt'))"],
    # --- __builtins__ rebound or deleted -----------------------------------------------------------------------
    "bi_rebind_dict": ["a = fetch('x')\n__builtins__ = {}\nb = fetch('y')\nprint(a, b, __builtins__)"],
    "bi_delete": ["del __builtins__\nprint(len('abc'), 'x' in globals())"],
    "bi_functools_wraps": ["import functools, json\ndef f():\n    pass\n"
                           "functools.wraps(json.dumps, updated=('__globals__',))(f)\nprint('after', fetch('x'))"],
    "bi_rebind_module": ["import builtins\n__builtins__ = builtins\nprint(fetch('z'))"],
    "bi_def_after_rebind": ["__builtins__ = {'len': len}\ndef g():\n    return len('ab')\ndef h():\n    return print\n"
                            "print(g())\ntry:\n    h()\nexcept NameError as e:\n    print('NameError', e)"],
    "bi_globals_rebind": ["globals()['__builtins__'] = {}\nx = fetch('q')\nprint(x)"],
    "bi_across_blocks": ["__builtins__ = {}", "print(fetch('k'))"],
    "bi_mutated": ["__builtins__['len'] = lambda x: 99\nprint(len('ab'), fetch('m'))"],
    "bi_no_names_of_ours": ["print(sorted(k for k in __builtins__ if k.startswith('__f')), "
                            "sorted(k for k in globals() if k.startswith('__f')))"],
    # --- placeholders never reach a value the program keeps ---------------------------------------------
    "ph_issue_example": ["a = fetch('x')\no = fetch('k')\nresult = {'a': a, 'o': o['url']}\nimport json\n"
                         "print(json.dumps(result))"],
    "ph_aliases": ["a = fetch('a')\nxs = [a]\nys = xs\nd = {'k': ys}\nimport json\nprint(json.dumps(d), ys is xs)"],
    "ph_tuple_identity": ["t = (fetch('a'), fetch('b'))\nu = t\nbox = [t]\nprint(box[0] is u, t is u, type(t[0]))"],
    "ph_set_members": ["s = {lookup('abc'), lookup('de')}\ns2 = s\nprint(sorted(s2), s is s2)"],
    "ph_closure": ["r = fetch('a')\ndef f():\n    return r['url']\nprint(f())"],
    "ph_attribute": ["class B:\n    pass\nb = B()\nb.v = fetch('z')\nimport json\nprint(json.dumps(b.v))"],
    "ph_default_argument": ["v = fetch('d')\ndef g(x=v):\n    return x\nimport json\nprint(json.dumps(g()))"],
    "ph_generator_kept": ["xs = [fetch('a')]\ng = (x for x in xs)\nprint(type(next(g)).__name__)"],
    "ph_nested_containers": ["a = fetch('1')\nb = fetch('2')\ndeep = {'l': [a, (b, {a['url']})], 'd': {'k': [b]}}\n"
                             "import json\nprint(json.dumps(deep, default=sorted))"],
    # --- running ahead of a call that raises --------------------------------------------------------------------
    "ra_error_then_cpu": ["a = lookup('bad1')\nn = 0\nwhile n < 3000000:\n    n += 1\nprint(n)"],
    "ra_error_then_memory": ["a = lookup('bad2')\nbig = 'x' * (10 ** 9)\nprint(len(big))"],
    "ra_error_then_range_sum": ["a = lookup('bad3')\ns = sum(range(10 ** 11))\nprint(s)"],
    "ra_error_then_pow": ["a = lookup('bad4')\np = 7 ** (10 ** 8)\nprint(p % 10)"],
    "ra_error_then_format_width": ["a = lookup('bad5')\ns = f'{1:>1000000000}'\nprint(len(s))"],
    "ra_error_then_shift": ["a = lookup('bad6')\nx = 1 << (1 << 34)\nprint(x & 1)"],
    "ra_many_pending": ["xs = [fetch(str(i)) for i in range(600)]\nprint(len(xs), xs[-1])"],
    "ra_error_in_loop": ["out = []\nfor k in ['a', 'bb', 'bad7', 'ccc']:\n    out.append(lookup(k))\nprint(out)"],
    # --- errors read as plain exec's --------------------------------------------------------------------------
    "err_attribute_of_tool": ["try:\n    fetch.missing\nexcept AttributeError as e:\n    print(e)"],
    "err_len_of_tool": ["try:\n    len(fetch)\nexcept TypeError as e:\n    print(e)"],
    "err_missing_argument": ["try:\n    fetch()\nexcept TypeError as e:\n    print(e)"],
    "err_repr_and_type": ["print(repr(fetch), type(fetch).__name__, callable(fetch))"],
    "err_result_not_callable": ["x = fetch('a')\ntry:\n    x()\nexcept TypeError as e:\n    print(e)"],
    "err_tool_plus_one": ["try:\n    fetch + 1\nexcept TypeError as e:\n    print(e)"],
    "err_uncaught_tool_error": ["a = fetch('a')\nb = lookup('bad8')\nprint(a, b)"],
    # --- tricky but honest -----------------------------------------------------------------------------------------
    "tr_tuple_vs_list": ["print(echo((1, 2)), echo([1, 2]), echo({'k': (1,)}), echo(2 ** 64 + 1), echo(3.0))"],
    "tr_set_argument": ["print(echo({3, 1}), echo(frozenset({'x'})))"],
    "tr_mutate_result": ["r = fetch('abc')\nr['url'] = 'changed'\nprint(fetch(r['url']))"],
    "tr_list_passed_then_mutated": ["xs = ['a']\nv = echo(xs)\nxs.append('b')\nw = echo(xs)\nprint(v, w)"],
    "tr_conditional": ["r = fetch('check')\nif r['n'] > 3:\n    out = fetch('big')\nelse:\n"
                       "    out = fetch('small')\nprint(out)"],
    "tr_paging_while": ["page = 1\nfound = []\nwhile page <= 4:\n    found.append(fetch(f'page-{page}'))\n"
                        "    page += 1\n"
                        "print(len(found), found[-1])"],
    "tr_class_holding_results": ["class Box:\n    def __init__(self, v):\n        self.v = v\n"
                                 "boxes = [Box(fetch(str(i))) for i in range(3)]\nprint([b.v['url'] for b in boxes])"],
    "tr_multi_block": ["names = ['a', 'b']", "docs = [fetch(n) for n in names]", "print(docs)"],
    "tr_try_tool_error": ["try:\n    v = lookup('bad9')\nexcept KeyError as e:\n    v = f'missing {e}'\n"
                          "print(v, lookup('ok'))"],
    "tr_reads_around_a_write": ["a = read_text('notes.txt')\nprint(send('x'))\nb = read_text('outbox.txt')\n"
                                "print(a, b)"],
    # --- the older classes, kept ---------------------------------------------------------------------------------
    "old_read_etc": ["print(fetch(str(len(open('/etc/hostname').read()) > 0)))"],
    "old_env_secret": ["import os\nprint(fetch(str('FT_SUITE_PRESET' in os.environ)))"],
    "old_process": [GUARD + "import os\ncode = os.system('true') if not SHADOW else 0\nprint(fetch(str(code)))"],
    "old_write_outside": [GUARD + "import tempfile\nif SHADOW:\n    try:\n        open('/tmp/ft-suite-escape', 'w')\n"
                                  "    except OSError:\n        pass\nprint(fetch('w'))"],
}


def _message(blocks: list[str]) -> str:
    return "Running it.\n" + "".join(f"```python\n{code}\n```\n" for code in blocks)


def _seed(work: Path) -> None:
    work.mkdir()
    (work / "notes.txt").write_text("old")
    (work / "victim.txt").write_text("keep")


def _tree(work: Path) -> dict[str, str]:
    return {str(p.relative_to(work)): p.read_text(errors="replace") for p in sorted(work.rglob("*")) if p.is_file()}


def _sysv_keys() -> set[str]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        try:
            keys.update(f"{kind}:{line.split()[0]}:{line.split()[1]}"
                        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:] if line.strip())
        except OSError:
            continue
    return keys


def _host_state(work: Path) -> dict[str, Any]:
    return {"files": _tree(work), "env": dict(os.environ), "cwd": os.getcwd(), "state": dict(code_suite.STATE),
            "ipc": _sysv_keys(), "escape": Path("/tmp/ft-suite-escape").exists()}


def _plain_in_fresh_process(blocks: list[str], work: Path, cwd: str, environ: dict[str, str]) -> dict[str, Any]:
    env = dict(environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(code_suite.__file__).parent),
                                         str(Path(code_suite.__file__).parent.parent / "src")])
    job = json.dumps({"blocks": blocks, "work": str(work), "cwd": cwd})
    out = subprocess.run([sys.executable, "-c", "import code_suite; code_suite.plain_main()"], input=job,
                         capture_output=True, text=True,
                         timeout=120, env=env, check=False)
    marker = out.stdout.rfind("@@SIGNATURE@@")
    assert marker >= 0, out.stderr[-2000:]
    signature: dict[str, Any] = json.loads(out.stdout[marker + len("@@SIGNATURE@@"):])
    return signature


@pytest.fixture
def restored() -> Any:
    env, cwd = dict(os.environ), os.getcwd()
    os.environ["FT_SUITE_PRESET"] = "preset"
    yield
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    code_suite.STATE.clear()
    code_suite.STATE.update(code_suite.INITIAL_STATE)


def test_the_suite_has_at_least_sixty_programs() -> None:
    assert len(PROGRAMS) >= 60


@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_no_side_effect_before_the_real_run_and_the_real_run_equals_plain_exec(
        name: str, tmp_path: Path, restored: Any) -> None:
    blocks = PROGRAMS[name]
    real_work, plain_work = tmp_path / "real", tmp_path / "plain"
    _seed(real_work)
    _seed(plain_work)
    cwd = os.getcwd()
    tools = code_suite.suite_tools(str(real_work))
    runtime = Runtime(tools, Policy(max_concurrent=32, max_concurrent_per_session=32, max_calls_per_turn=256,
                                    max_cost_per_turn=1024.0))
    session = runtime.session()
    namespace: dict[str, Any] = {"WORK": str(real_work)}
    before = _host_state(real_work)
    turn = CodePredictor(mode=CodeMode.AUTO, limits=LIMITS).begin(session, namespace)
    message = _message(blocks)
    for i in range(0, len(message), 7):
        turn.feed(message[i:i + 7])
        await asyncio.sleep(0)
    turn.finish()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while loop.time() < deadline and not turn.idle:
        await turn.settle(0.2)
    await session.wait_speculations(5.0)
    assert _host_state(real_work) == before, f"{name}: a side effect before the real run"
    executor = CodeExecutor(session, namespace, link=turn.link)
    results = [await executor.run(code) for code in blocks]
    await turn.close()
    session.end_turn()
    await session.close()
    runtime.close()
    real = code_suite.signature(results, namespace, str(real_work))
    os.chdir(cwd)
    plain = _plain_in_fresh_process(blocks, plain_work, cwd, before["env"])
    assert real == plain, name
