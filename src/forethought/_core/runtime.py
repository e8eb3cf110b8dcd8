"""The runtime: what every session of one deployment shares.

``Runtime(tools, policy)`` is shared by many sessions (global concurrency, telemetry, thread pools, the
breaker, measured tool runtimes, the calibration of every guess source and the load signal);
``runtime.session()`` opens one :class:`~forethought._core.session.Session` with its own isolated store.
Predictors call ``session.speculate(call, source=..., confidence=...)``; the agent calls
``await session.execute(call)``, which claims a matching speculation (a hit) or runs the tool (a miss).
The invariants a session enforces are listed in :mod:`forethought._core.session`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable

from forethought._core.breaker import CircuitBreaker
from forethought._core.clock import SYSTEM_CLOCK, Clock
from forethought._core.entry import CallOutcome, SettledSpeculation, SpeculationTicket
from forethought._core.policy import Policy, Server, resolve
from forethought._core.pressure import NO_PRESSURE, LoopPressure, Pressure, PressureSignal
from forethought._core.pricing import Calibration, Worth, worth
from forethought._core.scheduler import Scheduler
from forethought._core.session import CLOSE_WAIT_S, Session
from forethought._core.shared import SharedRuns
from forethought._core.tools import Tool, ToolRegistry
from forethought._core.versions import WriteClock
from forethought.telemetry import Event, EventKind, SessionStats, Telemetry, stats_from

__all__ = ["CLOSE_WAIT_S", "RUNTIME_EWMA_WEIGHT", "CallOutcome", "Runtime", "Session", "SessionStats",
           "SettledSpeculation", "SpeculationTicket", "stats_from"]

RUNTIME_EWMA_WEIGHT = 0.3
UNMEASURED_RUN_S = 1.0
"""The runtime assumed for a tool that has never run and declares no ``expected_s``, before any tool has
run (for pricing guesses)."""

_log = logging.getLogger(__name__)


class Runtime:
    """Shared state of all sessions: tools, policy, scheduler, breaker, telemetry and the clock.

    ``clock`` is what every TTL, claim timing and (unless ``breaker`` is given) breaker cool-down reads;
    the default is the system's monotonic clock, tests pass a :class:`~forethought._core.clock.FakeClock`.
    ``pressure`` is where the load level comes from (default: the event loop's lag and the load average,
    as the policy's back-off settings say; tests pass a :class:`~forethought._core.pressure.FixedPressure`).
    ``calibration`` holds the observed hit rate of every guess source and confidence bin. ``shared``: where
    speculations of shared tools obtain their values (:mod:`forethought._core.shared`).
    """

    def __init__(self, tools: Iterable[Tool] = (), policy: Policy | None = None,
                 telemetry: Telemetry | None = None, breaker: CircuitBreaker | None = None,
                 clock: Clock | None = None, pressure: PressureSignal | None = None,
                 shared: SharedRuns | None = None) -> None:
        self.policy = policy or Policy()
        self.clock = clock or SYSTEM_CLOCK
        self.telemetry = telemetry or Telemetry(self.clock)
        self._unmatched_reported: set[str] = set()
        self.tools = ToolRegistry(self._with_policy(tools))
        self.scheduler = Scheduler(self.policy)
        self.breaker = breaker or CircuitBreaker(self.policy.breaker, self.clock)
        self.tool_runtime_ewma: dict[str, float] = {}
        self._mean_run_s: float | None = None
        self.calibration = Calibration()
        self.pressure_signal: PressureSignal = pressure or LoopPressure(self.policy.backoff_lag_ms,
                                                                        self.policy.backoff_load_per_core)
        self._pressure_state = "normal"
        self._last_pressure: Pressure | None = None
        self.shared = shared
        """Where speculations of shared tools obtain their values (``None``: nothing is shared)."""
        self.writes = WriteClock()
        """The one write clock of every session of this runtime (:mod:`forethought._core.versions`)."""
        self._ids = itertools.count(1)

    def _with_policy(self, tools: Iterable[Tool], server: Server = None) -> list[Tool]:
        """``tools`` as the policy resolves them (:func:`~forethought._core.policy.resolve`); a resolution that
        failed closed is reported once per reason, in the log and as a POLICY event."""
        out = []
        for t in tools:
            own = t.server if t.server is not None else server
            resolved = resolve(self.policy, t.name, server=own, declared=t.effect, hints=t.annotations)
            applied = resolved.apply(t)
            if resolved.unmatched:
                self._report_unmatched(applied, resolved.unmatched)  # by its private label
            out.append(applied)
        return out

    def _report_unmatched(self, t: Tool, why: str) -> None:
        self.telemetry.emit(Event(EventKind.POLICY, "", t.label, "", detail=why))
        if why not in self._unmatched_reported:
            self._unmatched_reported.add(why)
            _log.warning("forethought: %s", why)

    def session(self, session_id: str | None = None, tools: Iterable[Tool] = (),
                shared: SharedRuns | None = None, server: Server = None) -> Session:
        """Open a session; ``tools`` adds or replaces tools for this session only (e.g. bound to its state);
        ``shared`` replaces the runtime's shared results for it (one tenant's, say); ``server``: the server
        ``tools`` belong to (its name, :data:`~forethought._core.policy.UNKNOWN_SERVER`, or ``None`` for tools
        of the user's own code), which decides the policy tables they resolve against."""
        extra = self._with_policy(tools, server)
        registry = self.tools.merged(extra) if extra else self.tools
        return Session(self, session_id or f"s{next(self._ids)}", registry,
                       shared if shared is not None else self.shared)

    def stats(self) -> SessionStats:
        t = self.telemetry
        return stats_from(t.counts, t.saved_s, t.wasted_s)

    def note_runtime(self, tool: str, seconds: float) -> None:
        old = self.tool_runtime_ewma.get(tool)
        self.tool_runtime_ewma[tool] = seconds if old is None else (
            old + RUNTIME_EWMA_WEIGHT * (seconds - old))
        mean = self._mean_run_s
        self._mean_run_s = seconds if mean is None else mean + RUNTIME_EWMA_WEIGHT * (seconds - mean)

    def typical_run_s(self, t: Tool) -> float:
        """The tool's typical runtime: measured once it has run, else declared, else the mean of the tools
        measured so far (tools of one deployment tend to be alike), else :data:`UNMEASURED_RUN_S`."""
        measured = self.tool_runtime_ewma.get(t.name)
        if measured is not None:
            return measured
        if t.expected_s is not None:
            return t.expected_s
        return self._mean_run_s if self._mean_run_s is not None else UNMEASURED_RUN_S

    def pressure(self) -> Pressure:
        """The load level now (none when the policy turns back-off off); a change of state is reported once,
        as a BACKOFF event and a log line."""
        if not self.policy.backoff:
            return NO_PRESSURE
        signal = self.pressure_signal
        signal.start()
        now = signal.pressure()
        if now is not self._last_pressure:  # a signal hands out one value per tick: compare states only then
            self._last_pressure = now
            state = now.state
            if state != self._pressure_state:
                self._pressure_state = state
                _log.info("forethought: %s", now.reason)
                self.telemetry.emit(Event(EventKind.BACKOFF, "", "", "", detail=now.reason))
        return now

    def price(self, t: Tool, source: str, confidence: float, eta_s: float | None,
              p_hit: float | None = None, ran_s: float = 0.0) -> tuple[Worth, Pressure]:
        """What a guess of ``t`` from ``source`` at ``confidence`` is worth now, and the load it was priced at.

        ``p_hit``: its chance of a hit when the caller knows better than the calibration (revised by new
        evidence); ``ran_s``: how long it has already run (see :func:`~forethought._core.pricing.worth`). The waste
        weight rises with the load level, up to ``backoff_factor`` times the policy's.
        """
        pressure = self.pressure()
        policy = self.policy
        level = pressure.level
        weight = policy.waste_weight * (1.0 + policy.backoff_factor * level) if level else policy.waste_weight
        p = self.calibration.p_hit(source, confidence) if p_hit is None else p_hit
        return worth(p, self.typical_run_s(t), eta_s, t.cost_units, weight, ran_s), pressure

    def claim_wait_limit(self, tool: Tool | str) -> float:
        """How long a speculation may have run, in all, before a claim stops waiting for it.

        A fresh call plausibly needs the tool's typical runtime: measured (a moving average) once the tool
        has run, else its declared ``expected_s``, else the policy's speculation timeout (the speculation
        is given up then anyway). A claim waits while the speculation has run less than the floor plus
        ``claim_wait_factor`` such runtimes, so a right guess is never dropped for a slower fresh run.
        """
        t = tool if isinstance(tool, Tool) else self.tools.get(tool)
        name = t.name if t is not None else str(tool)
        typical = self.tool_runtime_ewma.get(name)
        if typical is None:
            declared = t.expected_s if t is not None else None
            typical = declared if declared is not None else self.policy.speculation_timeout_s
        return self.policy.claim_wait_floor_s + self.policy.claim_wait_factor * typical

    def close(self, wait: bool = False) -> None:
        """Stop the worker pools and the load watch; with ``wait``, return once every tool thread has finished."""
        self.pressure_signal.stop()
        self.scheduler.close(wait)
