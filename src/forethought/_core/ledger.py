"""A session's ledger: its counts, what it tells others, and how a speculation that ends is accounted for.

:class:`Ledger` is the part of a :class:`~forethought._core.session.Session` that keeps score: every event
is counted and published here (telemetry with keyed key hashes, never a private call's key), every lifecycle
move is published here (it is the session's :class:`~forethought._core.lifecycle.TransitionSink`), the
circuit breaker and the calibration of guess sources learn here, and :meth:`Ledger.discard` is the one place
a speculation that leaves unserved is ended: moved to DISCARDED, its work cancelled, its slot released, its
snapshot dropped, its tool time counted as waste. Every launched speculation ends exactly once, there or as
a hit (:meth:`Ledger.served`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

from forethought._core.breaker import CircuitBreaker, Outcome
from forethought._core.calls import CallKey
from forethought._core.capacity import PriorityCapacity
from forethought._core.entry import Entry
from forethought._core.lifecycle import FINISHED, State, move
from forethought._core.pricing import Calibration
from forethought._core.tools import Tool
from forethought.telemetry import SAVING_KINDS, EventKind, SessionStats, Telemetry, stats_from

__all__ = ["Guess", "Ledger"]

_WASTED, _PREEMPTED = EventKind.WASTED, EventKind.PREEMPTED
_ERROR, _USEFUL, _WASTE = Outcome.ERROR, Outcome.USEFUL, Outcome.WASTED
_DISCARDED, _CLAIMED, _SERVED, _COMMITTED_STATE = State.DISCARDED, State.CLAIMED, State.SERVED, State.COMMITTED
_CAUSES = {kind: kind.value for kind in EventKind}
"""Each event kind's name, looked up once (``Enum.value`` is a Python-level property)."""
_HIT_CAUSE = EventKind.HIT.value
_HIT = EventKind.HIT


class Guess:
    """A guess that never became a speculation of its own (refused, joined or deferred): what its moves name."""

    __slots__ = ("key", "tool")

    def __init__(self, tool: Tool | None, key: CallKey) -> None:
        self.tool = tool
        self.key = key


class Ledger:
    """Counts, telemetry, breaker records, calibration and the ends of one session's speculations."""

    def __init__(self, session_id: str, telemetry: Telemetry, breaker: CircuitBreaker, calibration: Calibration,
                 capacity: PriorityCapacity) -> None:
        self.session_id = session_id
        self._telemetry = telemetry
        self._breaker = breaker
        self._calibration = calibration
        self._capacity = capacity
        self._counts: Counter[EventKind] = Counter()
        self._saved_s = 0.0
        self._wasted_s = 0.0
        self.watchers = telemetry.transition_watchers
        """Who listens to lifecycle moves (the telemetry's own list): moves are published only while it is not
        empty."""
        self._scope = f"session:{session_id}"
        self._tool_scopes: dict[str, str] = {}
        self.observe_wait = telemetry.observe_wait
        """Record how long an authoritative call waited for its result (by outcome)."""

    # --- events and moves ---------------------------------------------------------------------------

    def emit(self, kind: EventKind, tool: Tool | None, key: str, source: str = "",
             confidence: float | None = None, seconds: float = 0.0, detail: str = "") -> None:
        """Count and publish one event; a private tool is shown by its label, with no key hash."""
        self._counts[kind] += 1
        if seconds > 0.0:
            if kind in SAVING_KINDS:
                self._saved_s += seconds
            elif kind is _WASTED:
                self._wasted_s += seconds
        if tool is None:
            label, key = "?", ""
        else:
            label = tool.label
            if tool.hide_key:
                key = ""
        self._telemetry.record(kind, self.session_id, label, key, source, confidence, seconds, detail)

    def moved(self, subject: Any, old: State, new: State, cause: str) -> None:
        """Publish a lifecycle move (the :class:`~forethought._core.lifecycle.TransitionSink`); from a worker
        thread it is handed to the speculation's event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread starting a tool: publish on the loop the session runs on
            task = getattr(subject, "task", None)
            if task is not None:
                task.get_loop().call_soon_threadsafe(self._publish_move, subject, old, new, cause)
            return
        self._publish_move(subject, old, new, cause)

    def _publish_move(self, subject: Any, old: State, new: State, cause: str) -> None:
        tool: Tool | None = subject.tool
        if tool is None:
            label, key = "?", ""
        else:
            label, key = tool.label, ("" if tool.hide_key else subject.key)
        self._telemetry.transition(self.session_id, label, key, old.value, new.value, cause)

    def stats(self) -> SessionStats:
        return stats_from(self._counts, self._saved_s, self._wasted_s)


    # --- what others learn ----------------------------------------------------------------------------

    def tool_scope(self, tool: str) -> str:
        scope = self._tool_scopes.get(tool)
        if scope is None:
            scope = self._tool_scopes[tool] = f"tool:{tool}"
        return scope

    def allowed(self, tool: str) -> bool:
        """Whether the circuit breaker lets this session speculate ``tool`` now."""
        return self._breaker.allows(self.tool_scope(tool)) and self._breaker.allows(self._scope)

    def record(self, tool: str, outcome: Outcome) -> None:
        self._breaker.record(self.tool_scope(tool), outcome)
        self._breaker.record(self._scope, outcome)

    def learn(self, votes: Iterable[tuple[str, float]], hit: bool) -> None:
        """Every (source, confidence) that asked for a call learns whether it was the model's call."""
        for source, confidence in votes:
            self._calibration.record(source, confidence, hit)

    def forget(self) -> None:
        """The session closed: its breaker scope goes."""
        self._breaker.forget(self._scope)

    # --- how a speculation ends ---------------------------------------------------------------------

    def discard(self, entry: Entry, kind: EventKind | None, detail: str = "", learn: bool = True) -> None:
        """End an entry that leaves unserved (already out of the store): DISCARDED, its work cancelled.

        Emits ``kind`` (if any), then WASTED with the tool seconds when the tool ran and served nothing. The
        breaker counts an error, or waste when the tool ran; a guess stopped before its tool started cost
        nothing and is not counted. An entry that has already ended is left as it is (it ends exactly once).
        """
        if entry.state in FINISHED:
            return
        claimed = entry.state is _CLAIMED
        move(entry, _DISCARDED, _CAUSES[kind] if kind is not None else "")
        task = entry.task
        if task is not None and not task.done():
            task.cancel()
        if entry.slot is not None:
            self._capacity.release(entry.slot)  # a task cancelled before it ran never does
        entry.drop_snapshot()
        if learn and kind is not _PREEMPTED:  # a preempted guess never learned whether it was right
            self.learn(entry.votes, claimed or entry.partial_hits > 0)
        if kind is not None:
            self.emit(kind, entry.tool, entry.key, entry.source, entry.confidence, detail=detail)
        ran = entry.started is not None and not entry.partial_hits
        if entry.error is not None:
            self.record(entry.tool.name, _ERROR)
        elif ran:
            self.record(entry.tool.name, _WASTE)
        if ran:
            self.emit(_WASTED, entry.tool, entry.key, entry.source, entry.confidence,
                      seconds=entry.run_seconds, detail=detail)

    def served(self, entry: Entry, saved_s: float, committed: bool) -> None:
        """A claimed entry served its call (a hit): SERVED or COMMITTED, counted, its sources learn."""
        move(entry, _COMMITTED_STATE if committed else _SERVED, _HIT_CAUSE)
        self.record(entry.tool.name, _USEFUL)
        record = self._calibration.record
        for source, confidence in entry.votes:
            record(source, confidence, True)
        self.emit(_HIT, entry.tool, entry.key, entry.source, entry.confidence, saved_s)
