"""Batch slots of the simulated engine: K sequences run at once, the rest queue, with occupancy metering.

A request holds one slot from admission until its response ends (continuous batching admits a new
sequence the moment one leaves, so a slot is the unit of capacity). Admission is FIFO; a server-side
continuation (a sequence the gateway resumes after a served tool result) goes ahead of queued new requests,
standing in for a sequence that never left the batch. ``slots = 0`` means no limit.

The meter integrates the number of running sequences over time: ``mean_running`` is its time average
since the last reset, ``occupancy`` the same divided by ``slots``. Queue waits are summed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable


class BatchSlots:
    """``slots`` batch slots with FIFO admission (priority for continuations) and a time-weighted meter."""

    def __init__(self, slots: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 0:
            raise ValueError("slots must be >= 0 (0: unlimited)")
        self.slots = slots
        self._clock = clock
        self._running = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._priority: deque[asyncio.Future[None]] = deque()
        self.reset()

    @property
    def running(self) -> int:
        """Sequences holding a slot now."""
        return self._running

    @property
    def queued(self) -> int:
        return sum(1 for f in (*self._priority, *self._queue) if not f.done())

    def reset(self) -> None:
        """Restart the meter (running sequences keep their slots)."""
        now = self._clock()
        self._since = now
        self._last = now
        self._busy = 0.0
        self.peak = self._running
        self.queue_wait_s = 0.0
        self.admitted = 0

    def _advance(self) -> None:
        now = self._clock()
        self._busy += (now - self._last) * self._running
        self._last = now

    def _set_running(self, value: int) -> None:
        self._advance()
        self._running = value
        self.peak = max(self.peak, value)

    async def acquire(self, priority: bool = False) -> float:
        """Take a slot (waiting in line if all are busy); returns the seconds spent waiting."""
        started = self._clock()
        if not self.slots or (self._running < self.slots and not self.queued):
            self._set_running(self._running + 1)
            self.admitted += 1
            return 0.0
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._priority if priority else self._queue).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as the waiter went away
            raise
        waited = self._clock() - started
        self.queue_wait_s += waited
        self.admitted += 1
        return waited

    def release(self) -> None:
        """Give a slot back: straight to the next in line, or free it."""
        for line in (self._priority, self._queue):
            while line:
                waiter = line.popleft()
                if not waiter.done():
                    self._advance()
                    waiter.set_result(None)  # the slot passes on: the running count stays
                    return
        self._set_running(max(0, self._running - 1))

    def mean_running(self) -> float:
        """Time-average number of running sequences since the last reset."""
        self._advance()
        elapsed = self._last - self._since
        return self._busy / elapsed if elapsed > 0 else float(self._running)

    def occupancy(self) -> float:
        """Time-average busy slots over ``slots`` (0 when unlimited)."""
        return self.mean_running() / self.slots if self.slots else 0.0
