"""Doing no harm under load: how late the event loop runs (and how busy the machine is), as one level.

Speculation only pays while it uses spare capacity. :class:`LoopPressure` watches the event loop the
runtime's sessions run on (a timer that re-arms itself every ``interval_s`` and records how late it
fired, on the loop's own clock) and, when asked to, the machine's load average per core (read at most
once a second),
and maps both onto a level between 0 (idle: speculate freely) and 1 (authoritative work is being
delayed: speculate nothing that is not certain). The runtime prices waste higher as the level rises and
the agent draws fewer speculator samples; :class:`FixedPressure` is the fake for tests.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["FixedPressure", "LoopPressure", "Pressure", "PressureSignal", "level_between"]

LAG_INTERVAL_S = 0.02
"""How often the lag timer fires."""
LAG_EWMA_WEIGHT = 0.2
LOAD_READ_EVERY_S = 1.0
IDLE_STOP_S = 5.0
"""The timer stops re-arming once nobody has read the level for this long; the next read starts it again."""


@dataclass(frozen=True, slots=True)
class Pressure:
    """How loaded the runtime is: ``level`` 0..1 and what it came from (``reason`` says it in words)."""

    level: float
    lag_ms: float = 0.0
    load_per_core: float = 0.0

    @property
    def state(self) -> str:
        """``normal``, ``reduced`` or ``off`` (speculating only what is certain)."""
        if self.level <= 0.0:
            return "normal"
        return "off" if self.level >= 1.0 else "reduced"

    @property
    def reason(self) -> str:
        return (f"event-loop lag {self.lag_ms:.1f} ms, load {self.load_per_core:.2f} per core: "
                f"speculation {self.state} (level {self.level:.2f})")


NO_PRESSURE = Pressure(0.0)


class PressureSignal(Protocol):
    """Where the runtime reads its load level from."""

    def pressure(self) -> Pressure:
        """The level now."""

    def start(self) -> None:
        """Begin watching (called on the event loop the sessions use); idempotent."""

    def stop(self) -> None:
        """Stop watching; idempotent."""


def level_between(value: float, low: float, high: float) -> float:
    """0 at or below ``low``, 1 at or above ``high``, linear between (``high <= low``: a step at ``low``)."""
    if math.isnan(value) or value <= low:
        return 0.0
    if high <= low or value >= high:
        return 1.0
    return (value - low) / (high - low)


class LoopPressure:
    """The real signal: event-loop lag (a self re-arming timer) and the load average per core."""

    def __init__(self, lag_ms: tuple[float, float], load_per_core: tuple[float, float] | None = None,
                 interval_s: float = LAG_INTERVAL_S,
                 read_load: Callable[[], float] | None = None, cores: int | None = None) -> None:
        self.lag_range = lag_ms
        self.load_range = load_per_core
        self.interval_s = interval_s
        self._read_load = read_load or _load_average
        self._cores = max(1, cores or os.cpu_count() or 1)
        self.lag_s = 0.0
        self._engaged = False
        self._load = 0.0
        self._load_read_at = -math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        self._read_at = time.monotonic()
        self._current: Pressure | None = None
        self._timer: asyncio.TimerHandle | None = None

    def observe(self, late_s: float) -> None:
        """Fold one measured lateness (seconds) into the moving average."""
        late_s = max(0.0, late_s)
        self.lag_s += LAG_EWMA_WEIGHT * (late_s - self.lag_s)
        self._current = None

    def pressure(self) -> Pressure:
        """The level now: computed once per timer tick (or load read), so reading it on every guess is cheap."""
        now = time.monotonic()
        self._read_at = now
        current = self._current
        if current is not None and (self.load_range is None or now - self._load_read_at < LOAD_READ_EVERY_S):
            return current
        current = self._current = self._compute(now)
        return current

    def _compute(self, now: float) -> Pressure:
        lag_ms = 1000.0 * self.lag_s
        low, high = self.lag_range
        # Hysteresis: once lag has passed ``low`` the level falls back to 0 only below half of it, so a lag
        # hovering at the threshold does not flip speculation on and off at every sample.
        if self._engaged and lag_ms < low / 2:
            self._engaged = False
        elif not self._engaged and lag_ms > low:
            self._engaged = True
        level = level_between(lag_ms, low / 2 if self._engaged else low, high)
        if self.load_range is not None:
            if now - self._load_read_at >= LOAD_READ_EVERY_S:
                self._load_read_at = now
                self._load = self._read_load() / self._cores
            level = max(level, level_between(self._load, *self.load_range))
        return Pressure(level, lag_ms, self._load)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None and self._loop is loop:
            return
        self.stop()
        self._loop = loop
        self._arm(loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._loop = None

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        due = loop.time() + self.interval_s
        self._timer = loop.call_at(due, self._fire, loop, due)

    def _fire(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._loop is not loop or loop.is_closed():
            return
        self.observe(loop.time() - due)
        if time.monotonic() - self._read_at > IDLE_STOP_S:
            self._timer = None  # nobody is speculating: stop; the next read starts afresh
            self._loop = None
            self.lag_s = 0.0
            self._current = None
            return
        self._arm(loop)


class FixedPressure:
    """A signal that reports whatever level the test sets."""

    def __init__(self, level: float = 0.0, lag_ms: float = 0.0) -> None:
        self.level = level
        self.lag_ms = lag_ms
        self.started = 0

    def pressure(self) -> Pressure:
        return Pressure(self.level, self.lag_ms)

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        pass


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 0.0
