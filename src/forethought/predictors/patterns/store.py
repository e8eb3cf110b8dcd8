"""Where learned patterns live between runs: a store of counters per tool-set fingerprint.

A :class:`PatternStore` keeps, for each fingerprint (see :func:`tool_set_fingerprint`), a clock, an epoch
and named counters (:mod:`pattern_counts`). Writers only ever *add*: :meth:`PatternStore.merge` adds a
batch of counter deltas and clock ticks in one transaction, so several processes learning at once merge
cleanly in any order and nothing is lost. :class:`SqlitePatternStore` is the default (stdlib ``sqlite3``,
WAL journal, busy timeout, ``BEGIN IMMEDIATE`` transactions); :class:`MemoryPatternStore` is the fake for
tests and for runs that should not persist. A shared store (Redis, a service) implements the same
protocol.

Stores that many predictors share also answer what changed since a mark (:class:`IncrementalStore`:
:class:`MemoryPatternStore` here, :class:`~forethought.stores.redis_patterns.RedisPatternStore`), so a
predictor's ``sync`` fetches the counters merged since its last one instead of the whole model: its cost
follows what the others learned meanwhile, not the size of what everyone learned. A mark is opaque: the
store's generation (new when the store starts empty) and the number of its last change. A mark the store
cannot answer from (another generation, older than the changes it keeps, from before a rebase) gets the
whole state, flagged ``complete``.

Stores compact: the predictor cuts its tables to their budgets (:mod:`budgets`), and a store that can
delete (:class:`CompactingStore`: both here) deletes the counters cut at the next save, before adding what
was learned since, so a store's size follows the budgets rather than the history. A store that cannot only
grows; a predictor loading it cuts what it loads to the budgets.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from forethought.predictors.patterns.counts import (
    PLAIN_PREFIX,
    REBASE_AFTER_HALF_LIVES,
    CountsState,
    decays,
    rescale,
)

BUSY_TIMEOUT_S = 30.0
SCHEMA_VERSION = 1
KEPT_CHANGES_SLACK = 1024
"""A memory store keeps the change marks of at most twice its counters plus this many keys (the oldest
are forgotten; a mark from before them gets the whole state)."""


def tool_set_fingerprint(tools: Mapping[str, Any]) -> str:
    """A short stable id of a tool set: tool names and their parameter schemas (order-insensitive)."""
    text = json.dumps({name: tools[name] for name in sorted(tools)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def storable_key(key: str) -> bool:
    """Whether counter name ``key`` can be stored: it is text UTF-8 can encode (a value holding a lone
    surrogate, as ``json.loads`` gives for a model's ``"\\ud83d"``, cannot; such a counter is learnt in
    memory only)."""
    if key.isascii():
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(deltas: Mapping[str, float]) -> dict[str, float]:
    """``deltas`` without what no store can hold: names :func:`storable_key` refuses, numbers that are not
    finite. A store drops them rather than fail the whole batch (and every later one, as the batch stays
    pending): the rest is saved."""
    return {key: delta for key, delta in deltas.items()
            if isinstance(delta, int | float) and math.isfinite(delta) and storable_key(key)}


_STORED_OR_ZERO = ("(CASE WHEN typeof(value) IN ('integer', 'real') AND value BETWEEN -1.7976931348623157e308 "
                   "AND 1.7976931348623157e308 THEN value ELSE 0 END)")
"""A stored counter as a merge reads it: 0 when it is not a finite number (text or bytes another program
wrote, an infinity), so the merge repairs it, as :func:`finite_number` leaves it out of a load."""


def finite_number(value: object) -> float | None:
    """``value`` as a float when a database gave a finite number (an int or a float, not a bool); else
    ``None`` (text, bytes, NULL, an infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        return None
    return number if math.isfinite(number) else None


def _meta(row: Sequence[object] | None, epoch: float) -> tuple[float, float]:
    """(clock, epoch) of a ``pattern_meta`` row; (0, ``epoch``) when there is none or they are not finite
    numbers."""
    if row is None:
        return 0.0, epoch
    clock, stored = finite_number(row[0]), finite_number(row[1])
    return (0.0, epoch) if clock is None or stored is None else (clock, stored)


def _rebase_target(clock: float, epoch: float, half_life: float | None) -> float | None:
    if half_life is None or (clock - epoch) / half_life <= REBASE_AFTER_HALF_LIVES:
        return None
    return clock


@runtime_checkable
class PatternStore(Protocol):
    """Counters per fingerprint, merged additively."""

    def load(self, fingerprint: str) -> CountsState:
        """Everything stored under ``fingerprint`` (an empty state when nothing is)."""

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None) -> None:
        """Add ``deltas`` (scaled at ``epoch``) and advance the clock by ``ticks``, atomically."""

    def close(self) -> None:
        """Release resources; the store is not used afterwards."""


@runtime_checkable
class CompactingStore(Protocol):
    """A :class:`PatternStore` that can also delete counters (what a predictor cut to its budgets)."""

    def discard(self, fingerprint: str, keys: Sequence[str]) -> None:
        """Delete ``keys`` stored under ``fingerprint`` (keys not stored are ignored), atomically."""


@dataclass(frozen=True, slots=True)
class CountsChanges:
    """What a store holds for a fingerprint beyond a mark: the clock, the epoch, the counters that changed
    since the mark (``None``: no longer stored, or not a number) and the mark to ask from next time. When
    ``complete``, ``values`` is everything stored (the mark could not be answered from) and nothing is
    ``None``."""

    clock: float
    epoch: float
    mark: str
    values: Mapping[str, float | None]
    complete: bool

    @classmethod
    def whole(cls, state: CountsState, mark: str = "") -> CountsChanges:
        """``state`` as a complete answer (with no ``mark`` to ask from, the next answer is whole too)."""
        return cls(state.clock, state.epoch, mark, dict(state.values), True)

    def state(self) -> CountsState:
        """The whole state (only when ``complete``)."""
        if not self.complete:
            raise ValueError("only a complete answer is a whole state")
        return CountsState(self.clock, self.epoch, {k: v for k, v in self.values.items() if v is not None})


@runtime_checkable
class IncrementalStore(Protocol):
    """A :class:`PatternStore` that can tell what changed since a mark it gave."""

    def load_since(self, fingerprint: str, mark: str | None) -> CountsChanges:
        """The counters changed since ``mark`` (everything, ``complete``, when ``mark`` is None or cannot be
        answered from)."""


def split_mark(mark: str | None) -> tuple[str, int] | None:
    """``(generation, sequence)`` of a mark; None when it is not one."""
    if not mark or ":" not in mark:
        return None
    generation, _, sequence = mark.rpartition(":")
    return (generation, int(sequence)) if sequence.isdigit() else None


@dataclass(slots=True)
class _Log:
    """A memory store's change marks for one fingerprint: keys in the order of their latest change."""

    generation: str = field(default_factory=lambda: uuid.uuid4().hex)
    sequence: int = 0
    floor: int = 0
    """Marks older than this cannot be answered from (a rebase, or marks forgotten)."""
    changed: dict[str, int] = field(default_factory=dict)

    def touch(self, keys: Iterable[str]) -> None:
        self.sequence += 1
        changed = self.changed
        for key in keys:
            changed.pop(key, None)
            changed[key] = self.sequence

    def trim(self, stored: int) -> None:
        changed = self.changed
        while len(changed) > 2 * stored + KEPT_CHANGES_SLACK:
            key = next(iter(changed))
            self.floor = max(self.floor, changed.pop(key))


class MemoryPatternStore:
    """A :class:`PatternStore` in a dict: the fake for tests, shared by predictors of one process."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[float, float, dict[str, float]]] = {}
        self._logs: dict[str, _Log] = {}
        self._lock = threading.Lock()
        self.merges = 0

    def load(self, fingerprint: str) -> CountsState:
        with self._lock:
            clock, epoch, values = self._data.get(fingerprint, (0.0, 0.0, {}))
            return CountsState(clock, epoch, dict(values))

    def load_since(self, fingerprint: str, mark: str | None) -> CountsChanges:
        with self._lock:
            clock, epoch, values = self._data.get(fingerprint, (0.0, 0.0, {}))
            log = self._logs.setdefault(fingerprint, _Log())
            now = f"{log.generation}:{log.sequence}"
            parsed = split_mark(mark)
            if parsed is None or parsed[0] != log.generation or not log.floor <= parsed[1] <= log.sequence:
                return CountsChanges.whole(CountsState(clock, epoch, values), now)
            changed: dict[str, float | None] = {}
            for key, sequence in reversed(log.changed.items()):
                if sequence <= parsed[1]:
                    break
                changed[key] = values.get(key)
            return CountsChanges(clock, epoch, now, changed, False)

    def put(self, fingerprint: str, changes: CountsChanges) -> None:
        """Make the store hold what ``changes`` says (all of it when complete; else those counters), as a
        mirror of another store does."""
        with self._lock:
            _, _, values = self._data.get(fingerprint, (0.0, 0.0, {}))
            values = {k: v for k, v in changes.values.items() if v is not None} if changes.complete else values
            log = self._logs.setdefault(fingerprint, _Log())
            if not changes.complete:
                for key, value in changes.values.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                log.touch(changes.values)
            else:
                log.touch(())
                log.floor = log.sequence
            self._data[fingerprint] = (changes.clock, changes.epoch, values)
            log.trim(len(values))

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None) -> None:
        with self._lock:
            clock, stored_epoch, values = self._data.get(fingerprint, (0.0, epoch, {}))
            for key, delta in deltas.items():
                value = rescale(delta, epoch, stored_epoch, half_life) if decays(key) else delta
                values[key] = values.get(key, 0.0) + value
            clock += ticks
            target = _rebase_target(clock, stored_epoch, half_life)
            if target is not None:
                for key in values:
                    if decays(key):
                        values[key] = rescale(values[key], stored_epoch, target, half_life)
                stored_epoch = target
            self._data[fingerprint] = (clock, stored_epoch, values)
            log = self._logs.setdefault(fingerprint, _Log())
            log.touch(deltas)
            if target is not None:
                log.floor = log.sequence  # every number changed: marks from before answer with everything
            log.trim(len(values))
            self.merges += 1

    def discard(self, fingerprint: str, keys: Sequence[str]) -> None:
        with self._lock:
            if fingerprint in self._data:
                values = self._data[fingerprint][2]
                for key in keys:
                    values.pop(key, None)
                log = self._logs.setdefault(fingerprint, _Log())
                log.touch(keys)
                log.trim(len(values))

    def close(self) -> None:
        """Nothing to release."""


class SqlitePatternStore:
    """A :class:`PatternStore` in one SQLite file, safe for several processes (WAL, additive upserts).

    A merge leaves out what SQLite cannot hold (:func:`storable`: a name UTF-8 cannot encode, a number that
    is not finite) instead of failing the batch."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        self._lock = threading.Lock()
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        with self._transaction():
            self._conn.execute("CREATE TABLE IF NOT EXISTS pattern_meta (fingerprint TEXT PRIMARY KEY, "
                               "clock REAL NOT NULL, epoch REAL NOT NULL, version INTEGER NOT NULL)")
            self._conn.execute("CREATE TABLE IF NOT EXISTS pattern_counts (fingerprint TEXT NOT NULL, "
                               "key TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (fingerprint, key)) "
                               "WITHOUT ROWID")

    def _transaction(self, mode: str = "IMMEDIATE") -> _Transaction:
        return _Transaction(self._conn, mode)

    def load(self, fingerprint: str) -> CountsState:
        """What is stored under ``fingerprint``; a row whose number is not a finite number (text or bytes
        another program wrote, an infinity) or whose name is not text is left out, and a clock or epoch
        that is not one reads as 0 (the next merge starts them afresh), so one bad row never fails a load."""
        with self._lock, self._transaction("DEFERRED"):
            row = self._conn.execute("SELECT clock, epoch FROM pattern_meta WHERE fingerprint = ?",
                                     (fingerprint,)).fetchone()
            rows = self._conn.execute("SELECT key, value FROM pattern_counts WHERE fingerprint = ?",
                                      (fingerprint,)).fetchall()
        values = {key: number for key, value in rows
                  if isinstance(key, str) and (number := finite_number(value)) is not None}
        clock, epoch = _meta(row, 0.0)
        return CountsState(clock, epoch, values)

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None) -> None:
        with self._lock, self._transaction():
            row = self._conn.execute("SELECT clock, epoch FROM pattern_meta WHERE fingerprint = ?",
                                     (fingerprint,)).fetchone()
            if row is None:
                clock, stored_epoch = 0.0, epoch
                self._conn.execute("INSERT INTO pattern_meta VALUES (?, ?, ?, ?)",
                                   (fingerprint, clock, stored_epoch, SCHEMA_VERSION))
            else:
                clock, stored_epoch = _meta(row, epoch)  # not numbers: started afresh, never blocking a save
            self._conn.executemany(
                "INSERT INTO pattern_counts VALUES (?, ?, ?) ON CONFLICT(fingerprint, key) "
                f"DO UPDATE SET value = {_STORED_OR_ZERO} + excluded.value",
                [(fingerprint, key, rescale(delta, epoch, stored_epoch, half_life) if decays(key) else delta)
                 for key, delta in storable(deltas).items()])
            clock += ticks
            target = _rebase_target(clock, stored_epoch, half_life)
            if target is not None and half_life is not None:
                factor = 2.0 ** ((stored_epoch - target) / half_life)
                self._conn.execute("UPDATE pattern_counts SET value = value * ? WHERE fingerprint = ? "
                                   "AND substr(key, 1, ?) != ?",
                                   (factor, fingerprint, len(PLAIN_PREFIX), PLAIN_PREFIX))
                stored_epoch = target
            self._conn.execute("UPDATE pattern_meta SET clock = ?, epoch = ? WHERE fingerprint = ?",
                               (clock, stored_epoch, fingerprint))

    def discard(self, fingerprint: str, keys: Sequence[str]) -> None:
        with self._lock, self._transaction():
            self._conn.executemany("DELETE FROM pattern_counts WHERE fingerprint = ? AND key = ?",
                                   [(fingerprint, key) for key in keys if storable_key(key)])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _Transaction:
    """``BEGIN <mode>`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, conn: sqlite3.Connection, mode: str) -> None:
        self._conn = conn
        self._mode = mode

    def __enter__(self) -> None:
        self._conn.execute(f"BEGIN {self._mode}")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
