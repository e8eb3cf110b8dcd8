"""Decayed counters: everything the pattern predictor learns is a sum that old evidence slowly leaves.

A count is kept scaled to an *epoch* so that decay never rewrites it: adding ``d`` at clock ``t`` adds
``d * 2**((t - epoch) / half_life)`` to the stored number, and the value now is the stored number times
``2**((epoch - clock) / half_life)``. Every update is therefore a plain addition, which several processes
can merge into one store in any order (:mod:`pattern_store`). When the scale grows large the counters are
*rebased* (all multiplied down, epoch moved to now). Keys starting with :data:`PLAIN_PREFIX` are not
decayed (learned weights, for example). The clock counts observed calls.

Counters can be *discarded* (:meth:`Counts.discard`): the tables that own them cut them when they run over
their budget (:mod:`budgets`). A discarded key is remembered until the next save, so that a store that can
delete (:class:`~forethought.predictors.patterns.store.CompactingStore`) forgets it too. With nothing to
save to (``keeps_pending`` false) no log of additions or discards is kept at all.

:func:`wilson_lower` is the score used on these counts: the lower end of the Wilson interval of a
success rate, so one lucky observation never looks like a certainty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

PLAIN_PREFIX = "~"
"""Keys starting with this are never decayed."""
_PLAIN_CHARS = len(PLAIN_PREFIX)

REBASE_AFTER_HALF_LIVES = 64.0
"""Rebase when stored numbers have grown by 2**64 over their current value."""


def wilson_lower(successes: float, trials: float, z: float = 1.0) -> float:
    """Lower bound of the Wilson score interval for ``successes`` out of ``trials`` (0 when no trials)."""
    if trials <= 0:
        return 0.0
    # Clamps written as conditionals (the same values as min/max): this runs in every prediction's hot loop.
    p = successes / trials
    p = p if p > 0.0 else 0.0
    p = p if p < 1.0 else 1.0
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = p * (1 - p) / trials + z2 / (4 * trials * trials)
    margin = z * math.sqrt(spread if spread > 0.0 else 0.0)
    lower = (centre - margin) / (1 + z2 / trials)
    return lower if lower > 0.0 else 0.0


def decays(key: str) -> bool:
    """Whether counter ``key`` decays with time."""
    return key[:_PLAIN_CHARS] != PLAIN_PREFIX


def rescale(value: float, from_epoch: float, to_epoch: float, half_life: float | None) -> float:
    """Re-express a stored decaying number scaled at ``from_epoch`` at scale ``to_epoch``."""
    if half_life is None or from_epoch == to_epoch:
        return value
    factor: float = 2.0 ** ((from_epoch - to_epoch) / half_life)
    return value * factor


@dataclass(frozen=True, slots=True)
class CountsState:
    """A saved set of counters: clock, epoch, and stored (epoch-scaled) numbers."""

    clock: float
    epoch: float
    values: Mapping[str, float]


class Counts:
    """Named decayed counters with a log of additions not yet saved."""

    def __init__(self, half_life: float | None = None, keeps_pending: bool = True) -> None:
        if half_life is not None and half_life <= 0:
            raise ValueError("half_life must be positive (or None for no decay)")
        self.half_life = half_life
        self.clock = 0.0
        self.epoch = 0.0
        self._values: dict[str, float] = {}
        self._pending: dict[str, float] = {}
        self._discarded: set[str] = set()
        self.keeps_pending = keeps_pending
        """Whether additions and discards are logged for a save (:meth:`take_pending`); a predictor with no
        store keeps no log (it would only grow)."""
        self._pending_ticks = 0.0
        self._scale_now = 1.0
        self.version = 0
        """Changes with every change to a counter (what was worked out from them may be reused while it
        stays)."""

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._values))

    def _refresh_scale(self) -> None:
        self.version += 1
        if self.half_life is None:
            self._scale_now = 1.0
            return
        if (self.clock - self.epoch) / self.half_life > REBASE_AFTER_HALF_LIVES:
            self.rebase(self.clock)
        self._scale_now = 2.0 ** ((self.epoch - self.clock) / self.half_life)

    def tick(self, n: float = 1.0) -> None:
        """Advance the clock by ``n`` observed calls."""
        self.clock += n
        self._pending_ticks += n
        self._refresh_scale()

    @property
    def scale(self) -> float:
        """Factor turning a stored decaying number into its value now (stored numbers never change with
        time: decay is this one factor, applied when a number is read)."""
        return self._scale_now

    def stored(self) -> Mapping[str, float]:
        """The stored numbers (read only; they change as counts are added): for a decaying key, the value
        now is ``stored()[key] * scale``, exactly what :meth:`get` returns. For hot loops."""
        return self._values

    def get(self, key: str) -> float:
        """The current (decayed) value of ``key``; 0 when never counted."""
        values = self._values
        if key not in values:
            return 0.0
        stored = values[key]
        return stored if key[:_PLAIN_CHARS] == PLAIN_PREFIX else stored * self._scale_now

    def add(self, key: str, delta: float = 1.0) -> None:
        """Add ``delta`` to ``key`` now."""
        self.version += 1
        scaled = delta / self._scale_now if decays(key) else delta
        self._values[key] = self._values.get(key, 0.0) + scaled
        if self.keeps_pending:
            self._pending[key] = self._pending.get(key, 0.0) + scaled

    def add_ones(self, keys: Iterable[str]) -> None:
        """:meth:`add` 1 to each of ``keys`` (a key listed twice gets 2), in one call."""
        self.version += 1
        values, pending = self._values, self._pending
        decayed = 1.0 / self._scale_now
        if not self.keeps_pending:
            for key in keys:
                values[key] = values.get(key, 0.0) + (decayed if key[:_PLAIN_CHARS] != PLAIN_PREFIX else 1.0)
            return
        for key in keys:
            scaled = decayed if key[:_PLAIN_CHARS] != PLAIN_PREFIX else 1.0
            values[key] = values.get(key, 0.0) + scaled
            pending[key] = pending.get(key, 0.0) + scaled

    def add_plain(self, items: Iterable[tuple[str, float]]) -> None:
        """Add each ``(key, delta)`` now, for keys that never decay (:data:`PLAIN_PREFIX`; checked): one
        call for many additions, as a learning step of many weights makes them."""
        self.version += 1
        values, pending, keep = self._values, self._pending, self.keeps_pending
        for key, delta in items:
            if key[:_PLAIN_CHARS] != PLAIN_PREFIX:
                raise ValueError(f"add_plain takes keys that never decay, not {key!r}")
            values[key] = values.get(key, 0.0) + delta
            if keep:
                pending[key] = pending.get(key, 0.0) + delta

    def discard(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` (their values and their additions not yet saved); a save then deletes them from a
        store that can (:meth:`take_discarded`). Keys never counted are ignored."""
        self.version += 1
        values, pending, keep = self._values, self._pending, self.keeps_pending
        for key in keys:
            if values.pop(key, None) is not None and keep:
                pending.pop(key, None)
                self._discarded.add(key)

    def take_discarded(self) -> set[str]:
        """The keys discarded since the last call (to delete from a store before adding the pending
        additions: one added again since was discarded with its earlier additions only)."""
        discarded, self._discarded = self._discarded, set()
        return discarded

    def restore_discarded(self, keys: Iterable[str]) -> None:
        """Put back discards that could not be saved."""
        if self.keeps_pending:
            self._discarded.update(keys)

    def rebase(self, epoch: float) -> None:
        """Re-express every decaying number (stored and pending) at scale ``epoch``."""
        for table in (self._values, self._pending):
            for key, value in table.items():
                if decays(key):
                    table[key] = rescale(value, self.epoch, epoch, self.half_life)
        self.epoch = epoch
        self.version += 1
        self._scale_now = 1.0 if self.half_life is None else 2.0 ** ((self.epoch - self.clock) / self.half_life)

    def take_pending(self) -> tuple[dict[str, float], float]:
        """The additions (epoch-scaled) and clock ticks since the last call, which are then forgotten."""
        pending, ticks = self._pending, self._pending_ticks
        self._pending, self._pending_ticks = {}, 0.0
        return pending, ticks

    def restore_pending(self, pending: Mapping[str, float], ticks: float) -> None:
        """Put back additions that could not be saved (they are merged with newer ones)."""
        for key, value in pending.items():
            self._pending[key] = self._pending.get(key, 0.0) + value
        self._pending_ticks += ticks

    def load(self, state: CountsState) -> None:
        """Replace every counter by ``state``, keeping additions not yet saved on top of it."""
        pending = {k: rescale(v, self.epoch, state.epoch, self.half_life) if decays(k) else v
                   for k, v in self._pending.items()}
        self.clock = state.clock + self._pending_ticks
        self.epoch = state.epoch
        self._values = dict(state.values)
        for key, value in pending.items():
            self._values[key] = self._values.get(key, 0.0) + value
        self._pending = pending
        self._refresh_scale()

    def apply(self, clock: float, values: Mapping[str, float | None]) -> None:
        """Take the stored numbers of ``values`` (at this epoch; ``None``: no longer stored) and the store's
        ``clock``, keeping additions not yet saved on top, as :meth:`load` does for a whole state."""
        self.clock = clock + self._pending_ticks
        stored, pending = self._values, self._pending
        for key, value in values.items():
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value + pending.get(key, 0.0)
        self._refresh_scale()

    def state(self) -> CountsState:
        """Everything, as a value (for a memory store or a test)."""
        return CountsState(self.clock, self.epoch, dict(self._values))
