"""Bounded CPU contention beside a benchmark: ``--load N`` starts N burning processes and stops them.

Each burner is a child process spinning on arithmetic until its deadline (it stops by itself even if
the parent dies without cleaning up) or until the context exits, whichever comes first. It opens no
file or socket: it only takes CPU time from everything else on the machine, as other users' work would.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from types import TracebackType

MAX_BURN_S = 900.0
"""A burner ends by itself after this many seconds, whatever happens to the bench."""


def _burn(deadline: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    x = 0
    while time.monotonic() < deadline:
        for _ in range(10_000):
            x = (x * 31 + 7) % 1_000_003


class CpuLoad:
    """A context manager running ``processes`` CPU burners for at most ``max_s`` seconds."""

    def __init__(self, processes: int, max_s: float = MAX_BURN_S) -> None:
        if processes < 0:
            raise ValueError("the number of load processes cannot be negative")
        self.processes = processes
        self.max_s = max_s
        self._children: list[multiprocessing.process.BaseProcess] = []

    def __enter__(self) -> CpuLoad:
        context = multiprocessing.get_context("spawn")
        deadline = time.monotonic() + self.max_s
        for _ in range(self.processes):
            child = context.Process(target=_burn, args=(deadline,), daemon=True)
            child.start()
            self._children.append(child)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for child in self._children:
            child.terminate()
        for child in self._children:
            child.join(timeout=5.0)
            if child.is_alive():
                child.kill()
                child.join(timeout=5.0)
        self._children.clear()

    @property
    def running(self) -> int:
        return sum(1 for c in self._children if c.is_alive())
