"""A write clock shared by every proxy that shares a store: a write through any of them makes the
speculations of all of them stale.

A client often talks to several servers whose state overlaps (a filesystem server edits the files a git
server reports on), each behind a proxy of its own that sees only its own server's calls. Each proxy ticks
the clock before a call that may write (any call of a tool that is not read-only, and any call it relays
blind) and again when that call has ended, so a write counts as in progress until its answer is back. A
speculation records the clock's reading when it starts; it is served only if the reading is unchanged at
claim time. :class:`SqliteWriteClock` keeps the reading in the store's SQLite file (one row, one
atomic increment), so proxy processes of one user share it; :class:`MemoryWriteClock` serves the
client sessions of one proxy process when there is no store.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Protocol

TABLE = "mcp_write_clock"
BUSY_TIMEOUT_S = 5.0
"""How long a tick or a reading waits for a busy store (a reading that fails makes a guess unservable)."""

log = logging.getLogger(__name__)


class WriteClock(Protocol):
    """A counter of writes begun and ended, readable by every proxy sharing it."""

    def reading(self) -> int:
        """The current count."""

    def tick(self) -> None:
        """Count one write beginning or ending."""


class MemoryWriteClock:
    """The clock of one process (the proxy's client sessions share it)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def reading(self) -> int:
        return self._count

    def tick(self) -> None:
        with self._lock:
            self._count += 1


class SqliteWriteClock:
    """The clock in a SQLite file (WAL), shared by the proxy processes that use the same store."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        self._lock = threading.Lock()
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY CHECK (id = 0), "
                           "count INTEGER NOT NULL)")
        self._conn.execute(f"INSERT OR IGNORE INTO {TABLE} (id, count) VALUES (0, 0)")

    def reading(self) -> int:
        with self._lock:
            row = self._conn.execute(f"SELECT count FROM {TABLE} WHERE id = 0").fetchone()
        return int(row[0]) if row is not None else 0

    def tick(self) -> None:
        """Count one write; a store that cannot be written is logged, never the client's call's failure."""
        try:
            with self._lock:
                self._conn.execute(f"UPDATE {TABLE} SET count = count + 1 WHERE id = 0")
        except sqlite3.Error as exc:
            log.warning("could not tick the write clock in %s: %s", self.path, exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
