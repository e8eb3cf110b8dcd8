"""How sessions begin: the first call of each session, per tool set and client, so that a session's first call
can be guessed before there is any result to predict from.

A proxy sees nothing of a session before its first call but its handshake and its tool list, and a pattern
predictor needs calls to predict from. Yet clients begin alike (an agent framework's first step, a user's
habit): :class:`FirstCalls` counts, per tool-set fingerprint and client name, which call each session made
first, and offers the most frequent one with its share of the sessions as its confidence. It is kept in the
store's SQLite file (:class:`SqliteFirstCalls`, writers only add, so proxy processes share it) or in memory
(:class:`MemoryFirstCalls`). A private tool's call is never recorded. Both are bounded (:data:`MAX_CALLS` calls
per tool set and client, :data:`MAX_GROUPS` of those, calls of at most :data:`MAX_CALL_CHARS`), so what a store
holds and what a session's start reads do not grow with the sessions seen.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from forethought._core.calls import ToolCall, dumps_canonical
from forethought.mcp.transactions import immediate

TABLE = "mcp_first_calls"
GROUPS_TABLE = "mcp_first_call_groups"
BUSY_TIMEOUT_S = 5.0
MAX_CALLS = 32
"""Distinct first calls kept per tool set and client: a new one takes the place of the least frequent (the
oldest of those), so a client whose first calls never repeat keeps a bounded table."""
MAX_GROUPS = 256
"""Tool sets times clients kept: a new one takes the place of the one whose sessions began longest ago."""
MAX_CALL_CHARS = 8192
"""A first call whose canonical text is longer is not counted (a bulky call is not a habit worth storing)."""
MAX_CLIENT_CHARS = 128
"""A client name longer than this (the client chooses it) is counted under its digest."""


_NUMBER = "CASE WHEN typeof(sessions) IN ('integer', 'real') AND sessions > 0 THEN sessions ELSE 0 END"
"""A stored count in SQL, 0 when another program garbled it."""


class FirstCalls(Protocol):
    """Counts of sessions' first calls."""

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        """The most frequent first call for the tool set and client, and its share of their sessions."""

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        """One more session began with ``call``."""


log = logging.getLogger(__name__)

def _text(call: ToolCall) -> str | None:
    try:
        text = dumps_canonical({"name": call.name, "arguments": dict(call.arguments)})
    except (TypeError, ValueError, RecursionError):
        return None
    return text if len(text) <= MAX_CALL_CHARS else None


def client_key(client: str) -> str:
    """How a client name is stored: as it is, or its digest when it is longer than :data:`MAX_CLIENT_CHARS`."""
    if len(client) <= MAX_CLIENT_CHARS:
        return client
    return "#" + hashlib.blake2b(client.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _call(text: object) -> ToolCall | None:
    """The call stored as ``text``, or ``None`` for anything else (a row another program garbled)."""
    try:
        data = json.loads(text) if isinstance(text, str | bytes) else None
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(
                data.get("arguments"), dict):
            return None
        return ToolCall(data["name"], dict(data["arguments"]))
    except (ValueError, RecursionError):
        return None


def _count(value: object) -> float | None:
    """A stored count, or ``None`` when another program garbled it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


class MemoryFirstCalls:
    """First calls counted in memory (``--memory``), with the bounds of the store's."""

    def __init__(self) -> None:
        self._counts: OrderedDict[tuple[str, str], Counter[str]] = OrderedDict()
        """Per group, the sessions of each first call; most recently begun group last."""
        self._totals: dict[tuple[str, str], int] = {}
        """Per group, every session counted (evicted calls' included), so a share stays a share of all."""

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        group = (fingerprint, client_key(client))
        counts = self._counts.get(group)
        if not counts:
            return None
        text, n = min(counts.items(), key=lambda item: (-item[1], item[0]))  # ties: the smallest text, as the store
        call = _call(text)
        return None if call is None else (call, n / self._totals[group])

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        text = _text(call)
        if text is None:
            return
        group = (fingerprint, client_key(client))
        counts = self._counts.get(group)
        if counts is None:
            counts = self._counts[group] = Counter()
            while len(self._counts) > MAX_GROUPS:
                evicted, _ = self._counts.popitem(last=False)
                del self._totals[evicted]
        self._counts.move_to_end(group)
        if text not in counts and len(counts) >= MAX_CALLS:
            del counts[min(counts, key=counts.__getitem__)]  # the least frequent, the oldest of those
        counts[text] += 1
        self._totals[group] = self._totals.get(group, 0) + 1


class SqliteFirstCalls:
    """First calls counted in the store's SQLite file, shared by the proxy processes that use it.

    ``mcp_first_calls`` holds at most :data:`MAX_CALLS` calls per tool set and client, and
    ``mcp_first_call_groups`` each group's sessions and when one last began (at most :data:`MAX_GROUPS`). A store
    written before the bounds existed is brought within them when opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._conn.execute("PRAGMA journal_mode=WAL")
        with immediate(self._conn):
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (fingerprint TEXT NOT NULL, "
                               "client TEXT NOT NULL, call TEXT NOT NULL, sessions INTEGER NOT NULL, "
                               "PRIMARY KEY (fingerprint, client, call))")
            exists = self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                        (GROUPS_TABLE,)).fetchone()
            if exists is None:
                self._conn.execute(f"CREATE TABLE {GROUPS_TABLE} (fingerprint TEXT NOT NULL, client TEXT NOT NULL, "
                                   "sessions INTEGER NOT NULL, seen INTEGER NOT NULL, "
                                   "PRIMARY KEY (fingerprint, client))")
                # A store from before the bounds: its long client names digested, its groups, then the bounds.
                for (client,) in self._conn.execute(f"SELECT DISTINCT client FROM {TABLE} WHERE LENGTH(client) > ?",
                                                    (MAX_CLIENT_CHARS,)).fetchall():
                    if isinstance(client, str):
                        self._conn.execute(f"UPDATE OR REPLACE {TABLE} SET client = ? WHERE client = ?",
                                           (client_key(client), client))
                self._conn.execute(f"INSERT INTO {GROUPS_TABLE} SELECT fingerprint, client, "
                                   f"SUM(MAX(0, CAST(sessions AS INTEGER))), 0 FROM {TABLE} "
                                   "GROUP BY fingerprint, client")
                for fingerprint, client in self._conn.execute(
                        f"SELECT fingerprint, client FROM {GROUPS_TABLE}").fetchall():
                    self._trim_calls(fingerprint, client, MAX_CALLS)
                self._trim_groups()

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        """The most frequent first call and its share; ``None`` when none is known, or the store cannot be read
        or holds nothing usable (a busy, broken or garbled file costs the guess, never the session)."""
        group = (fingerprint, client_key(client))
        try:
            with self._lock:
                rows = self._conn.execute(f"SELECT call, sessions FROM {TABLE} WHERE fingerprint = ? AND client = ? "
                                          "ORDER BY sessions DESC, call LIMIT 1", group).fetchall()
                # The calls kept can count more than the group (an older version, sharing the store, counts
                # calls only; another program garbled the group's count): the larger is the group's sessions.
                total = self._conn.execute(f"SELECT MAX(COALESCE((SELECT {_NUMBER} FROM {GROUPS_TABLE} WHERE "
                                           f"fingerprint = ?1 AND client = ?2), 0), COALESCE((SELECT SUM({_NUMBER}) "
                                           f"FROM {TABLE} WHERE fingerprint = ?1 AND client = ?2), 0))",
                                           group).fetchone()
        except sqlite3.Error as exc:
            log.warning("the first-calls store could not be read: %s", type(exc).__name__)
            return None
        if not rows or total is None or total[0] is None:
            return None
        call, sessions, all_sessions = _call(rows[0][0]), _count(rows[0][1]), _count(total[0])
        if call is None or sessions is None or all_sessions is None or sessions > all_sessions:
            return None
        return call, sessions / all_sessions

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        text = _text(call)
        if text is None:
            return
        group = (fingerprint, client_key(client))
        try:
            with self._lock, immediate(self._conn):
                counted = self._conn.execute(f"UPDATE {TABLE} SET sessions = sessions + 1 WHERE fingerprint = ? AND "
                                             "client = ? AND call = ?", (*group, text)).rowcount
                if not counted:
                    self._trim_calls(*group, MAX_CALLS - 1)
                    self._conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, 1)", (*group, text))
                seen = self._conn.execute(f"SELECT COALESCE(MAX(seen), 0) + 1 FROM {GROUPS_TABLE}").fetchone()[0]
                known = self._conn.execute(f"UPDATE {GROUPS_TABLE} SET sessions = sessions + 1, seen = ? WHERE "
                                           "fingerprint = ? AND client = ?", (seen, *group)).rowcount
                if not known:
                    self._conn.execute(f"INSERT INTO {GROUPS_TABLE} VALUES (?, ?, 1, ?)", (*group, seen))
                    self._trim_groups()
        except sqlite3.Error as exc:  # never the client's call's failure
            log.warning("the first-calls store could not be written: %s", type(exc).__name__)

    def _trim_calls(self, fingerprint: str, client: str, keep: int) -> None:
        """Delete a group's least frequent calls (the oldest of equals) beyond ``keep``."""
        self._conn.execute(f"DELETE FROM {TABLE} WHERE rowid IN (SELECT rowid FROM {TABLE} WHERE fingerprint = ? AND "
                           "client = ? ORDER BY sessions DESC, rowid DESC LIMIT -1 OFFSET ?)",
                           (fingerprint, client, keep))

    def _trim_groups(self) -> None:
        """Delete the groups (and their calls) whose sessions began longest ago, beyond :data:`MAX_GROUPS`."""
        stale = self._conn.execute(f"SELECT fingerprint, client FROM {GROUPS_TABLE} ORDER BY seen DESC, "
                                   "sessions DESC LIMIT -1 OFFSET ?", (MAX_GROUPS,)).fetchall()
        for group in stale:
            self._conn.execute(f"DELETE FROM {GROUPS_TABLE} WHERE fingerprint = ? AND client = ?", group)
            self._conn.execute(f"DELETE FROM {TABLE} WHERE fingerprint = ? AND client = ?", group)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def counts_of(first: FirstCalls, fingerprint: str, client: str) -> Mapping[str, Any]:
    """For reports: the most likely first call's tool and share (empty when none is known)."""
    found = first.most_likely(fingerprint, client)
    return {} if found is None else {"tool": found[0].name, "share": round(found[1], 4)}
