"""Keeping a pattern predictor's counters in step with its store: save what it learned, take what others did.

:class:`StoreSync` is the persistence half of :class:`~forethought.predictors.patterns.predictor.PatternPredictor`.
``flush`` adds what was learned since the last save to the store (first deleting what was cut to the
budgets, where the store can: :class:`~.store.CompactingStore`). ``sync`` flushes, then takes the learning of
every other process sharing the store: the counters changed since its previous sync when the store can tell
(:class:`~.store.IncrementalStore`), so its cost follows what the others learned meanwhile rather than the
size of the model, else everything stored. ``sync_async`` does the same with the store's round trips in a
worker thread, so a caller on an event loop may go on predicting and learning meanwhile: what it adds while
the round trips run stays pending, on top of what is taken in, and is saved by the next flush.

A predictor that takes changes keeps the counters it cut to its budgets cut until another process changes
them again, where a whole load (a store that cannot tell what changed) brings them back and cuts again: the
two agree on every counter whenever no budget is reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from forethought.predictors.patterns.args import ArgumentModel
from forethought.predictors.patterns.counts import Counts, CountsState
from forethought.predictors.patterns.flow import FlowModel
from forethought.predictors.patterns.store import (
    CompactingStore,
    CountsChanges,
    IncrementalStore,
    PatternStore,
    storable,
    storable_key,
)

__all__ = ["StoreSync"]


@dataclass(slots=True)
class _Taken:
    """What one save takes from the counters (put back if the save fails)."""

    discarded: set[str]
    pending: dict[str, float]
    ticks: float
    epoch: float
    half_life: float | None


class StoreSync:
    """Flush and sync of a predictor's :class:`~.counts.Counts` with its :class:`~.store.PatternStore`."""

    store: PatternStore | None
    fingerprint: str
    counts: Counts
    flow: FlowModel
    args: ArgumentModel
    _store_mark: str | None
    _since_flush: int
    _sync_lock: asyncio.Lock | None

    def flush(self) -> None:
        """Add what was learned since the last save to the store, in one transaction; first delete from it
        what was cut since (when the store can: :class:`~.store.CompactingStore`)."""
        self._since_flush = 0
        taken = self._take()
        if self.store is None:
            return
        try:
            self._save(self.store, taken)
        except BaseException:
            self._put_back(taken)
            raise

    def sync(self) -> None:
        """Save what is pending, then take other processes' learning (see the module's docstring)."""
        store = self.store
        if store is None:
            return
        self._since_flush = 0
        taken = self._take()
        try:
            changes = self._exchange(store, taken, self._store_mark)
        except BaseException:
            self._put_back(taken)
            raise
        if not self._take_in(changes):
            self._take_in(self._exchange(store, None, None))

    async def sync_async(self) -> None:
        """:meth:`sync` with the store's round trips in a worker thread; the predictor may be used meanwhile
        on the calling loop. Syncs of one predictor run one at a time."""
        store = self.store
        if store is None:
            return
        if self._sync_lock is None:
            self._sync_lock = asyncio.Lock()
        async with self._sync_lock:
            self._since_flush = 0
            taken = self._take()
            try:
                changes = await asyncio.to_thread(self._exchange, store, taken, self._store_mark)
            except BaseException:
                self._put_back(taken)
                raise
            if not self._take_in(changes):
                self._take_in(await asyncio.to_thread(self._exchange, store, None, None))

    def _take(self) -> _Taken:
        discarded = self.counts.take_discarded()
        pending, ticks = self.counts.take_pending()
        return _Taken(discarded, pending, ticks, self.counts.epoch, self.counts.half_life)

    def _put_back(self, taken: _Taken) -> None:
        self.counts.restore_discarded(taken.discarded)
        self.counts.restore_pending(taken.pending, taken.ticks)

    def _save(self, store: PatternStore, taken: _Taken) -> None:
        """The store's side of a flush (touches nothing of the predictor's but ``taken``)."""
        if taken.discarded and isinstance(store, CompactingStore):
            store.discard(self.fingerprint, sorted(k for k in taken.discarded if storable_key(k)))
            taken.discarded = set()  # deleted: not put back if the merge fails
        if taken.pending or taken.ticks:
            # What no store can hold (a name UTF-8 cannot encode, a number that is not finite) stays in memory
            # only: put back it would fail every later save too.
            store.merge(self.fingerprint, storable(taken.pending), taken.ticks, taken.epoch, taken.half_life)
            taken.pending, taken.ticks = {}, 0.0

    def _exchange(self, store: PatternStore, taken: _Taken | None, mark: str | None) -> CountsChanges:
        """The store's side of a sync: save ``taken``, then read what changed since ``mark`` (everything
        when the store cannot tell)."""
        if taken is not None:
            self._save(store, taken)
        if isinstance(store, IncrementalStore):
            return store.load_since(self.fingerprint, mark)
        return CountsChanges.whole(store.load(self.fingerprint))

    def _take_in(self, changes: CountsChanges) -> bool:
        """Apply what a store answered; False (nothing applied) when it answered changes at another epoch
        than the counters' (a rebase here or there): then everything must be read."""
        if not changes.complete and changes.epoch != self.counts.epoch:
            return False
        self._store_mark = changes.mark
        if changes.complete:
            self._load(changes.state())
        else:
            self.counts.apply(changes.clock, changes.values)
            self._register([key for key, value in changes.values.items() if value is not None])
        return True

    def _load(self, state: CountsState) -> None:
        self.counts.load(state)
        self._register(self.counts)

    def _register(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.flow.register(key)
            self.args.register(key)
        # A store may hold more than the budgets (another process's learning, a store from before them).
        self.flow.keep_budgets()
        self.args.keep_budgets()
        self.args.build_tables()

    def close(self) -> None:
        """Save what is pending and close the store."""
        self.flush()
        if self.store is not None:
            self.store.close()
