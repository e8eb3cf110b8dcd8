"""The speculation store: one session's unclaimed speculations, by canonical key.

Entries are invisible to the session until an authoritative call with the identical key claims them; a
claim removes the entry, so a result is served at most once. Identical keys are single-flight (the session
joins a second guess to the entry under its key). The store holds exactly the entries whose state is in
:data:`~forethought._core.lifecycle.IN_STORE`.
"""

from __future__ import annotations

from collections.abc import Iterator

from forethought._core.calls import CallKey
from forethought._core.entry import Entry

__all__ = ["SpeculationStore"]


class SpeculationStore:
    """Isolated speculative entries of one session, by canonical key."""

    def __init__(self) -> None:
        self._entries: dict[CallKey, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, key: CallKey) -> Entry | None:
        return self._entries.get(key)

    def add(self, entry: Entry) -> None:
        """Add ``entry``; an entry already under its key must have been popped first."""
        key = entry.key
        if key in self._entries:
            raise ValueError(f"an entry for this key is already in the store: {key[:80]!r}")
        self._entries[key] = entry

    def pop(self, key: CallKey) -> Entry | None:
        """Remove and return the entry for ``key`` (the claim primitive); ``None`` if absent."""
        return self._entries.pop(key, None)

    def of_tool(self, tool: str) -> list[Entry]:
        """Entries of one tool (candidates for a partial hit); a store holds one turn's few entries."""
        return [e for e in self._entries.values() if e.tool.name == tool]

    def expired(self, now: float) -> list[Entry]:
        """Entries whose expiry is at or before ``now`` (a claim at ``now`` would not serve them)."""
        return [e for e in self._entries.values() if e.expires <= now]

    def earliest_expiry(self) -> float:
        """The soonest expiry of any entry (infinity when the store is empty)."""
        return min((e.expires for e in self._entries.values()), default=float("inf"))

    def running_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.task is not None and not e.task.done())
