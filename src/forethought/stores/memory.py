"""In-memory fakes of the shared pattern store: idempotent merges and a switch that takes it "down".

:class:`MemoryIdempotentPatternStore` is the fake of
:class:`~forethought.stores.fallback.IdempotentPatternStore` (what :class:`RedisPatternStore` is for real):
a :class:`~forethought.predictors.patterns.store.MemoryPatternStore` that remembers merge ids, and whose
``available`` switch makes every call raise :class:`StoreUnavailableError`, as an unreachable Redis does.
``lose_replies`` applies a merge and then raises, as a reply lost after the command ran does.
"""

from __future__ import annotations

from collections.abc import Mapping

from forethought.predictors.patterns.counts import CountsState
from forethought.predictors.patterns.store import MemoryPatternStore
from forethought.stores.errors import StoreUnavailableError


class MemoryIdempotentPatternStore:
    """A shared pattern store in memory, with merge ids and simulated outages."""

    def __init__(self) -> None:
        self._store = MemoryPatternStore()
        self._applied: set[str] = set()
        self.available = True
        self.lose_replies = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if not self.available:
            raise StoreUnavailableError("the fake store is down")

    def load(self, fingerprint: str) -> CountsState:
        self._check()
        return self._store.load(fingerprint)

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None, merge_id: str | None = None) -> None:
        self._check()
        if merge_id is None or merge_id not in self._applied:
            self._store.merge(fingerprint, deltas, ticks, epoch, half_life)
            if merge_id is not None:
                self._applied.add(merge_id)
        if self.lose_replies:
            raise StoreUnavailableError("the reply was lost")

    def close(self) -> None:
        """Nothing to release."""
