"""OS isolation of the shadow worker: Landlock, seccomp, rlimits (Linux, unprivileged).

:func:`confine` is called once, in the worker process, before it runs any model code and before it starts
any thread (every layer is inherited by threads created later), after :mod:`.namespaces` has put the worker
in namespaces of its own. Each layer stops one class of escape:

* **rlimits** (address space, CPU seconds, file size, open files, core dumps): memory and CPU bombs end in a
  ``MemoryError`` or the kernel killing the worker; no file grows past a few MiB.
* **no_new_privs + seccomp** (a BPF filter written here): ``execve``/``execveat``, ``fork``/``vfork``/``clone``
  without ``CLONE_THREAD`` (``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``), every new
  socket (``socket``, ``socketpair``; so no TCP, UDP or Unix connection), ``connect``/``bind``/``listen``/
  ``accept``, signals (``kill``, ``tkill``, ``tgkill``, ``pidfd_*``), ``ptrace``, ``process_vm_*``, namespace,
  mount, keyring, BPF, perf and io_uring calls fail with ``EPERM``, and so do every ``set*id`` call and
  ``capset`` (the real user made unprivileged stays so) and ``prctl(PR_SET_PDEATHSIG)`` (the worker dies with
  its isolator). Only the inherited IPC socket remains.
* **Landlock**: the filesystem is read-only where imports need it (the standard library and the
  site-packages directories, system libraries, time-zone data, ``/dev/null`` and ``/dev/urandom``), invisible
  elsewhere (no ``/etc``, ``/proc``, home directories, the repository, other ``sys.path`` entries such as
  editable checkouts), writable only inside the turn's scratch tmpfs; no TCP bind or connect (ABI 4); no
  signals or abstract Unix sockets outside the sandbox (ABI 6).

The parent additionally scrubs the environment, closes every file descriptor but the channel, points
stdin/stdout/stderr at ``/dev/null`` and kills the worker after a wall-clock limit.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import struct
import sys
import sysconfig
from dataclasses import dataclass

from forethought.code.worker.limits import ShadowLimits

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SYS = {"x86_64": {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446}}

# Landlock (include/uapi/linux/landlock.h)
_LL_CREATE_RULESET_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_FS = {name: 1 << bit for bit, name in enumerate((
    "execute", "write_file", "read_file", "read_dir", "remove_dir", "remove_file", "make_char", "make_dir",
    "make_reg", "make_sock", "make_fifo", "make_block", "make_sym", "refer", "truncate", "ioctl_dev"))}
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_ALL = 0b11  # bind_tcp, connect_tcp (ABI 4)
_SCOPE_ALL = 0b11  # abstract unix sockets, signals (ABI 6)
_READ = _FS["read_file"] | _FS["read_dir"]

# seccomp / BPF (x86_64 syscall numbers)
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_DENIED_X86_64 = {
    "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "socket": 41, "socketpair": 53, "connect": 42,
    "bind": 49, "listen": 50, "accept": 43, "accept4": 288, "kill": 62, "tkill": 200, "tgkill": 234,
    "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272,
    "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "keyctl": 250,
    "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323, "personality": 135, "acct": 163,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "fanotify_init": 300, "mknod": 133, "mknodat": 259,
    # identities: the worker's real user was made unprivileged before the filter (namespaces.settle) and must
    # stay so (its effective user may be root in its own namespace, which could set the real one back)
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setgroups": 116, "setresuid": 117,
    "setresgid": 119, "setfsuid": 122, "setfsgid": 123, "capset": 126,
}
_SYS_CLONE, _SYS_CLONE3, _SYS_PRCTL = 56, 435, 157
_PR_SET_PDEATHSIG = 1
"""prctl option refused after the filter: the worker's death with its isolator, armed before, stays armed."""


class IsolationUnavailable(RuntimeError):
    """A layer the worker needs is missing here (another OS, an old kernel, a container forbidding it)."""


@dataclass(frozen=True, slots=True)
class Confinement:
    """Which layers are in force in a worker (reported to the parent)."""

    landlock_abi: int
    seccomp: bool
    namespaces: tuple[str, ...]
    rlimits: bool
    scratch_bytes: int
    max_threads: int


_LIBC: list[ctypes.CDLL] = []


def libc() -> ctypes.CDLL:
    if not _LIBC:  # the C library the interpreter is linked against (no search, no helper processes)
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    if sys.platform != "linux" or platform.machine() not in _SYS:
        return 0
    lib = libc()
    number = _SYS[platform.machine()]["landlock_create_ruleset"]
    version = lib.syscall(number, None, ctypes.c_size_t(0), ctypes.c_uint32(_LL_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise IsolationUnavailable(f"{what}: {os.strerror(code)}")
    return result


def _landlock(scratch: str, readable: list[str], abi: int) -> None:
    lib = libc()
    numbers = _SYS[platform.machine()]
    handled_fs = _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= abi)]
    attr = struct.pack("=QQQ", handled_fs, _NET_ALL if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(lib.syscall(numbers["landlock_create_ruleset"], buf, ctypes.c_size_t(size),
                                  ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        rules = [(path, _READ) for path in readable] + [(scratch, handled_fs & ~_FS["execute"])]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    access &= _FS["read_file"] | _FS["write_file"] | _FS["truncate"] | _FS["execute"]
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access & handled_fs, fd), 12)
                _check(lib.syscall(numbers["landlock_add_rule"], ctypes.c_int(ruleset),
                                    ctypes.c_int(_LL_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)),
                       f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(lib.syscall(numbers["landlock_restrict_self"], ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def seccomp_program() -> bytes:
    """The BPF filter (x86_64): deny the listed system calls, threads-only ``clone``, allow the rest."""
    denied = sorted(set(_DENIED_X86_64.values()))
    head = [_bpf(_LD_W_ABS, 4), _bpf(_JEQ_K, _AUDIT_ARCH_X86_64, 1, 0), _bpf(_RET_K, _RET_KILL_PROCESS),
            _bpf(_LD_W_ABS, 0), _bpf(_JGE_K, _X32_BIT, 0, 1), _bpf(_RET_K, _RET_KILL_PROCESS)]
    numbers = [*denied, _SYS_CLONE3, _SYS_CLONE, _SYS_PRCTL]
    # the checks jump forward into the tail: [ALLOW, EPERM, ENOSYS, clone: load flags, test, ALLOW, EPERM,
    # prctl: load option, test, ALLOW, EPERM]
    targets = [1] * len(denied) + [2, 3, 7]
    checks = [_bpf(_JEQ_K, number, len(numbers) - i - 1 + target, 0)
              for i, (number, target) in enumerate(zip(numbers, targets, strict=True))]
    tail = [_bpf(_RET_K, _RET_ALLOW), _bpf(_RET_K, _RET_ERRNO | errno.EPERM),
            _bpf(_RET_K, _RET_ERRNO | errno.ENOSYS),
            _bpf(_LD_W_ABS, 16), _bpf(_JSET_K, _CLONE_THREAD, 0, 1), _bpf(_RET_K, _RET_ALLOW),
            _bpf(_RET_K, _RET_ERRNO | errno.EPERM),
            _bpf(_LD_W_ABS, 16), _bpf(_JEQ_K, _PR_SET_PDEATHSIG, 1, 0), _bpf(_RET_K, _RET_ALLOW),
            _bpf(_RET_K, _RET_ERRNO | errno.EPERM)]
    return b"".join(head + checks + tail)


def _seccomp() -> None:
    if platform.machine() != "x86_64":
        raise IsolationUnavailable(f"no seccomp filter for {platform.machine()}")
    lib = libc()
    program = seccomp_program()
    count = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(count, ctypes.addressof(buf))
    _check(lib.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _rlimits(limits: ShadowLimits) -> None:
    cpu = max(1, int(limits.cpu_s))
    for which, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_CPU, cpu),
                         (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NOFILE, limits.open_files),
                         (resource.RLIMIT_CORE, 0)):
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU first, then SIGKILL
        resource.setrlimit(which, (value, hard))


def readable_paths() -> list[str]:
    """Where the worker may read: what imports need (the standard library, its extension modules, the
    site-packages directories), system libraries, time zones, ``/dev/null`` and ``/dev/urandom``. Not the
    interpreter's prefixes as a whole, nor other ``sys.path`` entries (the working directory, editable
    checkouts such as the repository itself)."""
    paths = {"/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/dev/null", "/dev/urandom"}
    for scheme in {sysconfig.get_default_scheme(), *(("venv",) if sys.prefix != sys.base_prefix else ())}:
        try:
            scheme_paths = sysconfig.get_paths(scheme)
        except KeyError:
            continue
        paths.update(scheme_paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix}).get(key, "")
                 for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(p for p in sys.path if p.endswith(".zip"))  # the zipped standard library, when there is one
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})


def confine(scratch: str, limits: ShadowLimits, namespaces: tuple[str, ...]) -> Confinement:
    """Apply every layer to this (single-threaded) process; raises :class:`IsolationUnavailable`."""
    abi = landlock_abi()
    if abi < max(1, limits.min_landlock_abi):
        raise IsolationUnavailable(f"Landlock ABI {abi} is below the {max(1, limits.min_landlock_abi)} the "
                                   f"shadow worker needs (Linux 5.13+ with Landlock enabled)")
    os.nice(19)
    _rlimits(limits)
    _check(libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _landlock(scratch, readable_paths(), abi)
    _seccomp()
    return Confinement(landlock_abi=abi, seccomp=True, namespaces=namespaces, rlimits=True,
                       scratch_bytes=limits.scratch_bytes, max_threads=limits.max_threads)
