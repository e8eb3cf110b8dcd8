"""What the proxy did, as one value, and its running totals persisted beside the learned patterns.

:class:`ProxyStats` is one client session's (or many sessions') count of calls, hits, misses, seconds
saved and the upstream calls speculation added, in all and per tool (:class:`ToolStats`: what a server whose
reads are observable sees of speculation is exactly its extra calls). :class:`StatsStore` adds each finished
session's stats to tables of the same SQLite file the pattern store uses, keyed by the upstream tool-set
fingerprint, in one ``BEGIN IMMEDIATE`` transaction, so concurrent proxy processes add up without losing
anything. A private tool is counted under ``"<private>"``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from forethought.mcp.transactions import immediate

BUSY_TIMEOUT_S = 30.0
TABLE = "mcp_proxy_stats"
TOOLS_TABLE = "mcp_proxy_tool_stats"


@dataclass(frozen=True, slots=True)
class ToolStats:
    """What one tool's calls cost upstream."""

    calls: int = 0
    """The client's calls of it."""
    hits: int = 0
    """Of those, answered by a guess."""
    upstream_calls: int = 0
    """``tools/call`` requests sent upstream for it: the client's own, guesses of it, and the validator calls
    that guarded those guesses."""
    priced_out: int = 0
    """Guesses of it not made because the calibration found them worth less than they cost (a tool that
    answers faster than a guess costs, say): where every guess is priced out, speculation is off there."""

    @property
    def extra_upstream_calls(self) -> int:
        """Upstream requests beyond one per client call: what speculation added at the server."""
        return max(0, self.upstream_calls - self.calls)

    def plus(self, other: ToolStats) -> ToolStats:
        return ToolStats(self.calls + other.calls, self.hits + other.hits, self.upstream_calls + other.upstream_calls,
                         self.priced_out + other.priced_out)


def _merged(a: Mapping[str, ToolStats], b: Mapping[str, ToolStats]) -> dict[str, ToolStats]:
    out = dict(a)
    for tool, stats in b.items():
        out[tool] = out[tool].plus(stats) if tool in out else stats
    return out


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
    tools: Mapping[str, ToolStats] = field(default_factory=dict)
    """The same, per tool (calls, hits, upstream calls)."""

    def plus(self, other: ProxyStats) -> ProxyStats:
        summed: dict[str, Any] = {name: getattr(self, name) + getattr(other, name) for name in _COLUMNS}
        return ProxyStats(**summed, tools=_merged(self.tools, other.tools))

    @property
    def hit_rate(self) -> float:
        return self.hits / self.calls if self.calls else 0.0

    def summary(self) -> str:
        """The one line printed when the proxy exits."""
        line = (f"forethought mcp-proxy: {self.calls} calls, {self.hits} hits ({self.hit_rate:.0%}), "
                f"{self.misses} misses, {self.passthrough} passed through, {self.saved_s:.2f} s saved, "
                f"{self.extra_upstream_calls} extra upstream calls")
        priced_out = sum(t.priced_out for t in self.tools.values())
        if priced_out and not self.speculative_calls:
            line += f"; speculation off: all {priced_out} guesses cost more than they would save"
        elif priced_out:
            line += f"; {priced_out} guesses not made (not worth their cost)"
        return line


_COLUMNS = tuple(f.name for f in fields(ProxyStats) if f.name != "tools")
_TOOL_COLUMNS = tuple(f.name for f in fields(ToolStats))


class StatsStore:
    """Additive per-fingerprint totals in a SQLite file (WAL, busy timeout, immediate transactions)."""

    def __init__(self, path: str | Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            columns = ", ".join(f"{c} REAL NOT NULL DEFAULT 0" for c in _COLUMNS)
            tool_columns = ", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in _TOOL_COLUMNS)
            with immediate(self._conn):
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (fingerprint TEXT PRIMARY KEY, {columns})")
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS {TOOLS_TABLE} (fingerprint TEXT NOT NULL, tool TEXT "
                                   f"NOT NULL, {tool_columns}, PRIMARY KEY (fingerprint, tool))")
        except BaseException:  # not a database (or a damaged one): the error is the caller's, the file closed
            self._conn.close()
            raise

    def add(self, fingerprint: str, stats: ProxyStats) -> None:
        """Add ``stats`` to the totals of ``fingerprint``."""
        values = [getattr(stats, c) for c in _COLUMNS]
        names = ", ".join(_COLUMNS)
        marks = ", ".join("?" for _ in _COLUMNS)
        updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in _COLUMNS)
        tool_names = ", ".join(_TOOL_COLUMNS)
        tool_marks = ", ".join("?" for _ in _TOOL_COLUMNS)
        tool_updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in _TOOL_COLUMNS)
        with immediate(self._conn):
            self._conn.execute(f"INSERT INTO {TABLE} (fingerprint, {names}) VALUES (?, {marks}) "
                               f"ON CONFLICT(fingerprint) DO UPDATE SET {updates}", [fingerprint, *values])
            for tool, counts in stats.tools.items():
                self._conn.execute(
                    f"INSERT INTO {TOOLS_TABLE} (fingerprint, tool, {tool_names}) VALUES (?, ?, {tool_marks}) "
                    f"ON CONFLICT(fingerprint, tool) DO UPDATE SET {tool_updates}",
                    [fingerprint, tool, *(getattr(counts, c) for c in _TOOL_COLUMNS)])

    def by_fingerprint(self) -> dict[str, ProxyStats]:
        rows = self._conn.execute(f"SELECT fingerprint, {', '.join(_COLUMNS)} FROM {TABLE} ORDER BY fingerprint")
        tools: dict[str, dict[str, ToolStats]] = {}
        for row in self._conn.execute(f"SELECT fingerprint, tool, {', '.join(_TOOL_COLUMNS)} FROM {TOOLS_TABLE} "
                                      "ORDER BY fingerprint, tool"):
            tools.setdefault(row[0], {})[row[1]] = _tool_stats(row[2:])
        return {row[0]: _stats(row[1:], tools.get(row[0], {})) for row in rows}

    def of(self, fingerprint: str) -> ProxyStats:
        """The totals of one tool set (what a session start reads: two indexed lookups, whatever the store holds
        for other tool sets). Raises ``sqlite3.Error`` (``sqlite3.DataError`` for counts another program garbled)."""
        row = self._conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} WHERE fingerprint = ?",
                                 (fingerprint,)).fetchone()
        if row is None:
            return ProxyStats()
        tools = {tool_row[0]: _tool_stats(tool_row[1:]) for tool_row in self._conn.execute(
            f"SELECT tool, {', '.join(_TOOL_COLUMNS)} FROM {TOOLS_TABLE} WHERE fingerprint = ?", (fingerprint,))}
        return _stats(row, tools)

    def total(self) -> ProxyStats:
        total = ProxyStats()
        for stats in self.by_fingerprint().values():
            total = total.plus(stats)
        return total

    def close(self) -> None:
        self._conn.close()


def stats_document(stats: ProxyStats) -> dict[str, Any]:
    """``stats`` as JSON: every count, and per tool its calls, hits, upstream and extra upstream calls."""
    doc: dict[str, Any] = {c: getattr(stats, c) for c in _COLUMNS}
    doc["tools"] = {tool: {"calls": t.calls, "hits": t.hits, "upstream_calls": t.upstream_calls,
                           "extra_upstream_calls": t.extra_upstream_calls, "priced_out": t.priced_out}
                    for tool, t in sorted(stats.tools.items())}
    return doc


def _stats(values: tuple[float, ...], tools: Mapping[str, ToolStats]) -> ProxyStats:
    with _counts():
        parsed: dict[str, Any] = {c: float(v) if c == "saved_s" else int(v)
                                  for c, v in zip(_COLUMNS, values, strict=True)}
    return ProxyStats(**parsed, tools=dict(tools))


def _tool_stats(values: tuple[Any, ...]) -> ToolStats:
    with _counts():
        return ToolStats(*(int(v) for v in values))


@contextmanager
def _counts() -> Iterator[None]:
    """Stored values read as counts: one another program garbled (text, infinity, NULL) is ``sqlite3.DataError``,
    an error of the store like any other."""
    try:
        yield
    except (ValueError, TypeError, OverflowError) as exc:
        raise sqlite3.DataError(f"the stats hold a value that is not a count ({type(exc).__name__})") from None
