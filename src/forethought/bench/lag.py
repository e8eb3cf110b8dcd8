"""Event-loop lag and machine load: how busy the machine was while the bench measured.

:class:`LagMonitor` wakes every ``interval_s`` on the bench's event loop and records how late it woke
(the lag every agent on that loop suffered at that moment), attributed to the arm running then (its clock
and its sleep can be injected, so a test decides how late each wake-up is).
:func:`machine_snapshot` reads the load average and core count. Together they let the report say
plainly when the machine was too busy for its figures to mean much.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

LAG_INTERVAL_S = 0.01
"""How often the monitor wakes (seconds)."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[rank]


class LagMonitor:
    """Samples event-loop lag while it runs; ``label`` names the arm the samples belong to."""

    def __init__(self, interval_s: float = LAG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.interval_s = interval_s
        self.label = ""
        self.samples: defaultdict[str, list[float]] = defaultdict(list)
        self._clock = clock
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LagMonitor:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            before = self._clock()
            await self._sleep(self.interval_s)
            late = self._clock() - before - self.interval_s
            self.samples[self.label].append(max(0.0, late))

    def p99_ms(self, label: str | None = None) -> float:
        """The 99th-percentile lag in milliseconds, for one label or over all samples."""
        values = self.samples.get(label, []) if label is not None else [
            v for vs in self.samples.values() for v in vs]
        return 1000.0 * percentile(values, 0.99)


@dataclass(frozen=True, slots=True)
class MachineSnapshot:
    """The 1-, 5- and 15-minute load averages and the number of cores, at one moment."""

    load_1m: float
    load_5m: float
    load_15m: float
    cores: int


def machine_snapshot() -> MachineSnapshot:
    """Read the load average (zeros where the OS has none) and the core count."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        one = five = fifteen = 0.0
    return MachineSnapshot(one, five, fifteen, os.cpu_count() or 1)
