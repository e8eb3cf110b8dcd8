"""Circuit breaker: turn speculation off for a tool or a session whose guesses are mostly waste.

Each scope (a tool name, a session id) keeps a sliding window of recent speculation outcomes. When the
window holds enough samples and its waste or error rate crosses the policy's threshold, the scope opens
for a cool-down; afterwards it closes again with an empty window (half-open: it must earn its way back).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from forethought.policy import BreakerPolicy


class Outcome(enum.Enum):
    """What became of one speculation, as the breaker counts it."""

    USEFUL = "useful"
    WASTED = "wasted"
    ERROR = "error"


@dataclass(slots=True)
class _Scope:
    outcomes: deque[Outcome]
    open_until: float = 0.0
    trips: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class CircuitBreaker:
    """Sliding-window waste/error breaker keyed by scope name."""

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}

    def _scope(self, name: str) -> _Scope:
        scope = self._scopes.get(name)
        if scope is None:
            scope = self._scopes[name] = _Scope(deque(maxlen=self._policy.window))
        return scope

    def allows(self, name: str) -> bool:
        """Whether speculation is currently on for ``name``."""
        scope = self._scopes.get(name)
        if scope is None or scope.open_until == 0.0:
            return True
        if self._clock() >= scope.open_until:
            scope.open_until = 0.0
            scope.outcomes.clear()
            return True
        return False

    def record(self, name: str, outcome: Outcome) -> None:
        scope = self._scope(name)
        scope.outcomes.append(outcome)
        n = len(scope.outcomes)
        if n < self._policy.min_samples or scope.open_until:
            return
        wasted = sum(1 for o in scope.outcomes if o is Outcome.WASTED) / n
        errors = sum(1 for o in scope.outcomes if o is Outcome.ERROR) / n
        if wasted > self._policy.max_waste_rate or errors > self._policy.max_error_rate:
            scope.open_until = self._clock() + self._policy.cooldown_s
            scope.trips += 1

    def trips(self, name: str) -> int:
        scope = self._scopes.get(name)
        return scope.trips if scope else 0
