"""The fork server: one unconfined, pre-imported process that forks a fresh worker per turn in milliseconds.

It is started once per pool from a clean environment and imports nothing but the worker's modules, so a
forked child inherits no secrets and no parent state. Over its control socket the pool sends ``fork`` (with
the child's channel descriptor, passed by ``SCM_RIGHTS``, and a scratch directory) and ``kill``; the zygote
answers ``forked`` with the child's pid. The child is an *isolator* (:func:`launch`): it creates the worker's
namespaces and forks the worker into them (:mod:`.namespaces`); the worker dies with it. The zygote reaps
its children itself, so a pid it kills is always its own live child (never a reused pid), and removes a
child's scratch directory when the child is gone. It exits when the pool's end of the control socket
closes, killing its children.
"""

from __future__ import annotations

import array
import contextlib
import os
import shutil
import signal
import socket
from typing import Any

from forethought.code.wire import HEADER_SIZE, frame, frame_length, parse
from forethought.code.worker import namespaces
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.main import prepare, serve
from forethought.code.worker.sandbox import IsolationUnavailable

_MAX_CONTROL = 1 << 16


def send_with_fd(sock: socket.socket, message: dict[str, Any], fd: int) -> None:
    """Send one frame and one file descriptor (the descriptor rides with the frame's first byte)."""
    data = frame(message)
    sock.sendmsg([data[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    sock.sendall(data[1:])


def _recv_frame(sock: socket.socket) -> tuple[dict[str, Any], int | None] | None:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_LEN(fds.itemsize))
    if not data:
        return None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - (len(payload) % fds.itemsize)])
    buffer = bytearray(data)
    while len(buffer) < HEADER_SIZE:
        chunk = sock.recv(HEADER_SIZE - len(buffer))
        if not chunk:
            return None
        buffer += chunk
    length = frame_length(bytes(buffer[:HEADER_SIZE]), _MAX_CONTROL)
    body = bytearray(buffer[HEADER_SIZE:])
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return parse(bytes(body)), (fds[0] if fds else None)


def _unavailable(fd: int, why: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, frame({"op": "unavailable", "reason": why}))


def launch(fd: int, scratch: str, limits: ShadowLimits) -> int:
    """The isolator (a child of the zygote): new namespaces, the worker forked into them and waited for.

    Returns the exit code for the isolator; the worker itself never returns from here.
    """
    try:
        isolation = namespaces.enter()
    except IsolationUnavailable as exc:
        _unavailable(fd, str(exc))
        return 1
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the worker: PID 1 of its namespace
        mine.close()
        code = 0
        try:
            namespaces.settle(isolation, scratch, limits, theirs)
            theirs.close()  # nothing but the channel stays open in the worker
            serve(fd, scratch, limits, isolation.kinds)
        except IsolationUnavailable as exc:
            _unavailable(fd, str(exc))
            code = 1
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    os.close(fd)  # only the worker holds the channel: its end closes when the worker dies
    namespaces.assist(isolation, pid, mine)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
        return os.waitstatus_to_exitcode(status) & 0xFF


def run(control_fd: int, limits: ShadowLimits) -> None:
    """The zygote's loop (in the zygote process)."""
    prepare()
    control = socket.socket(fileno=control_fd)
    children: dict[int, str] = {}

    def reap(_signum: int, _frame: object) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            scratch = children.pop(pid, None)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    signal.signal(signal.SIGCHLD, reap)
    try:
        while True:
            received = _recv_frame(control)
            if received is None:
                return
            message, fd = received
            if message["op"] == "fork" and fd is not None:
                scratch = str(message["scratch"])
                pid = os.fork()
                if pid == 0:
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    control.close()
                    code = 1
                    try:
                        code = launch(fd, scratch, limits)
                    finally:
                        os._exit(code)
                os.close(fd)
                children[pid] = scratch
                control.sendall(frame({"op": "forked", "pid": pid}))
            elif message["op"] == "kill":
                victim = message.get("pid")
                if type(victim) is int and victim in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
            elif fd is not None:
                os.close(fd)
    finally:  # the pool is gone: no child outlives the zygote, no scratch directory stays behind
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for pid, scratch in list(children.items()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            shutil.rmtree(scratch, ignore_errors=True)
