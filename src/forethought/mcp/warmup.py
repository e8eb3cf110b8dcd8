"""A session's first messages relayed at once, while the proxy itself is still loading.

A client starts ``forethought mcp-proxy -- <server>`` and waits for its first answers. Loading the proxy (the
``mcp`` SDK, the runtime, the relay) takes longer than many servers take to start, and the upstream could only
be started after it: the session began seconds later than direct. So the command starts the upstream first,
and :class:`WarmStart` relays whole lines between the client and the upstream, byte for byte, in two threads,
while the rest loads (this module needs nothing but the standard library and the write clock). The rest loads
once the upstream has answered the handshake (:meth:`WarmStart.wait_started`): loading it meanwhile would only
slow the upstream's own start where cores are few. Then the proxy
takes over (:meth:`WarmStart.handoff`) at a line boundary: the threads stop, and the proxy's transports go on
from where they stopped (:mod:`~forethought.mcp.pipes`), having been told what passed meanwhile
(:class:`Handoff`: the lines each way, which the relay reads to learn the upstream's name and tools).

A ``tools/call`` relayed during warm-up is a call the proxy cannot see, so it is an untracked write of the
shared clock, from before it is sent until its answer comes (or, if none has come by the handoff, until the
proxy's relay sees it: :attr:`Handoff.open_writes`).
"""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.versions import Version, Write

POLL_S = 0.02
"""How often a relaying thread looks whether the proxy wants to take over."""
RELAY_SWITCH_S = 0.0002
"""The interpreter's thread switch interval while relaying (restored at the handoff). The proxy loads on the
main thread meanwhile, holding the GIL for a second or more of imports; a relaying thread that has a line to
pass on waits for the GIL up to the switch interval (5 ms by default), once per line each way, so a call
relayed during the load took about 10 ms longer than direct."""
CHUNK = 65536


def can_warm_start() -> bool:
    """Whether stdin and stdout are pipes or sockets (what an MCP client gives a stdio server), on POSIX (the
    relaying threads wait with ``select`` on pipes, the takeover uses asyncio's pipe transports)."""
    if os.name != "posix":
        return False
    try:
        return all(stat.S_ISFIFO(m) or stat.S_ISSOCK(m) for m in (os.fstat(0).st_mode, os.fstat(1).st_mode))
    except OSError:
        return False


@dataclass(slots=True)
class Handoff:
    """What the proxy needs to go on where the warm-up stopped."""

    process: subprocess.Popen[bytes]
    client_rest: bytes
    """Bytes read from the client after its last whole line (the start of its next message)."""
    server_rest: bytes
    client_lines: list[bytes] = field(default_factory=list)
    server_lines: list[bytes] = field(default_factory=list)
    open_writes: dict[Any, Write] = field(default_factory=dict)
    """Request id -> the untracked write of a ``tools/call`` still waiting for its answer."""


class _Copier(threading.Thread):
    """Copies whole lines from one descriptor to another, keeping each line, until told to stop."""

    def __init__(self, source: int, target: int, lines: list[bytes], on_line: Any, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self._source, self._target = source, target
        self._lines, self._on_line, self._halt = lines, on_line, stop
        self.rest = b""
        self.closed = False

    def run(self) -> None:
        while not self._halt.is_set():
            ready, _, _ = select.select([self._source], [], [], POLL_S)
            if not ready:
                continue
            chunk = os.read(self._source, CHUNK)
            if not chunk:
                self.closed = True
                return
            data = self.rest + chunk
            cut = data.rfind(b"\n") + 1
            whole, self.rest = data[:cut], data[cut:]
            if whole:
                for line in whole.splitlines(keepends=True):
                    self._on_line(line)
                    self._lines.append(line)
                _write_all(self._target, whole)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class WarmStart:
    """The upstream started first, and the session relayed line by line until the proxy takes over."""

    def __init__(self, command: Sequence[str], clock: Version, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, client_in: int = 0, client_out: int = 1) -> None:
        """Start ``command`` (raises ``OSError`` if it cannot be started) and relay at once, between it and the
        client on ``client_in`` and ``client_out`` (this process's stdin and stdout)."""
        self.clock = clock
        self._switch = sys.getswitchinterval()
        self.process = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=dict(env if env is not None else os.environ), cwd=cwd,
                                        start_new_session=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._writes: dict[Any, Write] = {}
        self._lock = threading.Lock()
        self.answered = threading.Event()
        """Set once the upstream has sent its first line (it has started, and answered the handshake)."""
        self._stop = threading.Event()
        self._client_lines: list[bytes] = []
        self._server_lines: list[bytes] = []
        self._down = _Copier(client_in, self.process.stdin.fileno(), self._client_lines, self._client_line,
                             self._stop)
        self._up = _Copier(self.process.stdout.fileno(), client_out, self._server_lines, self._server_line,
                           self._stop)
        sys.setswitchinterval(min(self._switch, RELAY_SWITCH_S))
        self._down.start()
        self._up.start()

    def _client_line(self, line: bytes) -> None:
        if b'"tools/call"' not in line:
            return
        message = _parsed(line)
        if message is not None and message.get("method") == "tools/call" and "id" in message:
            with self._lock:
                self._writes[_key(message["id"])] = Write((), (self.clock,))

    def _server_line(self, line: bytes) -> None:
        self.answered.set()
        if not self._writes:
            return
        message = _parsed(line)
        if message is not None and "id" in message and "method" not in message:
            with self._lock:
                write = self._writes.pop(_key(message["id"]), None)
            if write is not None:
                write.end()

    def wait_started(self, timeout_s: float) -> None:
        """Wait until the upstream has answered (at most ``timeout_s``, or until it exits): the proxy then
        loads without slowing the upstream's own start, on a machine with few cores."""
        deadline = timeout_s
        while deadline > 0 and not self.answered.wait(min(POLL_S * 5, deadline)):
            if self.process.poll() is not None or self._up.closed or self._down.closed:
                return
            deadline -= POLL_S * 5

    def handoff(self) -> Handoff:
        """Stop relaying (at a line boundary) and hand over what the proxy needs to go on."""
        self._stop.set()
        self._down.join()
        self._up.join()
        sys.setswitchinterval(self._switch)
        with self._lock:
            writes, self._writes = self._writes, {}
        return Handoff(self.process, self._down.rest, self._up.rest, self._client_lines, self._server_lines, writes)


def _key(request_id: Any) -> tuple[str, Any]:
    return (type(request_id).__name__, request_id)


def _parsed(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
