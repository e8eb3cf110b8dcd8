"""The write clock proxies share through their store: every tick of any of them is seen by all, none is lost,
and a store that cannot be written never fails the call that ticks."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from forethought.mcp.writeclock import MemoryWriteClock, SqliteWriteClock

TICKS = 200


def test_clocks_on_one_store_share_every_tick(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    clocks = [SqliteWriteClock(store) for _ in range(3)]
    try:
        start = clocks[0].reading()
        threads = [threading.Thread(target=lambda c=c: [c.tick() for _ in range(TICKS)]) for c in clocks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {c.reading() for c in clocks} == {start + 3 * TICKS}
    finally:
        for c in clocks:
            c.close()
    reopened = SqliteWriteClock(store)
    try:
        assert reopened.reading() == start + 3 * TICKS  # kept in the file
    finally:
        reopened.close()


def test_memory_clock_counts() -> None:
    clock = MemoryWriteClock()
    before = clock.reading()
    clock.tick()
    clock.tick()
    assert clock.reading() == before + 2


def test_a_store_that_cannot_be_written_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                              ) -> None:
    store = tmp_path / "store.sqlite"
    clock = SqliteWriteClock(store, busy_timeout_s=0.05)
    blocker = sqlite3.connect(store, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the store
        clock.tick()
        assert "could not tick the write clock" in caplog.text
        blocker.execute("ROLLBACK")
        before = clock.reading()
        clock.tick()
        assert clock.reading() == before + 1
    finally:
        blocker.close()
        clock.close()
