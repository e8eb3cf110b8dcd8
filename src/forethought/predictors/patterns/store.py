"""Where learned patterns live between runs: a store of counters per tool-set fingerprint.

A :class:`PatternStore` keeps, for each fingerprint (see :func:`tool_set_fingerprint`), a clock, an epoch
and named counters (:mod:`pattern_counts`). Writers only ever *add*: :meth:`PatternStore.merge` adds a
batch of counter deltas and clock ticks in one transaction, so several processes learning at once merge
cleanly in any order and nothing is lost. :class:`SqlitePatternStore` is the default (stdlib ``sqlite3``,
WAL journal, busy timeout, ``BEGIN IMMEDIATE`` transactions); :class:`MemoryPatternStore` is the fake for
tests and for runs that should not persist. A shared store (Redis, a service) implements the same
protocol.

Stores compact: the predictor cuts its tables to their budgets (:mod:`budgets`), and a store that can
delete (:class:`CompactingStore`: both here) deletes the counters cut at the next save, before adding what
was learned since, so a store's size follows the budgets rather than the history. A store that cannot only
grows; a predictor loading it cuts what it loads to the budgets.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
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


def tool_set_fingerprint(tools: Mapping[str, Any]) -> str:
    """A short stable id of a tool set: tool names and their parameter schemas (order-insensitive)."""
    text = json.dumps({name: tools[name] for name in sorted(tools)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


class MemoryPatternStore:
    """A :class:`PatternStore` in a dict: the fake for tests, shared by predictors of one process."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[float, float, dict[str, float]]] = {}
        self._lock = threading.Lock()
        self.merges = 0

    def load(self, fingerprint: str) -> CountsState:
        with self._lock:
            clock, epoch, values = self._data.get(fingerprint, (0.0, 0.0, {}))
            return CountsState(clock, epoch, dict(values))

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
            self.merges += 1

    def discard(self, fingerprint: str, keys: Sequence[str]) -> None:
        with self._lock:
            if fingerprint in self._data:
                values = self._data[fingerprint][2]
                for key in keys:
                    values.pop(key, None)

    def close(self) -> None:
        """Nothing to release."""


class SqlitePatternStore:
    """A :class:`PatternStore` in one SQLite file, safe for several processes (WAL, additive upserts)."""

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
        with self._lock, self._transaction("DEFERRED"):
            row = self._conn.execute("SELECT clock, epoch FROM pattern_meta WHERE fingerprint = ?",
                                     (fingerprint,)).fetchone()
            values = dict(self._conn.execute("SELECT key, value FROM pattern_counts WHERE fingerprint = ?",
                                             (fingerprint,)).fetchall())
        clock, epoch = (float(row[0]), float(row[1])) if row else (0.0, 0.0)
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
                clock, stored_epoch = float(row[0]), float(row[1])
            self._conn.executemany(
                "INSERT INTO pattern_counts VALUES (?, ?, ?) ON CONFLICT(fingerprint, key) "
                "DO UPDATE SET value = value + excluded.value",
                [(fingerprint, key, rescale(delta, epoch, stored_epoch, half_life) if decays(key) else delta)
                 for key, delta in deltas.items()])
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
                                   [(fingerprint, key) for key in keys])

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
