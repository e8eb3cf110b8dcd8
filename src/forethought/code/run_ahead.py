"""The bound on running ahead: CPU a real-run statement may use while earlier tool calls are still pending.

A statement that runs ahead of pending calls does work plain exec might never do (an earlier call may raise)
and holds the interpreter while it does. :class:`RunAheadGuard` watches the run's thread from a watchdog
thread: once the armed statement has used ``budget_s`` of CPU with calls pending, it raises
:class:`RunAheadExceeded` into it (between two bytecodes of the program; C work is kept short by
:func:`~forethought.code.safety.bounded`). The executor then undoes the statement and runs it again after
claiming the earlier calls. Never inside the executor's own machinery: :meth:`RunAheadGuard.quiet` holds the
interruption off while a tool call is issued or claimed, so a call is never made twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from forethought.code.effects import observing
from forethought.code.shadow_control import clear_async_exception, raise_async

WATCH_PERIOD_S = 0.005


class RunAheadExceeded(BaseException):
    """The statement running ahead of pending calls used up its CPU allowance."""


class RunAheadGuard:
    """One run's watchdog (start it on the run's thread; stop it when the run ends)."""

    def __init__(self, budget_s: float, has_pending: Callable[[], bool]) -> None:
        self.budget_s = budget_s
        self._has_pending = has_pending
        self._lock = threading.Lock()
        self._armed: tuple[int, float] | None = None
        self._quiet = 0
        self._fired: int | None = None
        self._thread_id: int | None = None
        self._clock: int | None = None
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.stopped_statements = 0
        """Statements interrupted (over all runs)."""

    def start(self) -> None:
        """Watch the calling thread (the run's) until :meth:`stop`."""
        self._thread_id = threading.get_ident()
        self._clock = time.pthread_getcpuclockid(self._thread_id)
        self._fired = None
        self._stop.clear()
        self._watchdog = threading.Thread(target=self._watch, name="forethought-run-ahead", daemon=True)
        self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        with self._lock, observing(None):
            clear_async_exception(self._thread_id)
        self._thread_id = None

    @contextmanager
    def armed(self, statement: int) -> Iterator[None]:
        """The block runs statement ``statement`` lazily: it may be interrupted."""
        assert self._clock is not None
        with self._lock:
            self._armed = (statement, time.clock_gettime(self._clock))
        try:
            yield
        finally:
            with self._lock, observing(None):
                self._armed = None
                clear_async_exception(self._thread_id)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No interruption inside the block (the executor's own work on the run's thread)."""
        with self._lock, observing(None):
            self._quiet += 1
            clear_async_exception(self._thread_id)
        try:
            yield
        finally:
            with self._lock:
                self._quiet -= 1

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_PERIOD_S):
            with self._lock:
                armed, clock = self._armed, self._clock
                if armed is None or clock is None or self._quiet or armed[0] == self._fired:
                    continue
                if time.clock_gettime(clock) - armed[1] > self.budget_s and self._has_pending():
                    self._fired = armed[0]
                    self.stopped_statements += 1
                    raise_async(self._thread_id, RunAheadExceeded)
