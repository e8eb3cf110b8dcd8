"""Degrade to local: a shared pattern store that keeps working (locally) while Redis is away.

:class:`FallbackPatternStore` puts a shared store (normally :class:`RedisPatternStore`) in front of a local
mirror. While the shared store answers, it is the truth and the mirror holds the last state loaded. When
a call fails, the store emits a ``degraded`` :class:`StoreEvent`, answers from the mirror, applies merges
to the mirror and queues them (each with its idempotency id), and does not try the shared store again
before ``retry_after_s`` on its clock, so a dead or slow Redis costs at most one timeout per period. The
first successful call afterwards replays the queue (a batch applied before a lost reply is not applied
twice) and emits ``recovered``. Nothing here raises because of the shared store: a load that fails
because of what the store holds (:class:`~forethought.stores.errors.StoreIntegrityError`, e.g. a clock
that is not a number), or with an error no store should raise, is answered from the mirror like an
outage.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from forethought._core.clock import SYSTEM_CLOCK, Clock
from forethought.predictors.patterns.counts import CountsState
from forethought.predictors.patterns.store import CountsChanges, IncrementalStore, MemoryPatternStore
from forethought.stores.errors import StoreError, StoreUnavailableError
from forethought.stores.events import EventSink, StoreEvent, emit

__all__ = ["FallbackPatternStore", "IdempotentPatternStore", "StoreEvent"]

T = TypeVar("T")
RETRY_AFTER_S = 5.0
MAX_QUEUED_MERGES = 10_000


class IdempotentPatternStore(Protocol):
    """A pattern store whose merges take an idempotency id (a repeat of the same id is a no-op)."""

    def load(self, fingerprint: str) -> CountsState: ...

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None, merge_id: str | None = None) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Merge:
    fingerprint: str
    deltas: Mapping[str, float]
    ticks: float
    epoch: float
    half_life: float | None
    merge_id: str


class FallbackPatternStore:
    """A :class:`~forethought.predictors.patterns.store.PatternStore`: shared when it can be, local when not."""

    def __init__(self, shared: IdempotentPatternStore, on_event: EventSink | None = None, clock: Clock = SYSTEM_CLOCK,
                 retry_after_s: float = RETRY_AFTER_S, max_queued: int = MAX_QUEUED_MERGES,
                 name: str = "redis-patterns") -> None:
        self._shared = shared
        self._on_event = on_event
        self._clock = clock
        self._retry_after_s = retry_after_s
        self._max_queued = max_queued
        self._name = name
        self._lock = threading.RLock()
        self._mirror: dict[str, MemoryPatternStore] = {}
        self._queue: list[_Merge] = []
        self._down_until: float | None = None
        self.degraded = False
        self.dropped = 0

    def _emit(self, kind: str, detail: str = "") -> None:
        emit(self._on_event, StoreEvent(kind, self._name, detail))

    def _fail(self, exc: StoreError) -> None:
        self._down_until = self._clock.monotonic() + self._retry_after_s
        if not self.degraded:
            self.degraded = True
            self._emit("degraded", str(exc))

    def _shared_usable(self) -> bool:
        """Whether to try the shared store now; replays the queue first (False if that fails)."""
        if self._down_until is not None and self._clock.monotonic() < self._down_until:
            return False
        while self._queue:
            m = self._queue[0]
            try:
                self._shared.merge(m.fingerprint, m.deltas, m.ticks, m.epoch, m.half_life, merge_id=m.merge_id)
            except StoreUnavailableError as exc:
                self._fail(exc)
                return False
            except StoreError as exc:  # refused by Redis itself: retrying would never succeed
                self.dropped += 1
                self._emit("dropped", f"queued merge refused: {exc}")
            except Exception as exc:  # no store should raise this: kept queued, like an outage
                self._fail(StoreUnavailableError(f"merge failed: {type(exc).__name__}: {exc}"))
                return False
            self._queue.pop(0)
        return True

    def _recovered(self) -> None:
        self._down_until = None
        if self.degraded:
            self.degraded = False
            self._emit("recovered")

    def _mirror_of(self, fingerprint: str) -> MemoryPatternStore:
        mirror = self._mirror.get(fingerprint)
        if mirror is None:
            mirror = self._mirror[fingerprint] = MemoryPatternStore()
        return mirror

    def _remember(self, fingerprint: str, state: CountsState) -> None:
        mirror = self._mirror[fingerprint] = MemoryPatternStore()
        if state.values or state.clock:
            # Seeding an empty store with the whole state reproduces it (stored epoch = the state's epoch).
            mirror.merge(fingerprint, state.values, state.clock, state.epoch, None)

    def _read_shared(self, read: Callable[[], T]) -> T | None:
        """``read()`` of the shared store when it is usable and answers; None (the store marked down) when
        not. Nothing it raises reaches the caller: an error no store should raise counts as an outage."""
        if not self._shared_usable():
            return None
        try:
            answer = read()
        except StoreError as exc:
            self._fail(exc)
            return None
        except Exception as exc:  # no store should raise this: never let it reach the predictor
            self._fail(StoreUnavailableError(f"load failed: {type(exc).__name__}: {exc}"))
            return None
        self._recovered()
        return answer

    def load(self, fingerprint: str) -> CountsState:
        with self._lock:
            state = self._read_shared(lambda: self._shared.load(fingerprint))
            if state is None:
                return self._mirror_of(fingerprint).load(fingerprint)
            self._remember(fingerprint, state)
            return state

    def load_since(self, fingerprint: str, mark: str | None) -> CountsChanges:
        """What changed since ``mark``: from the shared store when it answers and can tell (the mirror then
        takes the same changes), else from the mirror (whose marks the shared store answers with
        everything, and the other way round)."""
        shared = self._shared
        with self._lock:
            changes = self._read_shared(
                (lambda: shared.load_since(fingerprint, mark)) if isinstance(shared, IncrementalStore)
                else (lambda: CountsChanges.whole(shared.load(fingerprint))))
            if changes is None:
                return self._mirror_of(fingerprint).load_since(fingerprint, mark)
            self._mirror_of(fingerprint).put(fingerprint, changes)
            return changes

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None) -> None:
        merge = _Merge(fingerprint, dict(deltas), ticks, epoch, half_life, uuid.uuid4().hex)
        with self._lock:
            self._mirror_of(fingerprint).merge(fingerprint, merge.deltas, ticks, epoch, half_life)
            if self._shared_usable():
                try:
                    self._shared.merge(fingerprint, merge.deltas, ticks, epoch, half_life, merge_id=merge.merge_id)
                except StoreUnavailableError as exc:
                    self._fail(exc)
                except StoreError as exc:  # refused by Redis itself: kept locally, never retried
                    self.dropped += 1
                    self._emit("dropped", f"merge refused: {exc}")
                    return
                except Exception as exc:  # no store should raise this: queued and retried, like an outage
                    self._fail(StoreUnavailableError(f"merge failed: {type(exc).__name__}: {exc}"))
                else:
                    self._recovered()
                    return
            if len(self._queue) >= self._max_queued:
                self._queue.pop(0)
                self.dropped += 1
                self._emit("dropped", "queued merge dropped (queue full)")
            self._queue.append(merge)

    @property
    def queued(self) -> int:
        """Merges waiting for the shared store to come back."""
        return len(self._queue)

    def close(self) -> None:
        with self._lock:
            if self._queue and self._shared_usable():
                self._recovered()
            self._shared.close()
