"""What the proxy did, as one value, and its running totals persisted beside the learned patterns.

:class:`ProxyStats` is one client session's (or many sessions') count of calls, hits, misses, seconds
saved and the upstream calls speculation added. :class:`StatsStore` adds each finished session's stats to
a table of the same SQLite file the pattern store uses, keyed by the upstream tool-set fingerprint, in
one ``BEGIN IMMEDIATE`` transaction, so concurrent proxy processes add up without losing anything.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

BUSY_TIMEOUT_S = 30.0
TABLE = "mcp_proxy_stats"


@dataclass(frozen=True, slots=True)
class ProxyStats:
    """Counts of one or more client sessions."""

    sessions: int = 0
    calls: int = 0
    """``tools/call`` requests of the client."""
    hits: int = 0
    """Calls answered by a speculation."""
    misses: int = 0
    """Calls of a known tool sent upstream when asked."""
    passthrough: int = 0
    """Calls relayed without the runtime (unknown tool, multi-round retries, upstream gone)."""
    saved_s: float = 0.0
    """Seconds of upstream time the client did not wait for (the runtime's measure)."""
    speculative_calls: int = 0
    """``tools/call`` requests the proxy sent on a guess."""
    extra_upstream_calls: int = 0
    """Upstream requests beyond one per client call (guesses that answered nothing, validator calls, a
    client request raced against its guess): the upstream load speculation added."""

    def plus(self, other: ProxyStats) -> ProxyStats:
        return ProxyStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def hit_rate(self) -> float:
        return self.hits / self.calls if self.calls else 0.0

    def summary(self) -> str:
        """The one line printed when the proxy exits."""
        return (f"forethought mcp-proxy: {self.calls} calls, {self.hits} hits ({self.hit_rate:.0%}), "
                f"{self.misses} misses, {self.passthrough} passed through, {self.saved_s:.2f} s saved, "
                f"{self.extra_upstream_calls} extra upstream calls")


_COLUMNS = tuple(f.name for f in fields(ProxyStats))


class StatsStore:
    """Additive per-fingerprint totals in a SQLite file (WAL, busy timeout, immediate transactions)."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        columns = ", ".join(f"{c} REAL NOT NULL DEFAULT 0" for c in _COLUMNS)
        with self._transaction():
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (fingerprint TEXT PRIMARY KEY, {columns})")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def add(self, fingerprint: str, stats: ProxyStats) -> None:
        """Add ``stats`` to the totals of ``fingerprint``."""
        values = [getattr(stats, c) for c in _COLUMNS]
        names = ", ".join(_COLUMNS)
        marks = ", ".join("?" for _ in _COLUMNS)
        updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in _COLUMNS)
        with self._transaction():
            self._conn.execute(f"INSERT INTO {TABLE} (fingerprint, {names}) VALUES (?, {marks}) "
                               f"ON CONFLICT(fingerprint) DO UPDATE SET {updates}", [fingerprint, *values])

    def by_fingerprint(self) -> dict[str, ProxyStats]:
        rows = self._conn.execute(f"SELECT fingerprint, {', '.join(_COLUMNS)} FROM {TABLE} ORDER BY fingerprint")
        return {row[0]: _stats(row[1:]) for row in rows}

    def total(self) -> ProxyStats:
        total = ProxyStats()
        for stats in self.by_fingerprint().values():
            total = total.plus(stats)
        return total

    def close(self) -> None:
        self._conn.close()


def _stats(values: tuple[float, ...]) -> ProxyStats:
    parsed: dict[str, Any] = {c: float(v) if c == "saved_s" else int(v) for c, v in zip(_COLUMNS, values, strict=True)}
    return ProxyStats(**parsed)
