"""The seam between a session and the runtime that opened it: what a session (and each of its parts) needs.

:class:`Host` is implemented by :class:`~forethought._core.runtime.Runtime`; sessions and their parts (the
speculative task, the claims) name it instead of the runtime, so none of them imports the runtime or the
session facade.
"""

from __future__ import annotations

from typing import Protocol

from forethought._core.breaker import CircuitBreaker
from forethought._core.clock import Clock
from forethought._core.policy import Policy
from forethought._core.pressure import Pressure
from forethought._core.pricing import Calibration, Worth
from forethought._core.scheduler import Scheduler
from forethought._core.tools import Tool
from forethought._core.versions import WriteClock
from forethought.telemetry import Telemetry

__all__ = ["Host"]


class Host(Protocol):
    """What a session needs of the runtime that opened it (the :class:`~forethought._core.runtime.Runtime`)."""

    policy: Policy
    clock: Clock
    telemetry: Telemetry
    scheduler: Scheduler
    breaker: CircuitBreaker
    calibration: Calibration
    writes: WriteClock

    def pressure(self) -> Pressure: ...

    def price(self, t: Tool, source: str, confidence: float, eta_s: float | None,
              p_hit: float | None = None, ran_s: float = 0.0) -> tuple[Worth, Pressure]: ...

    def claim_wait_limit(self, tool: Tool | str) -> float: ...

    def typical_run_s(self, t: Tool) -> float: ...

    def note_runtime(self, tool: str, seconds: float) -> None: ...
