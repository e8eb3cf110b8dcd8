"""The write clock proxies share through their store, as a core ``Version``: a write in progress in any process
makes every reader's token ``None``, every ended write moves the token on for all, a process that dies
mid-write is counted as ended (never holds the clock forever), and a store that cannot be written never fails
a call nor lets this process serve a stale guess."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought._core.versions import Version, Write, read_token, still_current
from forethought.mcp.sharedclock import WRITERS_TABLE, SqliteVersion, shared_clock

THREADS, WRITES = 4, 50


def test_it_is_a_core_version_and_a_write_elsewhere_is_seen_at_once(tmp_path: Path) -> None:
    a, b = SqliteVersion(tmp_path / "s.sqlite"), SqliteVersion(tmp_path / "s.sqlite")
    try:
        assert isinstance(a, Version)
        before = b.token()
        assert before is not None
        a.begin_write()
        assert b.token() is None and a.token() is None  # in progress, for every reader
        a.end_write()
        after = b.token()
        assert after is not None and after != before  # a reader compares its own tokens over time
    finally:
        a.close()
        b.close()


def test_the_core_rule_holds_over_it(tmp_path: Path) -> None:
    clock = SqliteVersion(tmp_path / "s.sqlite")
    other = SqliteVersion(tmp_path / "s.sqlite")
    try:
        token = read_token((clock,))
        assert still_current((clock,), token)
        write = Write((), (other,))  # another process's write begins ...
        assert not still_current((clock,), token)
        assert read_token((clock,)) is None  # ... and a guess starting now is never servable
        write.end()
        write.end()  # ending twice ends once
        assert not still_current((clock,), token)
        assert still_current((clock,), read_token((clock,)))
    finally:
        clock.close()
        other.close()


def test_threads_and_connections_lose_no_write(tmp_path: Path) -> None:
    clocks = [SqliteVersion(tmp_path / "s.sqlite") for _ in range(THREADS)]
    before = clocks[0].token()

    def work(c: SqliteVersion) -> None:
        for _ in range(WRITES):
            c.begin_write()
            c.end_write()

    threads = [threading.Thread(target=work, args=(c,)) for c in clocks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        with sqlite3.connect(tmp_path / "s.sqlite") as conn:
            assert conn.execute(f"SELECT COUNT(*) FROM {WRITERS_TABLE}").fetchone() == (0,)
            assert conn.execute("SELECT version FROM mcp_clock").fetchone() == (THREADS * WRITES,)
        assert {c.token() for c in clocks} != {before}
    finally:
        for c in clocks:
            c.close()
    reopened = SqliteVersion(tmp_path / "s.sqlite")
    try:
        assert reopened.token() is not None
    finally:
        reopened.close()


_DIES_MID_WRITE = """
import os, sys
sys.path.insert(0, {src!r})
from forethought.mcp.sharedclock import SqliteVersion
clock = SqliteVersion({path!r})
clock.begin_write()
os._exit(0)
"""


def test_a_process_that_dies_mid_write_counts_as_ended(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    clock = SqliteVersion(path)
    try:
        before = clock.token()
        src = str(Path(__file__).resolve().parents[2] / "src")
        subprocess.run([sys.executable, "-c", _DIES_MID_WRITE.format(src=src, path=str(path))], check=True)
        with sqlite3.connect(path) as conn:
            assert conn.execute(f"SELECT COUNT(*) FROM {WRITERS_TABLE}").fetchone() == (1,)  # left behind
        after = clock.token()
        assert after is not None and after != before  # reaped: ended, and the version moved on
        with sqlite3.connect(path) as conn:
            assert conn.execute(f"SELECT COUNT(*) FROM {WRITERS_TABLE}").fetchone() == (0,)
    finally:
        clock.close()


@pytest.mark.parametrize("same_mark", [True, False], ids=["live-writer", "pid-reused"])
def test_a_live_writer_holds_and_a_reused_pid_does_not(tmp_path: Path, same_mark: bool) -> None:
    from forethought.mcp.sharedclock import _process_mark

    path = tmp_path / "s.sqlite"
    clock = SqliteVersion(path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mark = _process_mark(child.pid) if same_mark else "another process's start"
        if not same_mark and not _process_mark(child.pid):
            pytest.skip("no /proc here: a reused pid cannot be told apart")
        with sqlite3.connect(path) as conn:
            conn.execute(f"INSERT INTO {WRITERS_TABLE} (pid, mark) VALUES (?, ?)", (child.pid, mark))
        assert (clock.token() is None) is same_mark
    finally:
        child.kill()
        child.wait()
        clock.close()


def test_a_store_that_cannot_be_written_is_logged_never_raised_and_this_process_stays_sound(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.sqlite"
    clock = SqliteVersion(path, busy_timeout_s=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        before = clock.token()
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the store
        clock.begin_write()
        assert "could not record a write" in caplog.text
        assert clock.token() is None  # this process still knows its own write is running
        clock.end_write()
        blocker.execute("ROLLBACK")
        after = clock.token()
        assert after is not None and after != before  # its own ended write moved its token on
        clock.begin_write()  # and the store works again
        assert SqliteVersion(path).token() is None
        clock.end_write()
    finally:
        blocker.close()
        clock.close()


def test_an_ended_write_whose_row_could_not_be_deleted_is_retried(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    clock = SqliteVersion(path, busy_timeout_s=0.05)
    other = SqliteVersion(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        clock.begin_write()
        blocker.execute("BEGIN IMMEDIATE")  # held while the write ends
        clock.end_write()
        blocker.execute("ROLLBACK")
        assert other.token() is None  # its row is still there: other processes still wait
        assert clock.token() is not None  # the next use deletes it
        assert other.token() is not None
    finally:
        blocker.close()
        clock.close()
        other.close()


def test_without_a_store_the_clock_is_the_core_s_own(tmp_path: Path) -> None:
    memory = shared_clock(None)
    assert isinstance(memory, Version) and not isinstance(memory, SqliteVersion)
    stored = shared_clock(tmp_path / "s.sqlite")
    assert isinstance(stored, SqliteVersion)
    stored.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.booleans()), max_size=30))
def test_a_token_is_none_exactly_while_a_write_runs_and_moves_with_every_end(tmp_path_factory: pytest.TempPathFactory,
                                                                            steps: list[tuple[int, bool]]) -> None:
    path = tmp_path_factory.mktemp("clock") / "s.sqlite"
    clocks = (SqliteVersion(path), SqliteVersion(path))
    running = [0, 0]
    seen: list[list[int]] = [[], []]
    ended = False
    try:
        for who, begin in steps:
            if begin:
                clocks[who].begin_write()
                running[who] += 1
            elif running[who]:
                clocks[who].end_write()
                running[who] -= 1
                ended = True
            tokens = [c.token() for c in clocks]
            if sum(running):
                assert tokens == [None, None]
                continue
            for mine, token in zip(seen, tokens, strict=True):
                assert token is not None
                if ended:  # a write ended since this reader last read: its token moved to a new one
                    assert token not in mine
                elif mine:
                    assert token == mine[-1]
                mine.append(token)
            ended = False
    finally:
        for c in clocks:
            c.close()
    assert os.path.exists(path)
