"""How sessions begin (``forethought.mcp.firstcalls``) stays bounded: calls per tool set and client, groups,
call size and client names, in memory and in the store alike, and a store from before the bounds is brought
within them when opened, its shares kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.mcp import firstcalls
from forethought.mcp.firstcalls import GROUPS_TABLE, TABLE, MemoryFirstCalls, SqliteFirstCalls, client_key

_records = st.lists(st.tuples(st.sampled_from(["fp1", "fp2", "fp3", "fp4"]), st.sampled_from(["claude", "codex"]),
                              st.integers(0, 7)), max_size=80)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records)
def test_memory_and_store_keep_the_same_bounded_counts(tmp_path_factory: pytest.TempPathFactory,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       records: list[tuple[str, str, int]]) -> None:
    monkeypatch.setattr(firstcalls, "MAX_CALLS", 3)
    monkeypatch.setattr(firstcalls, "MAX_GROUPS", 5)
    path = tmp_path_factory.mktemp("fc") / "store.sqlite"
    memory, store = MemoryFirstCalls(), SqliteFirstCalls(path)
    groups = {(fp, client) for fp in ("fp1", "fp2", "fp3", "fp4") for client in ("claude", "codex")}
    try:
        for fingerprint, client, n in records:
            call = ToolCall("read", {"path": f"/f{n}"})
            memory.record(fingerprint, client, call)
            store.record(fingerprint, client, call)
            for group in groups:
                assert memory.most_likely(*group) == store.most_likely(*group), group
        with sqlite3.connect(path) as conn:
            per_group = conn.execute(f"SELECT COUNT(*) FROM {TABLE} GROUP BY fingerprint, client").fetchall()
            assert all(count <= 3 for (count,) in per_group)
            assert conn.execute(f"SELECT COUNT(*) FROM {GROUPS_TABLE}").fetchone()[0] <= 5
            assert len(per_group) <= 5
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_frequent_first_call_survives_a_stream_of_calls_that_never_repeat(tmp_path: Path, kind: str) -> None:
    first = MemoryFirstCalls() if kind == "memory" else SqliteFirstCalls(tmp_path / "s.sqlite")
    for _ in range(5):
        first.record("fp", "claude", ToolCall("ls", {}))
    for n in range(500):  # a client whose first call names a new file every session
        first.record("fp", "claude", ToolCall("read", {"path": f"/tmp/{n}"}))
    found = first.most_likely("fp", "claude")
    assert found is not None and found[0] == ToolCall("ls", {})
    assert found[1] == pytest.approx(5 / 505)  # a share of every session, not of the calls kept
    if isinstance(first, SqliteFirstCalls):
        with sqlite3.connect(first.path) as conn:
            assert conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0] == firstcalls.MAX_CALLS
        first.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_groups_are_bounded_and_the_longest_idle_goes_first(tmp_path: Path, kind: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(firstcalls, "MAX_GROUPS", 4)
    first = MemoryFirstCalls() if kind == "memory" else SqliteFirstCalls(tmp_path / "s.sqlite")
    for n in range(4):
        first.record(f"fp{n}", "claude", ToolCall("ls", {}))
    first.record("fp0", "claude", ToolCall("ls", {}))  # fp0 began a session again: fp1 is now the longest idle
    first.record("fp9", "claude", ToolCall("pwd", {}))
    assert first.most_likely("fp1", "claude") is None
    assert [first.most_likely(f"fp{n}", "claude") for n in (0, 2, 3, 9)] == [
        (ToolCall("ls", {}), 1.0), (ToolCall("ls", {}), 1.0), (ToolCall("ls", {}), 1.0), (ToolCall("pwd", {}), 1.0)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_bulky_call_is_not_counted_and_a_long_client_name_is_stored_digested(tmp_path: Path, kind: str) -> None:
    first = MemoryFirstCalls() if kind == "memory" else SqliteFirstCalls(tmp_path / "s.sqlite")
    first.record("fp", "claude", ToolCall("write", {"text": "x" * (firstcalls.MAX_CALL_CHARS + 1)}))
    assert first.most_likely("fp", "claude") is None
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    first.record("fp", "claude", ToolCall("write", {"text": deep}))  # too deep to spell: not counted, no error
    assert first.most_likely("fp", "claude") is None
    long_name = "agent/" + "v" * 10_000
    first.record("fp", long_name, ToolCall("ls", {}))
    assert first.most_likely("fp", long_name) == (ToolCall("ls", {}), 1.0)
    assert len(client_key(long_name)) <= firstcalls.MAX_CLIENT_CHARS
    if isinstance(first, SqliteFirstCalls):
        with sqlite3.connect(first.path) as conn:
            assert conn.execute(f"SELECT MAX(LENGTH(client)) FROM {TABLE}").fetchone()[0] <= firstcalls.MAX_CLIENT_CHARS
        first.close()


def _share(first: SqliteFirstCalls, tool: str) -> float:
    found = first.most_likely("fp0", "claude")
    assert found is not None and found[0] == ToolCall(tool, {})
    return found[1]


def test_a_store_from_before_the_bounds_is_trimmed_when_opened_and_keeps_its_shares(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch
                                                                                    ) -> None:
    monkeypatch.setattr(firstcalls, "MAX_GROUPS", 3)
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the table as the proxy wrote it before, with no bound
        conn.execute(f"CREATE TABLE {TABLE} (fingerprint TEXT NOT NULL, client TEXT NOT NULL, call TEXT NOT NULL, "
                     "sessions INTEGER NOT NULL, PRIMARY KEY (fingerprint, client, call))")
        rows = [("fp0", "claude", f'{{"arguments":{{"path":"/{n}"}},"name":"read"}}', 1) for n in range(200)]
        rows.append(("fp0", "claude", '{"arguments":{},"name":"ls"}', 50))
        rows += [(f"fp{g}", "claude", '{"arguments":{},"name":"pwd"}', g) for g in range(1, 6)]
        conn.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?)", rows)
    first = SqliteFirstCalls(path)
    assert _share(first, "ls") == pytest.approx(50 / 250)
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE fingerprint = 'fp0'").fetchone()[0] == \
            firstcalls.MAX_CALLS
        assert conn.execute(f"SELECT COUNT(*) FROM {GROUPS_TABLE}").fetchone()[0] == 3
    first.close()
    reopened = SqliteFirstCalls(path)  # opening again changes nothing
    assert _share(reopened, "ls") == pytest.approx(50 / 250)
    reopened.close()


@pytest.mark.parametrize("garbage", ["many", -3, 0, None, 1])
def test_a_group_count_garbled_or_behind_falls_back_to_its_calls_count(tmp_path: Path, garbage: object) -> None:
    """A group's count another program garbled, or one an older version (which counts calls only) left behind:
    the calls' own count stands for it (before the second review, the guess was lost for good)."""
    first = SqliteFirstCalls(tmp_path / "s.sqlite")
    for call in (ToolCall("ls", {}), ToolCall("ls", {}), ToolCall("pwd", {})):
        first.record("fp", "claude", call)
    with sqlite3.connect(first.path) as conn:
        if garbage is None:
            conn.execute(f"DELETE FROM {GROUPS_TABLE}")
        else:
            conn.execute(f"UPDATE {GROUPS_TABLE} SET sessions = ?", (garbage,))
    assert first.most_likely("fp", "claude") == (ToolCall("ls", {}), 2 / 3)
    first.record("fp", "claude", ToolCall("ls", {}))  # recording goes on
    found = first.most_likely("fp", "claude")
    assert found is not None and found[0] == ToolCall("ls", {})
    first.close()


def test_a_store_from_before_the_bounds_keeps_its_long_client_names_first_calls(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    long_name = "agent/" + "v" * 300
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (fingerprint TEXT NOT NULL, client TEXT NOT NULL, call TEXT NOT NULL, "
                     "sessions INTEGER NOT NULL, PRIMARY KEY (fingerprint, client, call))")
        conn.execute(f"INSERT INTO {TABLE} VALUES ('fp', ?, ?, 3)", (long_name, '{"arguments":{},"name":"ls"}'))
    first = SqliteFirstCalls(path)
    assert first.most_likely("fp", long_name) == (ToolCall("ls", {}), 1.0)
    first.close()


def test_two_processes_sharing_a_store_count_every_session(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    one, two = SqliteFirstCalls(path), SqliteFirstCalls(path)
    for n in range(20):
        (one if n % 2 else two).record("fp", "claude", ToolCall("ls", {}) if n % 4 else ToolCall("pwd", {}))
    assert one.most_likely("fp", "claude") == (ToolCall("ls", {}), 0.75)
    assert two.most_likely("fp", "claude") == (ToolCall("ls", {}), 0.75)
    one.close()
    two.close()
