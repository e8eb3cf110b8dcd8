"""What one worker owns alone: its IPC, mount, network and PID namespaces, a quota'd scratch file system and a
thread cap (Linux; fails closed where the kernel refuses any of them).

The zygote forks an *isolator* per worker. The isolator (:func:`enter`) creates new IPC, mount, network and
PID namespaces (inside a new user namespace first when it is not privileged) and forks the worker, which is
PID 1 of its own PID namespace and dies with the isolator (``PR_SET_PDEATHSIG``). The worker
(:func:`settle`) then, before anything else runs in it:

* makes every mount private and mounts a tmpfs of ``scratch_bytes`` (and ``scratch_inodes`` files) over its
  scratch directory: whatever the turn writes lives in memory of its own mount namespace, counted against one
  quota for the whole worker, and vanishes with it; the host's disk is never written;
* runs in a user namespace of its own whose *real* user is not the host's root, so ``RLIMIT_NPROC`` caps the
  processes and threads of this worker alone (``max_threads``; the kernel exempts only the host's root);
* keeps System V shared memory, message queues, semaphores and POSIX message queues in an IPC namespace that
  dies with it: nothing it creates outlives it or is seen by another worker, of any tenant.

Any namespace the kernel refuses raises :class:`~.sandbox.IsolationUnavailable` naming it: the pool then turns
code speculation off, saying why (no worker runs with a layer missing).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import select
import socket
from dataclasses import dataclass

from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.sandbox import IsolationUnavailable, libc

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
KINDS = (("ipc", CLONE_NEWIPC), ("mount", CLONE_NEWNS), ("network", CLONE_NEWNET), ("pid", CLONE_NEWPID))
"""The namespaces every worker gets (a user namespace too, see the module docstring)."""
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
UNPRIVILEGED_UID = 65534
"""The real user of a privileged host's worker inside its user namespace (the overflow user)."""
_HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Isolation:
    """The namespaces the isolator created, and whether it is privileged (then the worker makes its own user
    namespace and the isolator, still in the host's, maps a second, unprivileged real user into it)."""

    kinds: tuple[str, ...]
    privileged: bool


def _unshare(flags: int, kind: str) -> None:
    if libc().unshare(flags) != 0:
        code = ctypes.get_errno()
        raise IsolationUnavailable(f"the kernel refused a new {kind} namespace (unshare: {os.strerror(code)})")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter() -> Isolation:
    """In the isolator: new IPC, mount, network and PID namespaces (the next fork is their PID 1)."""
    privileged = libc().unshare(CLONE_NEWIPC) == 0
    kinds: list[str] = []
    if not privileged:  # not the host's root: a user namespace first gives the rights for the others
        uid, gid = os.geteuid(), os.getegid()
        _unshare(CLONE_NEWUSER, "user")
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            raise IsolationUnavailable(f"the user namespace could not be mapped: {exc}") from None
        kinds.append("user")
    for kind, flag in KINDS:
        _unshare(flag, kind)
        kinds.append(kind)
    if privileged:
        kinds.append("user")  # the worker's own, see settle()
    return Isolation(tuple(kinds), privileged)


def assist(isolation: Isolation, worker_pid: int, link: socket.socket) -> None:
    """In the isolator, after forking the worker: map the worker's user namespace when it asks (privileged)."""
    if not isolation.privileged:
        return
    link.settimeout(_HANDSHAKE_TIMEOUT_S)
    try:
        if link.recv(1) != b"u":
            return
        _write(f"/proc/{worker_pid}/uid_map", f"0 0 1\n{UNPRIVILEGED_UID} {UNPRIVILEGED_UID} 1")
        _write(f"/proc/{worker_pid}/gid_map", "0 0 1")
        link.sendall(b"m")
    except OSError:  # the worker finds no answer and reports the isolation unavailable
        return


def settle(isolation: Isolation, scratch: str, limits: ShadowLimits, link: socket.socket) -> None:
    """In the worker (PID 1 of its namespace), before any model code or thread: private mounts, the scratch
    tmpfs, its own user namespace and real user, the thread cap, death with the isolator."""
    lib = libc()
    if lib.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise IsolationUnavailable(f"mounts could not be made private: {os.strerror(ctypes.get_errno())}")
    options = f"size={limits.scratch_bytes},nr_inodes={limits.scratch_inodes},mode=0700".encode()
    if lib.mount(b"tmpfs", scratch.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options) != 0:
        raise IsolationUnavailable(f"the scratch tmpfs could not be mounted: {os.strerror(ctypes.get_errno())}")
    if isolation.privileged:
        _unshare(CLONE_NEWUSER, "user")
        link.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            link.sendall(b"u")
            answer = link.recv(1)
        except OSError as exc:
            raise IsolationUnavailable(f"the user namespace was not mapped: {exc}") from None
        if answer != b"m":
            raise IsolationUnavailable("the user namespace was not mapped")
        os.setresuid(UNPRIVILEGED_UID, 0, 0)  # real user unprivileged: RLIMIT_NPROC holds; files still read as root
    if _real_host_uid() == 0:
        raise IsolationUnavailable("the worker's real user is the host's root, which no thread cap binds")
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_threads, limits.max_threads))
    if lib.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
        raise IsolationUnavailable(f"PR_SET_PDEATHSIG: {os.strerror(ctypes.get_errno())}")
    readable, _, _ = select.select([link], [], [], 0)
    if readable and not link.recv(1):  # the isolator died before the death signal was armed
        os._exit(1)


def _real_host_uid() -> int:
    """This process's real user id as the host sees it (through every user namespace's map)."""
    uid = os.getuid()
    try:
        with open("/proc/self/uid_map") as f:
            for line in f:
                inside, outside, count = (int(x) for x in line.split())
                if inside <= uid < inside + count:
                    return outside + uid - inside
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise IsolationUnavailable(f"the worker's user map is unreadable: {exc}") from None
    return uid
