"""Pre-started shadow workers: a turn takes a confined, ready process, so no process start is on its path.

A background thread keeps ``spares`` workers started and confined. :meth:`WorkerPool.acquire` hands one over
(a future: done at once when a spare is ready). Every worker serves one turn and is then killed and its
scratch directory removed, so nothing a turn's code does survives into another turn. The first worker that
reports its isolation unavailable turns code speculation off for the pool, with one warning.

Workers start from a clean environment: ``python -I`` (no ``PYTHON*`` variables, no user site), an empty
environment but ``LC_ALL``, stdin/stdout/stderr on ``/dev/null``, only the channel's descriptor inherited, a
new session (no terminal signals), and the scratch directory as the only writable place.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from forethought.code import wire
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.zygote import send_with_fd

log = logging.getLogger("forethought.code")

READY_TIMEOUT_S = 20.0
CLOSE_GRACE_S = 2.0
_BOOTSTRAP = (
    "import sys, types\n"
    "for name, path in (('forethought', sys.argv[1]), ('forethought.code', sys.argv[2])):\n"
    "    module = types.ModuleType(name); module.__path__ = [path]; sys.modules[name] = module\n"
    "from forethought.code.worker.entry import main\n"
    "main(sys.argv[3:])\n")
"""Imports the worker's modules without the package's public surface (no runtime, no clients)."""


@dataclass(eq=False)
class WorkerProcess:
    """One started, confined worker and the parent's end of its channel."""

    sock: socket.socket
    pid: int
    scratch: str
    confinement: dict[str, Any]
    start_s: float
    """Seconds from the fork request to ``ready`` (off the turn's path when the worker was a spare)."""
    killer: Callable[[int], None]
    killed: bool = field(default=False)

    def kill(self) -> None:
        """Kill the process (SIGKILL, by the zygote that owns it); the zygote removes its scratch directory."""
        if self.killed:
            return
        self.killed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.killer(self.pid)


def _environment() -> dict[str, str]:
    return {"LC_ALL": "C.UTF-8"}


class Zygote:
    """The pool's fork server process (see :mod:`.zygote`)."""

    def __init__(self, limits: ShadowLimits) -> None:
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.control, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-I", "-c", _BOOTSTRAP, package, os.path.join(package, "code"), "zygote",
                str(child.fileno()), json.dumps(asdict(limits))]
        try:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, pass_fds=(child.fileno(),),
                                            env=_environment(), cwd="/", start_new_session=True)
        finally:
            child.close()
        self.control.settimeout(READY_TIMEOUT_S)
        self._lock = threading.Lock()

    def fork(self, scratch: str) -> tuple[socket.socket, int]:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                send_with_fd(self.control, {"op": "fork", "scratch": scratch}, child.fileno())
                message = wire.parse(_read(self.control, wire.frame_length(_read(self.control, wire.HEADER_SIZE),
                                                                           1 << 16)))
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        pid = message.get("pid")
        if message.get("op") != "forked" or type(pid) is not int:
            parent.close()
            raise EOFError("the zygote did not fork")
        return parent, pid

    def kill(self, pid: int) -> None:
        try:
            with self._lock:
                self.control.sendall(wire.frame({"op": "kill", "pid": pid}))
        except OSError:
            pass

    def close(self) -> None:
        """Close the control socket: the zygote kills its children, removes their scratch directories and
        exits (killed after a grace period if it does not)."""
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.process.wait(CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(CLOSE_GRACE_S)


def spawn(zygote: Zygote) -> WorkerProcess | str:
    """Fork and confine one worker; returns it, or why isolation is unavailable here."""
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="forethought-shadow-")
    try:
        sock, pid = zygote.fork(scratch)
    except (OSError, wire.NotData, EOFError) as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        return f"the shadow worker could not start: {type(exc).__name__}: {exc}"
    worker = WorkerProcess(sock, pid, scratch, {}, 0.0, zygote.kill)
    sock.settimeout(READY_TIMEOUT_S)
    try:
        message = wire.parse(_read(sock, wire.frame_length(_read(sock, wire.HEADER_SIZE), 1 << 16)))
    except (OSError, wire.NotData, EOFError) as exc:
        worker.kill()
        return f"the shadow worker did not report ready: {type(exc).__name__}: {exc}"
    if message.get("op") != "ready":
        worker.kill()
        return str(message.get("reason", "the shadow worker is not confined"))
    sock.settimeout(None)
    sock.setblocking(False)
    worker.confinement = dict(message.get("confinement", {}))
    worker.start_s = time.monotonic() - start
    return worker


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("the channel closed")
        data += chunk
    return bytes(data)


class WorkerPool:
    """Keeps ``spares`` confined workers ready; hands out one per turn."""

    def __init__(self, limits: ShadowLimits | None = None, spares: int = 2) -> None:
        self.limits = limits or ShadowLimits()
        self.spares = max(1, spares)
        self.unavailable: str | None = None
        self._ready: list[WorkerProcess] = []
        self._waiting: list[concurrent.futures.Future[WorkerProcess | None]] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._zygote: Zygote | None = None
        self.spawn_seconds: list[float] = []

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="forethought-shadow-pool", daemon=True)
            self._thread.start()

    def warm(self) -> None:
        """Start filling the pool now (workers start in the background)."""
        with self._lock:
            self._ensure_thread()

    def acquire(self) -> concurrent.futures.Future[WorkerProcess | None]:
        """A future of a ready worker (``None`` when isolation is unavailable or the pool is closed)."""
        future: concurrent.futures.Future[WorkerProcess | None] = concurrent.futures.Future()
        with self._lock:
            self._ensure_thread()
            if self.unavailable is not None or self._closed:
                future.set_result(None)
            elif self._ready:
                future.set_result(self._ready.pop(0))
            else:
                self._waiting.append(future)
            self._wake.notify_all()
        return future

    def _fill(self) -> None:
        while True:
            with self._lock:
                while not self._closed and self.unavailable is None and (
                        len(self._ready) >= self.spares and not self._waiting):
                    self._wake.wait()
                if self._closed or self.unavailable is not None:
                    waiting, self._waiting = self._waiting, []
                    for future in waiting:
                        future.set_result(None)
                    if self._closed:
                        for worker in self._ready:
                            worker.kill()
                        self._ready.clear()
                        if self._zygote is not None:
                            self._zygote.close()
                    return
            started = self._spawn()
            with self._lock:
                if isinstance(started, str):
                    self.unavailable = started
                    log.warning("code speculation is off: %s", started)
                    continue
                self.spawn_seconds.append(started.start_s)
                if self._waiting:
                    self._waiting.pop(0).set_result(started)
                else:
                    self._ready.append(started)

    def _spawn(self) -> WorkerProcess | str:
        if sys.platform != "linux":
            return f"the shadow worker needs Linux (Landlock, seccomp); this is {sys.platform}"
        if self._zygote is None or self._zygote.process.poll() is not None:
            try:
                self._zygote = Zygote(self.limits)
            except OSError as exc:
                return f"the shadow worker's fork server could not start: {exc}"
        return spawn(self._zygote)

    def close(self) -> None:
        """Kill the spare workers and stop refilling."""
        with self._lock:
            self._closed = True
            for worker in self._ready:
                worker.kill()
            self._ready.clear()
            self._wake.notify_all()


_POOLS: dict[ShadowLimits, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(limits: ShadowLimits) -> WorkerPool:
    """The process-wide pool for these limits (created and warmed on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(limits)
        if pool is None:
            pool = _POOLS[limits] = WorkerPool(limits)
            pool.warm()
        return pool


def isolation_available(limits: ShadowLimits | None = None) -> str | None:
    """``None`` when a confined worker starts here; otherwise why not (blocking: for tests and checks)."""
    pool = WorkerPool(limits or ShadowLimits(), spares=1)
    try:
        worker = pool.acquire().result(READY_TIMEOUT_S * 2)
    finally:
        pool.close()
    if worker is None:
        return pool.unavailable or "the pool closed"
    worker.kill()
    return None
