"""How sessions begin: the first call of each session, per tool set and client, so that a session's first call
can be guessed before there is any result to predict from.

A proxy sees nothing of a session before its first call but its handshake and its tool list, and a pattern
predictor needs calls to predict from. Yet clients begin alike (an agent framework's first step, a user's
habit): :class:`FirstCalls` counts, per tool-set fingerprint and client name, which call each session made
first, and offers the most frequent one with its share of the sessions as its confidence. It is kept in the
store's SQLite file (:class:`SqliteFirstCalls`, writers only add, so proxy processes share it) or in memory
(:class:`MemoryFirstCalls`). A private tool's call is never recorded.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from forethought._core.calls import ToolCall, dumps_canonical

TABLE = "mcp_first_calls"
BUSY_TIMEOUT_S = 5.0


class FirstCalls(Protocol):
    """Counts of sessions' first calls."""

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        """The most frequent first call for the tool set and client, and its share of their sessions."""

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        """One more session began with ``call``."""


log = logging.getLogger(__name__)

def _text(call: ToolCall) -> str | None:
    try:
        return dumps_canonical({"name": call.name, "arguments": dict(call.arguments)})
    except (TypeError, ValueError):
        return None


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


class MemoryFirstCalls:
    """First calls counted in memory (``--memory``)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], Counter[str]] = {}

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        counts = self._counts.get((fingerprint, client))
        if not counts:
            return None
        text, n = counts.most_common(1)[0]
        call = _call(text)
        return None if call is None else (call, n / sum(counts.values()))

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        text = _text(call)
        if text is not None:
            self._counts.setdefault((fingerprint, client), Counter())[text] += 1


class SqliteFirstCalls:
    """First calls counted in the store's SQLite file, shared by the proxy processes that use it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (fingerprint TEXT NOT NULL, client TEXT NOT NULL, "
                           "call TEXT NOT NULL, sessions INTEGER NOT NULL, PRIMARY KEY (fingerprint, client, call))")

    def most_likely(self, fingerprint: str, client: str) -> tuple[ToolCall, float] | None:
        """The most frequent first call and its share; ``None`` when none is known, or the store cannot be read
        or holds nothing usable (a busy, broken or garbled file costs the guess, never the session)."""
        try:
            with self._lock:
                rows = self._conn.execute(f"SELECT call, sessions FROM {TABLE} WHERE fingerprint = ? AND client = ? "
                                          "ORDER BY sessions DESC, call LIMIT 1", (fingerprint, client)).fetchall()
                total = self._conn.execute(f"SELECT SUM(sessions) FROM {TABLE} WHERE fingerprint = ? AND client = ?",
                                           (fingerprint, client)).fetchone()
        except sqlite3.Error as exc:
            log.warning("the first-calls store could not be read: %s", type(exc).__name__)
            return None
        if not rows or not total or not isinstance(total[0], int | float) or total[0] <= 0:
            return None
        call, sessions = _call(rows[0][0]), rows[0][1]
        if call is None or not isinstance(sessions, int | float) or not 0 < sessions <= total[0]:
            return None
        return call, sessions / total[0]

    def record(self, fingerprint: str, client: str, call: ToolCall) -> None:
        text = _text(call)
        if text is None:
            return
        try:
            with self._lock:
                self._conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, 1) ON CONFLICT(fingerprint, client, call) "
                                   "DO UPDATE SET sessions = sessions + 1", (fingerprint, client, text))
        except sqlite3.Error as exc:  # never the client's call's failure
            log.warning("the first-calls store could not be written: %s", type(exc).__name__)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def counts_of(first: FirstCalls, fingerprint: str, client: str) -> Mapping[str, Any]:
    """For reports: the most likely first call's tool and share (empty when none is known)."""
    found = first.most_likely(fingerprint, client)
    return {} if found is None else {"tool": found[0].name, "share": round(found[1], 4)}
