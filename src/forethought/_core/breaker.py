"""Circuit breaker: turn speculation off for a tool or a session whose guesses are mostly waste.

Each scope (a tool name, a session id) keeps a sliding window of recent speculation outcomes. When the
window holds enough samples and its waste or error rate crosses the policy's threshold, the scope opens
for a cool-down; afterwards it closes again with an empty window (half-open: it must earn its way back).
Rates are kept as running counts, so recording an outcome costs the same whatever the window size.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from forethought._core.clock import SYSTEM_CLOCK, Clock
from forethought._core.policy import BreakerPolicy


class Outcome(enum.Enum):
    """What became of one speculation, as the breaker counts it."""

    USEFUL = "useful"
    WASTED = "wasted"
    ERROR = "error"

    __hash__ = object.__hash__  # identity hash: members are singletons (see telemetry.EventKind)


@dataclass(slots=True)
class _Scope:
    outcomes: deque[Outcome]
    open_until: float = 0.0
    trips: int = 0
    wasted: int = 0
    errors: int = 0

    def clear(self) -> None:
        self.outcomes.clear()
        self.wasted = self.errors = 0


_USEFUL, _WASTED, _ERROR = Outcome.USEFUL, Outcome.WASTED, Outcome.ERROR


class CircuitBreaker:
    """Sliding-window waste/error breaker keyed by scope name; cool-downs are read from ``clock``."""

    def __init__(self, policy: BreakerPolicy, clock: Clock = SYSTEM_CLOCK) -> None:
        self._policy = policy
        self._clock = clock.monotonic
        self._scopes: dict[str, _Scope] = {}
        self._window = max(1, policy.window)

    def allows(self, name: str) -> bool:
        """Whether speculation is currently on for ``name``."""
        scope = self._scopes.get(name)
        if scope is None or scope.open_until == 0.0:
            return True
        if self._clock() >= scope.open_until:
            scope.open_until = 0.0
            scope.clear()
            return True
        return False

    def record(self, name: str, outcome: Outcome) -> None:
        """Add one outcome to ``name``'s window; open the scope if its waste or error rate is too high."""
        scope = self._scopes.get(name)
        if scope is None:
            scope = self._scopes[name] = _Scope(deque())
        outcomes = scope.outcomes
        before = len(outcomes)
        if before >= self._window:
            old = outcomes.popleft()
            if old is not _USEFUL:
                if old is _WASTED:
                    scope.wasted -= 1
                else:
                    scope.errors -= 1
        outcomes.append(outcome)
        if outcome is _USEFUL:
            if before >= self._policy.min_samples:
                return  # the rates were checked before and a useful outcome only lowers them
        elif outcome is _WASTED:
            scope.wasted += 1
        else:
            scope.errors += 1
        n = len(outcomes)
        if n < self._policy.min_samples or scope.open_until:
            return
        if scope.wasted / n > self._policy.max_waste_rate or scope.errors / n > self._policy.max_error_rate:
            scope.open_until = self._clock() + self._policy.cooldown_s
            scope.trips += 1

    def trips(self, name: str) -> int:
        scope = self._scopes.get(name)
        return scope.trips if scope else 0

    def forget(self, name: str) -> None:
        """Drop a scope's history (a closed session's, so the breaker does not grow without bound)."""
        self._scopes.pop(name, None)
