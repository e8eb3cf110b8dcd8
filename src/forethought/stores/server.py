"""A local ``redis-server`` process: started on 127.0.0.1 on a free port, stopped by its own handle.

Used by the tests' fixture and by ``forethought bench --workers N --store redis`` when no ``--redis-url`` is
given. Persistence is off (a restart loses every key, like failing over to an empty replica).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

from forethought.stores.errors import StoreUnavailableError

START_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_binary() -> str | None:
    """The ``redis-server`` on PATH, if any (``make redis-server`` installs the Debian package)."""
    return shutil.which("redis-server")


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1:``port`` (no persistence)."""

    def __init__(self, workdir: Path, port: int | None = None, binary: str | None = None) -> None:
        found = binary or redis_binary()
        if found is None:
            raise StoreUnavailableError("redis-server is not installed (make redis-server)")
        self.binary = found
        self.workdir = workdir
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StoreUnavailableError(f"redis-server exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        self.stop()
        raise StoreUnavailableError("redis-server did not answer PING in time")

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 5 s)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()
