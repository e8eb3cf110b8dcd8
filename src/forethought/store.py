"""The speculation store: one session's isolated speculative results, claimable by canonical key.

An :class:`Entry` holds the running task of one speculation, its provenance (which predictor, with what
confidence), its expiry and the snapshot it ran against. Entries are invisible to the session until an
authoritative call with the identical key claims them; a claim removes the entry, so a result is served at
most once. Identical keys are single-flight. Discarding an entry cancels its running work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from forethought.calls import CallKey, ToolCall
from forethought.tools import Snapshot, Tool


@dataclass(slots=True, eq=False)
class Entry:
    """One speculation: its call, provenance, timing and (once started) its task."""

    key: CallKey
    call: ToolCall
    arguments: dict[str, Any]
    tool: Tool
    source: str
    confidence: float
    created: float
    expires: float
    epoch: int
    task: asyncio.Task[Any] | None = None
    snapshot: Snapshot | None = None
    freshness: Any = None
    started: float | None = None
    finished: float | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def run_seconds(self) -> float:
        """Seconds the speculative run took (or has taken so far); 0 if it never started."""
        if self.started is None:
            return 0.0
        end = self.finished if self.finished is not None else time.monotonic()
        return max(0.0, end - self.started)

    def succeeded(self) -> bool:
        task = self.task
        return (task is not None and task.done() and not task.cancelled()
                and task.exception() is None)


class SpeculationStore:
    """Isolated speculative entries of one session, by canonical key."""

    def __init__(self) -> None:
        self._entries: dict[CallKey, Entry] = {}
        self._by_tool: dict[str, set[CallKey]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, key: CallKey) -> Entry | None:
        return self._entries.get(key)

    def add(self, entry: Entry) -> None:
        self._entries[entry.key] = entry
        self._by_tool.setdefault(entry.tool.name, set()).add(entry.key)

    def pop(self, key: CallKey) -> Entry | None:
        """Remove and return the entry for ``key`` (the claim primitive); ``None`` if absent."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            keys = self._by_tool.get(entry.tool.name)
            if keys is not None:
                keys.discard(key)
        return entry

    def of_tool(self, tool: str) -> list[Entry]:
        """Entries of one tool (candidates for a partial hit)."""
        return [self._entries[k] for k in self._by_tool.get(tool, ())]

    def expired(self, now: float) -> list[Entry]:
        return [e for e in self._entries.values() if e.expires <= now]

    def running_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.task is not None and not e.task.done())
