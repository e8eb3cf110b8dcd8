"""The shadow's hold on the statement it runs: stopping, CPU accounting, waits, and the interruption.

:class:`Control` tracks the CPU time of the running statement (waits for speculated results do not count)
and waits for a speculated value on the runner thread, giving up when the turn ends or the wait is too
long. :func:`raise_async` is how the watchdog interrupts a statement past its CPU budget, and
:func:`clear_async_exception` withdraws an interruption the statement finished before receiving.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from forethought.code.cell import Cell
from forethought.code.signals import ShadowBlocked, ShadowSignal, ShadowStopped, ShadowToolFailed

MAX_WAIT_S = 60.0
_WAIT_SLICE_S = 0.05


class Control:
    """The runner's per-statement state: stopping, CPU accounting, and waits for speculated results."""

    def __init__(self, statement_cpu_s: float) -> None:
        self.statement_cpu_s = statement_cpu_s
        self.stopped = False
        self.touched_lazy = False
        self.thread_id: int | None = None
        self._clock: int | None = None
        self._cpu_start = 0.0

    def start_statement(self) -> None:
        self.touched_lazy = False
        if self.thread_id != threading.get_ident():
            self.thread_id = threading.get_ident()
            self._clock = time.pthread_getcpuclockid(self.thread_id)
        self._cpu_start = self._cpu()

    def _cpu(self) -> float:
        return time.clock_gettime(self._clock) if self._clock is not None else time.thread_time()

    def cpu_seconds(self) -> float:
        """CPU time of the running statement (any thread may ask)."""
        return self._cpu() - self._cpu_start

    def wait_cell(self, cell: Cell) -> Any:
        """A speculated value, waited for on the runner thread (a wait uses no CPU budget)."""
        self.touched_lazy = True
        deadline = time.monotonic() + MAX_WAIT_S
        while not cell.wait(_WAIT_SLICE_S):
            if self.stopped:
                raise ShadowStopped("the turn ended")
            if time.monotonic() > deadline:
                raise ShadowBlocked("waited too long for a speculated result")
        error = cell.error()
        if error is None:
            return cell.result()
        if isinstance(error, ShadowSignal):
            raise error
        raise ShadowToolFailed(f"{type(error).__name__}: {error}")


def raise_async(thread_id: int | None, error: type[BaseException]) -> None:
    if thread_id is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(error))


def clear_async_exception(thread_id: int | None) -> None:
    if thread_id is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)


__all__ = ["MAX_WAIT_S", "Control", "clear_async_exception", "raise_async"]
