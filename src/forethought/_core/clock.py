"""Time as a dependency: the monotonic clock that TTLs, claim timing and the breaker read.

The runtime never calls ``time.monotonic`` itself; it asks a :class:`Clock` handed in at construction
(``Runtime(clock=...)``), and every session, store entry and the circuit breaker read that one clock. The
real :class:`SystemClock` costs nothing extra (its ``monotonic`` *is* ``time.monotonic``); tests use a
:class:`FakeClock` and advance it instead of sleeping, so expiry and cool-downs are decided, not waited for.

Only our own decisions read the clock. Waits that must really elapse (``asyncio.wait`` with a timeout, a
speculation's timeout) use the event loop's time, because a fake clock cannot make a tool finish sooner.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of monotonic seconds (only differences between readings mean anything)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""


class SystemClock:
    """The real monotonic clock of the process."""

    __slots__ = ()

    monotonic = staticmethod(time.monotonic)
    """``time.monotonic`` itself, so reading it through the clock costs no extra call."""

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
"""The shared default clock."""


class FakeClock:
    """A clock that moves only when told to: ``advance(seconds)`` or ``set(now)``; safe across threads."""

    def __init__(self, now: float = 1000.0) -> None:
        self._now = float(now)
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        """The current reading (it changes only through :meth:`advance` and :meth:`set`)."""
        return self._now

    def __call__(self) -> float:
        """The same reading as :meth:`monotonic` (for seams that take a plain callable)."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        with self._lock:
            self._now += seconds

    def set(self, now: float) -> None:
        """Jump to ``now`` (not earlier than the current reading)."""
        with self._lock:
            if now < self._now:
                raise ValueError("a monotonic clock cannot go backwards")
            self._now = float(now)

    @property
    def now(self) -> float:
        """The current reading, as an attribute."""
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
