"""The write clock proxies share through their store, as a core :class:`~forethought._core.versions.Version`.

A client often talks to several servers whose state overlaps (a filesystem server edits the files a git
server reports on), each behind a proxy of its own that sees only its own server's calls. So every proxy
declares one shared state: every early-allowed tool reads it and every other tool writes it, and the core's
one write clock decides (a write is in progress from before it is sent until its upstream request has really
ended; a guess is served only if no write was in progress when it started and none has ended since).

:class:`SqliteVersion` keeps that state's version in the store's SQLite file, so proxy processes sharing a
store share it: a table of writers in progress (one row per write, naming its process) and a version counter.
A write inserts its row before it is sent and, once it has ended, deletes the row and moves the counter on in
one transaction. A process that dies mid-write leaves its row behind: any reader that finds a row of a process
that no longer runs deletes it and moves the counter on, so the dead write counts as ended then (and guesses
taken while it ran stay unservable). The process's own writes are also counted in memory, so a store that
cannot be written (held by another process past the busy timeout) never makes this process serve a stale
guess; other processes then do not see that write (it is logged). Without a store the proxy's sessions share
the core's in-memory :class:`~forethought._core.versions.StateVersion` (:func:`shared_clock`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

from forethought._core.versions import StateVersion, Version

__all__ = ["SqliteVersion", "shared_clock"]

CLOCK_TABLE = "mcp_clock"
WRITERS_TABLE = "mcp_clock_writers"
BUSY_TIMEOUT_S = 2.0
"""How long a write of the clock waits for a store another process holds (a failure is logged, never raised)."""
_LOCAL_SPAN = 1 << 40
"""The token is ``shared version * span + local version``: either moving changes it."""

log = logging.getLogger(__name__)


def _process_mark(pid: int) -> str:
    """What tells this process apart from a later one with the same pid: its start time, where /proc says."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, mark: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return not mark or _process_mark(pid) == mark


class SqliteVersion:
    """A :class:`~forethought._core.versions.Version` kept in a SQLite file, shared by the processes using it."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        self._lock = threading.Lock()
        self._local = StateVersion()
        self._rows: list[int] = []
        """Writer rows this process inserted for writes still running."""
        self._stale_rows: list[int] = []
        """Writer rows of ended writes this process could not delete yet (retried at every use)."""
        self._unrecorded = 0
        """Writes still running whose row could not be inserted (an ending write takes one of these first, so
        the rows stay while any write runs: writes are alike, only their number matters)."""
        self._pid = os.getpid()
        self._mark = _process_mark(self._pid)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {CLOCK_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 0), "
                           "version INTEGER NOT NULL)")
        self._conn.execute(f"INSERT OR IGNORE INTO {CLOCK_TABLE} (id, version) VALUES (0, 0)")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {WRITERS_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                           "pid INTEGER NOT NULL, mark TEXT NOT NULL)")

    def begin_write(self) -> None:
        self._local.begin_write()
        with self._lock:
            self._retry()
            try:
                cursor = self._conn.execute(f"INSERT INTO {WRITERS_TABLE} (pid, mark) VALUES (?, ?)",
                                            (self._pid, self._mark))
            except sqlite3.Error as exc:
                self._unrecorded += 1
                log.warning("could not record a write in the shared clock %s (other proxies will not see it): "
                            "%s", self.path, exc)
                return
            if cursor.lastrowid is not None:
                self._rows.append(cursor.lastrowid)

    def end_write(self) -> None:
        with self._lock:
            if self._unrecorded:
                self._unrecorded -= 1
            elif self._rows:
                self._stale_rows.append(self._rows.pop())
            self._retry(bump=True)
        self._local.end_write()

    def bump(self) -> None:
        with self._lock:
            try:
                self._conn.execute(f"UPDATE {CLOCK_TABLE} SET version = version + 1 WHERE id = 0")
            except sqlite3.Error as exc:
                log.warning("could not move the shared clock %s on: %s", self.path, exc)
        self._local.bump()

    def token(self) -> int | None:
        local = self._local.token()
        if local is None:
            return None
        with self._lock:
            if self._stale_rows:
                self._retry()
            try:
                row = self._conn.execute(f"SELECT version, (SELECT COUNT(*) FROM {WRITERS_TABLE}) FROM "
                                         f"{CLOCK_TABLE} WHERE id = 0").fetchone()
                if row is not None and row[1] and self._reap():
                    row = self._conn.execute(f"SELECT version, (SELECT COUNT(*) FROM {WRITERS_TABLE}) FROM "
                                             f"{CLOCK_TABLE} WHERE id = 0").fetchone()
            except sqlite3.Error:
                return None  # unreadable: nothing may be served
        if row is None or row[1]:
            return None
        return int(row[0]) * _LOCAL_SPAN + local

    def _retry(self, bump: bool = False) -> None:
        """Delete the rows of ended writes (moving the version on for each), under the lock."""
        if not self._stale_rows and not bump:
            return
        rows = list(self._stale_rows)
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    self._conn.execute(f"DELETE FROM {WRITERS_TABLE} WHERE id = ?", (row,))
                self._conn.execute(f"UPDATE {CLOCK_TABLE} SET version = version + ? WHERE id = 0",
                                   (max(len(rows), int(bump)),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            log.warning("could not end a write in the shared clock %s (retried later): %s", self.path, exc)
            return
        self._stale_rows = [r for r in self._stale_rows if r not in rows]

    def _reap(self) -> bool:
        """Delete the writer rows of processes that no longer run, moving the version on; whether any was."""
        rows = self._conn.execute(f"SELECT id, pid, mark FROM {WRITERS_TABLE}").fetchall()
        dead = [r[0] for r in rows if r[1] != self._pid and not _alive(int(r[1]), str(r[2]))]
        if not dead:
            return False
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for row in dead:
                self._conn.execute(f"DELETE FROM {WRITERS_TABLE} WHERE id = ?", (row,))
            self._conn.execute(f"UPDATE {CLOCK_TABLE} SET version = version + 1 WHERE id = 0")
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        log.info("the shared clock %s: %d write(s) of processes that died mid-write counted as ended",
                 self.path, len(dead))
        return True

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def shared_clock(store: Path | None) -> Version:
    """The clock of the proxies sharing ``store`` (``None``: this process's sessions only)."""
    return StateVersion() if store is None else SqliteVersion(store)
