"""What one shadow worker owns alone, attacked by code that has read the worker (issue 27, "IPC outlives the
worker", "unbounded resources", "nothing of sys.path beyond what imports need").

Each program runs in the shadow only and reports what it achieved through the argument of a PURE call (the
only channel out of the worker); the test checks the host afterwards. Every class has several variants.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, ToolLog, shadow_only

_WHY = isolation_available(FAST_LIMITS)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
SECRET = "tenant-a-secret-7c1e"


def _reported(log: ToolLog) -> list[str]:
    """The arguments of the fetch calls a program used to report (the tail's 'independent' left out)."""
    return [c[1][0] for c in log.calls if c[0] == "fetch" and c[1] != ("independent",)]


# --- System V and POSIX IPC ---------------------------------------------------------------------------

_LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
_IPC_WRITERS = {
    "sysv_shm": ("libc.shmat.restype = ctypes.c_void_p\n"
                 "i = libc.shmget(KEY, 4096, 0o1000 | 0o666)\n"
                 "a = libc.shmat(i, None, 0)\n"
                 "ctypes.memmove(a, SECRET.encode(), len(SECRET))\n"),
    "sysv_msg": ("class M(ctypes.Structure):\n    _fields_ = [('t', ctypes.c_long), ('x', ctypes.c_char * 64)]\n"
                 "q = libc.msgget(KEY, 0o1000 | 0o666)\n"
                 "libc.msgsnd(q, ctypes.byref(M(1, SECRET.encode())), 64, 0)\n"),
    "sysv_sem": ("s = libc.semget(KEY, 1, 0o1000 | 0o666)\n"
                 "libc.semctl(s, 0, 16, ctypes.c_int(4242))\n"),
    "posix_mq": ("libc.mq_open.restype = ctypes.c_int\n"
                 "libc.mq_open(NAME, 0o100 | 0o2, 0o666, None)\n"
                 "q = libc.mq_open(NAME, 0o2)\n"
                 "libc.mq_send(q, SECRET.encode(), len(SECRET), 0)\n"),
}
_IPC_READERS = {
    "sysv_shm": ("libc.shmat.restype = ctypes.c_void_p\n"
                 "i = libc.shmget(KEY, 0, 0)\n"
                 "leak = 'none'\n"
                 "if i >= 0:\n    leak = ctypes.string_at(libc.shmat(i, None, 0), 32).decode(errors='replace')\n"),
    "sysv_msg": ("class M(ctypes.Structure):\n    _fields_ = [('t', ctypes.c_long), ('x', ctypes.c_char * 64)]\n"
                 "q = libc.msgget(KEY, 0)\n"
                 "m = M()\n"
                 "leak = m.x.decode() if q >= 0 and libc.msgrcv(q, ctypes.byref(m), 64, 0, 0o4000) > 0 else 'none'\n"),
    "sysv_sem": ("s = libc.semget(KEY, 1, 0)\n"
                 "leak = str(libc.semctl(s, 0, 12)) if s >= 0 else 'none'\n"),
    "posix_mq": ("buf = ctypes.create_string_buffer(8192)\n"
                 "q = libc.mq_open(NAME, 0o4000)\n"
                 "leak = buf.raw[:libc.mq_receive(q, buf, 8192, None)].decode() if q >= 0 else 'none'\n"),
}
def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


_IPC_WRAPPERS = {
    "direct": lambda s: s,
    "function": lambda s: "def _go():\n    global leak\n" + _indent(s) + "\n_go()",
    "swallowed": lambda s: "try:\n" + _indent(s) + "\nexcept BaseException:\n    pass",
}


def _host_sysv_keys() -> set[int]:
    keys: set[int] = set()
    for kind in ("shm", "msg", "sem"):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        keys.update(int(line.split()[0]) for line in lines if line.strip())
    return keys


def _host_mq_exists(name: bytes) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    q = libc.mq_open(name, os.O_RDONLY)
    if q >= 0:
        libc.mq_close(q)
        libc.mq_unlink(name)
        return True
    return False


@pytest.mark.parametrize("wrapper", sorted(_IPC_WRAPPERS))
@pytest.mark.parametrize("kind", sorted(_IPC_WRITERS))
async def test_ipc_objects_die_with_the_worker_and_never_reach_another_tenant(kind: str, wrapper: str) -> None:
    key = random.randrange(1 << 20, 1 << 30)
    name = f"/ft-{key}".encode()
    prelude = _LIBC + f"KEY = {key}\nNAME = {name!r}\nSECRET = {SECRET!r}\nleak = 'none'\n"
    writer = ToolLog()
    await shadow_only(prelude + _IPC_WRAPPERS[wrapper](_IPC_WRITERS[kind]) + "\nfetch('written')", writer)
    assert _reported(writer) == ["written"]  # the writer ran (it did not stop at the attempt)
    assert key not in _host_sysv_keys()
    assert not _host_mq_exists(name)
    reader = ToolLog()  # another runtime, another session: a second tenant's turn
    await shadow_only(prelude + _IPC_WRAPPERS[wrapper](_IPC_READERS[kind]) + "\nfetch(str(leak))", reader)
    assert _reported(reader) == ["none"], _reported(reader)


# --- threads and processes ----------------------------------------------------------------------------

_THREADS = {
    "threading": ("import threading, time\nthreading.stack_size(1 << 16)\nn = 0\ntry:\n    for _ in range(400):\n"
                  "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n"
                  "except BaseException:\n    pass\n"),
    "pthread_create": ("import ctypes\nlibc = ctypes.CDLL(None)\nn = 0\n"
                       "start = ctypes.cast(libc.pause, ctypes.c_void_p)\n"
                       "attr = ctypes.create_string_buffer(64)\nlibc.pthread_attr_init(attr)\n"
                       "libc.pthread_attr_setstacksize(attr, 1 << 16)\n"
                       "for _ in range(400):\n    t = ctypes.c_ulong()\n"
                       "    if libc.pthread_create(ctypes.byref(t), attr, start, None) == 0:\n        n += 1\n"),
    "executor": ("from concurrent.futures import ThreadPoolExecutor\nimport threading, time\n"
                 "threading.stack_size(1 << 16)\nn = 0\n"
                 "pools = [ThreadPoolExecutor(8) for _ in range(60)]\n"
                 "try:\n    for p in pools:\n        for _ in range(8):\n            p.submit(time.sleep, 30)\n"
                 "            n += 1\nexcept BaseException:\n    pass\n"),
    "in_function": ("def spawn():\n    import threading, time\n    threading.stack_size(1 << 16)\n    k = 0\n"
                    "    try:\n        for _ in range(400):\n"
                    "            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                    "            k += 1\n    except BaseException:\n        pass\n    return k\nn = spawn()\n"),
}


@pytest.mark.parametrize("name", sorted(_THREADS))
async def test_a_worker_cannot_start_more_threads_than_its_cap(name: str) -> None:
    log = ToolLog()
    await shadow_only(_THREADS[name] + "fetch(str(n))", log)
    reported = _reported(log)
    assert reported, "the program reported nothing"
    assert int(reported[0]) <= FAST_LIMITS.max_threads, reported


# --- the worker's identity and its death with the isolator stay as they were set ----------------------------

_IDENTITY = {  # each tries to take a privileged real user back (which would lift the thread cap), then counts
    "setresuid": "os.setresuid(0, 0, 0)\n",
    "setreuid": "os.setreuid(0, 0)\n",
    "setuid": "os.setuid(0)\n",
    "raw_syscall": "ctypes.CDLL(None, use_errno=True).syscall(117, 0, 0, 0)\n",
    "setgroups": "os.setgroups([0])\n",
}


@pytest.mark.parametrize("name", sorted(_IDENTITY))
async def test_the_worker_s_real_user_cannot_be_set_back_and_the_thread_cap_holds(name: str) -> None:
    program = ("import os, ctypes\nbefore = os.getresuid()\ntry:\n    " + _IDENTITY[name]
               + "except OSError:\n    pass\nafter = os.getresuid()\n"
               + _THREADS["pthread_create"] + "fetch(str([list(before), list(after), n]))")
    log = ToolLog()
    await shadow_only(program, log)
    reported = _reported(log)
    assert reported, "the program reported nothing"
    before, after, threads = json.loads(reported[0])
    assert after == before and after[0] != 0, reported
    assert threads <= FAST_LIMITS.max_threads, reported


_DEATH = {
    "prctl": "libc.prctl(1, 0, 0, 0, 0)",
    "raw_syscall": "libc.syscall(157, 1, 0, 0, 0, 0)",
}


@pytest.mark.parametrize("name", sorted(_DEATH))
async def test_the_worker_cannot_disarm_its_death_with_the_isolator(name: str) -> None:
    """PR_SET_PDEATHSIG is refused (EPERM) from model code, so what settle() armed on the worker's main thread
    stays armed; other prctl options still work (PR_GET_PDEATHSIG here)."""
    program = (_LIBC + "result = " + _DEATH[name] + "\nerr = ctypes.get_errno()\n"
               "sig = ctypes.c_int(-1)\ngot = libc.prctl(2, ctypes.byref(sig), 0, 0, 0)\n"
               "fetch(str([result, err, got]))")
    log = ToolLog()
    await shadow_only(program, log)
    reported = _reported(log)
    assert reported, "the program reported nothing"
    result, err, got = json.loads(reported[0])
    assert result == -1 and err == 1, reported  # EPERM
    assert got == 0, reported


# --- the scratch area: one quota for the whole worker, nothing on the host's disk --------------------------

_DISK = {
    "many_files": ("n = 0\ntry:\n    for i in range(64):\n        with open(f'f{i}', 'wb') as f:\n"
                   "            f.write(b'x' * (1 << 20))\n        n += 1 << 20\nexcept OSError:\n    pass\n"),
    "one_file_appended": ("n = 0\ntry:\n    with open('grow', 'ab') as f:\n        for i in range(64):\n"
                          "            f.write(b'x' * (1 << 20))\n            f.flush()\n            n += 1 << 20\n"
                          "except OSError:\n    pass\n"),
    "directories": ("import os\nn = 0\ntry:\n    for i in range(64):\n        os.makedirs(f'd{i}/e', exist_ok=True)\n"
                    "        with open(f'd{i}/e/f', 'wb') as f:\n            f.write(b'x' * (1 << 20))\n"
                    "        n += 1 << 20\nexcept OSError:\n    pass\n"),
    "many_inodes": ("n = 0\ntry:\n    for i in range(100000):\n        open(f'i{i}', 'w').close()\n        n += 1\n"
                    "except OSError:\n    pass\n"),
}


@pytest.mark.parametrize("name", sorted(_DISK))
async def test_the_whole_worker_writes_at_most_its_scratch_quota_and_nothing_to_the_host_disk(name: str) -> None:
    log = ToolLog()
    await shadow_only(_DISK[name] + "import os\nfetch(str(n) + ' ' + os.getcwd())", log)
    written, scratch = _reported(log)[0].split(" ", 1)
    if name == "many_inodes":
        assert int(written) <= FAST_LIMITS.scratch_inodes
    else:
        assert int(written) <= FAST_LIMITS.scratch_bytes
    host = Path(scratch)
    assert not host.exists() or list(host.iterdir()) == []  # noqa: ASYNC240 - the host saw no file at all


# --- what the worker may read: imports only ------------------------------------------------------------------

def _import_dirs() -> set[str]:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(os.path.realpath(sysconfig.get_paths()[key]))
        paths.add(os.path.realpath(sysconfig.get_paths(vars={"base": sys.base_prefix,
                                                              "platbase": sys.base_exec_prefix})[key]))
    return paths


_REPOSITORY = Path(__file__).resolve().parent.parent


async def test_of_sys_path_only_what_imports_need_is_readable() -> None:
    log = ToolLog()
    program = ("import json, os, sys\nok = []\nfor p in sys.path + [sys.prefix, sys.base_prefix, os.path.dirname("
               "sys.executable)]:\n    try:\n        os.listdir(p)\n        ok.append(os.path.realpath(p))\n"
               "    except OSError:\n        pass\nfetch(json.dumps(ok))")
    await shadow_only(program, log)
    readable = set(json.loads(_reported(log)[0]))
    allowed = _import_dirs()
    assert readable <= allowed | {p for p in readable if any(p.startswith(a + os.sep) for a in allowed)}, (
        readable - allowed)


_PRIVATE_READS = {
    "repository_file": f"leak = open({str(_REPOSITORY / 'pyproject.toml')!r}).read()[:40]",
    "repository_listing": f"import os\nleak = str(os.listdir({str(_REPOSITORY)!r}))",
    "venv_config": "import sys\nleak = open(sys.prefix + '/pyvenv.cfg').read()",
    "interpreter_dir": "import os, sys\nleak = str(os.listdir(os.path.dirname(sys.executable)))",
    "editable_source": ("import sys, os\nleak = str([os.listdir(p) for p in sys.path if p and 'site-packages' not in p "
                        "and 'python3' not in p])"),
}


@pytest.mark.parametrize("name", sorted(_PRIVATE_READS))
async def test_files_beyond_the_import_path_are_unreadable(name: str) -> None:
    log = ToolLog()
    program = "leak = 'none'\ntry:\n" + _indent(_PRIVATE_READS[name]) + "\nexcept OSError:\n    leak = 'denied'"
    await shadow_only(program + "\nfetch(leak)", log)
    assert _reported(log)[0] in ("denied", "none", "[]"), _reported(log)


# --- facts about itself: its own PID namespace, leftovers of earlier turns ------------------------------

async def test_a_worker_is_pid_1_alone_and_sees_nothing_of_earlier_workers() -> None:
    first = ToolLog()
    await shadow_only(f"import os\nopen('left.txt', 'w').write({SECRET!r})\nfetch(str(os.getpid()))", first)
    assert _reported(first) == ["1"]
    second = ToolLog()
    await shadow_only("import os\ntry:\n    leak = open('left.txt').read()\nexcept OSError:\n    leak = 'none'\n"
                      "fetch(leak + ' ' + str(sorted(os.listdir('.'))))", second)
    assert _reported(second) == ["none []"]


# --- failing closed --------------------------------------------------------------------------------------

def test_a_refused_namespace_fails_closed_and_says_which() -> None:
    """With namespaces forbidden (a seccomp filter refusing unshare, as some containers do), the isolator
    reports the worker unavailable, naming the namespace, and no worker runs."""
    script = (
        "import json, os, socket, sys, tempfile\n"
        f"sys.path.insert(0, {str(_REPOSITORY / 'src')!r})\n"
        "from forethought.code import wire\n"
        "from forethought.code.worker import sandbox, zygote\n"
        "from forethought.code.worker.limits import ShadowLimits\n"
        "a, b = socket.socketpair()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    a.close()\n"
        "    sandbox.libc().prctl(38, 1, 0, 0, 0)\n"
        "    sandbox._seccomp()\n"
        "    os._exit(zygote.launch(b.fileno(), tempfile.gettempdir(), ShadowLimits()))\n"
        "b.close()\n"
        "header = a.recv(4)\n"
        "print(json.dumps(wire.parse(a.recv(wire.frame_length(header, 1 << 16)))))\n"
        "os.waitpid(pid, 0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    message = json.loads(out.stdout)
    assert message["op"] == "unavailable"
    assert "namespace" in message["reason"] and "refused" in message["reason"], message


def test_the_default_limits_cap_threads_and_scratch() -> None:
    limits = ShadowLimits()
    assert limits.max_threads <= 64 and limits.scratch_bytes <= 64 << 20 and limits.scratch_inodes <= 4096
