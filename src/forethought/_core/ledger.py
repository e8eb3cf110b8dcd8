"""A session's state and bookkeeping: keys, telemetry, breaker records and how unserved guesses end.

:class:`SessionBase` holds what one agent's session keeps between calls (its isolated store, call order,
turn budget, write epoch, counters) and the one place an unserved speculation is accounted for:
:meth:`SessionBase._finish` (every launched speculation ends exactly once, there or as a hit), used by
discards, expiry, turn ends and preemption. :class:`~forethought._core.session.Session` adds speculation and
the authoritative call path on top.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from forethought._core.breaker import Outcome
from forethought._core.calls import CallKey, ToolCall
from forethought._core.ordering import CallOrder
from forethought._core.shared import SharedRuns
from forethought._core.store import Entry, SpeculationStore
from forethought._core.tools import Tool, ToolRegistry
from forethought.errors import CallError
from forethought.telemetry import SAVING_KINDS, EventKind, SessionStats, stats_from

if TYPE_CHECKING:
    from forethought._core.runtime import Runtime

__all__ = ["CLOSE_WAIT_S", "SessionBase"]

CLOSE_WAIT_S = 5.0
"""How long :meth:`SessionBase.close` waits for cancelled speculative work to stop."""

_NEVER = float("inf")
CERTAIN_VOTE = 0.99
"""A guess with a vote at least this confident is never withdrawn by :meth:`SessionBase.revise`."""
_CANCELLED, _EXPIRED, _FAILED, _WASTED = EventKind.CANCELLED, EventKind.EXPIRED, EventKind.FAILED, EventKind.WASTED
_PREEMPTED, _WITHDRAWN, _DEFERRED = EventKind.PREEMPTED, EventKind.WITHDRAWN, EventKind.DEFERRED
_ERROR, _USEFUL, _WASTE = Outcome.ERROR, Outcome.USEFUL, Outcome.WASTED


class SessionBase:
    """One agent's session state; see :class:`~forethought._core.session.Session` for what it does."""

    def __init__(self, runtime: Runtime, session_id: str, tools: ToolRegistry) -> None:
        self.runtime = runtime
        self.id = session_id
        self.tools = tools
        self._lookup = tools.table().get
        self._now = runtime.clock.monotonic
        self._store = SpeculationStore()
        self._order = CallOrder()
        self._budget = runtime.scheduler.budget()
        self._counts: Counter[EventKind] = Counter()
        self._saved_s = 0.0
        self._wasted_s = 0.0
        self._telemetry = runtime.telemetry
        self._scope = f"session:{session_id}"
        self._tool_scopes: dict[str, str] = {}
        self._static_rejections: dict[str, tuple[Tool, str | None]] = {}
        self._epoch = 0  # bumped at start and end of every authoritative write
        self._next_expiry = _NEVER  # no entry in the store expires before this
        self.shared: SharedRuns | None = runtime.shared
        """Where speculations of shared tools obtain their values (set by :meth:`Runtime.session`)."""
        self._prepared: set[str] = set()  # tools whose prepare hook ran this turn
        self._prepare_tasks: set[asyncio.Task[None]] = set()
        self._unrun: dict[CallKey, list[tuple[str, float]]] = {}  # guesses withdrawn or deferred this turn: votes
        self.closed = False

    # --- telemetry --------------------------------------------------------------------------------

    def _emit(self, kind: EventKind, tool: Tool | None, key: str, source: str = "",
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
        self._telemetry.record(kind, self.id, label, key, source, confidence, seconds, detail)

    def stats(self) -> SessionStats:
        return stats_from(self._counts, self._saved_s, self._wasted_s)

    def _tool_scope(self, tool: str) -> str:
        scope = self._tool_scopes.get(tool)
        if scope is None:
            scope = self._tool_scopes[tool] = f"tool:{tool}"
        return scope

    def _record(self, tool: str, outcome: Outcome) -> None:
        self.runtime.breaker.record(self._tool_scope(tool), outcome)
        self.runtime.breaker.record(self._scope, outcome)

    # --- keys -------------------------------------------------------------------------------------

    def resolve(self, call: ToolCall) -> tuple[Tool, dict[str, Any], CallKey]:
        """Look up the tool and canonicalise the call; raises a :class:`CallError` on bad input."""
        if type(call) is not ToolCall and not isinstance(call, ToolCall):
            raise CallError(f"expected a ToolCall, got {type(call).__name__}")
        try:
            t = self._lookup(call.name)
        except TypeError:  # an unhashable name
            t = None
        if t is None:
            t = self.tools.get_tool(call.name)  # raises UnknownToolError
        arguments, key = t.arguments.keyed(call)
        return t, arguments, key

    # --- discarding -------------------------------------------------------------------------------

    def _finish(self, entry: Entry, kind: EventKind | None, detail: str = "", learn: bool = True) -> None:
        """Account once for an entry that leaves unserved (already out of the store); cancel its work.

        Emits ``kind`` (if any), then WASTED with the tool seconds when the tool ran and served nothing.
        The breaker counts an error, or waste when the tool ran; a guess stopped before its tool started
        cost nothing and is not counted. Always returns ``None`` (the claim's "not served").
        """
        task = entry.task
        if task is not None and not task.done():
            task.cancel()
        if entry.slot is not None:
            self.runtime.scheduler.capacity.release(entry.slot)  # a task cancelled before it ran never does
        entry.drop_snapshot()
        if learn and kind is not _PREEMPTED:  # a preempted guess never learned whether it was right
            hit = entry.claimed or entry.partial_hits > 0
            for source, confidence in entry.votes:
                self.runtime.calibration.record(source, confidence, hit)
        name = entry.tool.name
        if kind is not None:
            self._emit(kind, entry.tool, entry.key, entry.source, entry.confidence, detail=detail)
        ran = entry.started is not None and not entry.partial_hits
        if entry.error is not None:
            self._record(name, _ERROR)
        elif ran:
            self._record(name, _WASTE)
        if ran:
            self._emit(_WASTED, entry.tool, entry.key, entry.source, entry.confidence,
                       seconds=entry.run_seconds, detail=detail)

    def discard(self, key: CallKey) -> bool:
        """Discard one speculation (cancelling its work); returns whether it existed."""
        entry = self._store.pop(key)
        if entry is None:
            return False
        task = entry.task
        if task is not None and not task.done():
            kind: EventKind | None = _CANCELLED
        elif entry.error is not None:
            kind = _FAILED
        elif entry.started is None:
            kind = _CANCELLED
        else:
            kind = None
        self._finish(entry, kind, "discarded" if kind is not _FAILED else type(entry.error).__name__)
        return True

    def revise(self, key: CallKey, p_hit: float, eta_s: float | None = None) -> bool:
        """New evidence says the unclaimed speculation under ``key`` hits with chance ``p_hit``.

        It is priced again at that chance as a running guess (``eta_s`` as for ``speculate``; the tool time
        it already ran counts towards what a hit hides, and only the rest of its run is at risk); when it is
        no longer worth the policy's ``min_value_s`` and its tool has not finished, it is withdrawn:
        cancelled (WITHDRAWN, then WASTED for the tool seconds it ran) so it stops spending tool time and
        capacity. A guess some source proposed as certain (confidence 0.99 or more, such as the model's own
        streamed call) is never withdrawn. Whether a withdrawn guess would have hit is learnt when the
        turn's calls are known: a call this turn with the same key counts it as a hit for the sources that
        proposed it, the turn's end as a miss. A finished speculation is kept (its cost is spent). Returns
        whether the speculation was withdrawn.
        """
        if not 0.0 <= p_hit <= 1.0:  # NaN fails this too
            raise ValueError(f"p_hit must be in [0, 1], got {p_hit!r}")
        entry = self._store.get(key)
        if entry is None or entry.claimed or entry.task is None or entry.task.done():
            return False
        if any(confidence >= CERTAIN_VOTE for _, confidence in entry.votes):
            return False
        ran = entry.run_seconds if entry.started is not None else 0.0
        priced, _ = self.runtime.price(entry.tool, entry.source, entry.confidence, eta_s, p_hit=p_hit, ran_s=ran)
        if priced.value >= self.runtime.policy.min_value_s:
            entry.value = priced.value
            if entry.slot is not None and math.isfinite(entry.slot.value):
                entry.slot.value = priced.value
            return False
        self._store.pop(key)
        if entry.started is None:
            self._budget.refund(entry.tool.cost_units)
        self._unrun.setdefault(key, []).extend(entry.votes)
        self._finish(entry, _WITHDRAWN, f"P(hit) revised to {p_hit:.2f}", learn=False)
        return True

    def defer(self, call: ToolCall, source: str, confidence: float, detail: str = "") -> CallKey | None:
        """A guess of ``call`` is held back, not run (yet): evidence due soon makes it worth more later.

        Emits DEFERRED. Whether it would have hit is learnt as a withdrawn guess's is (a call this turn with
        the same key counts it as a hit for ``source``, the turn's end as a miss), unless it runs after all
        (:meth:`undefer`). Returns its key, or ``None`` for a call that is not valid here, or a closed
        session (nothing is kept).
        """
        if self.closed:
            return None
        try:
            t, _, key = self.resolve(call)
        except CallError:
            return None
        self._unrun.setdefault(key, []).append((source, confidence))
        self._emit(_DEFERRED, t, key, source, confidence, detail=detail)
        return key

    def is_deferred(self, key: CallKey, source: str, confidence: float) -> bool:
        """Whether a guess :meth:`defer` held is still pending: its call has not come, nor the turn's end."""
        votes = self._unrun.get(key)
        return votes is not None and (source, confidence) in votes

    def undefer(self, key: CallKey, source: str, confidence: float) -> None:
        """A deferred guess runs after all: its outcome is learnt when its speculation ends, not here."""
        votes = self._unrun.get(key)
        if votes is not None and (source, confidence) in votes:
            votes.remove((source, confidence))
            if not votes:
                del self._unrun[key]

    def _learn_unrun(self, key: CallKey | None) -> None:
        """The turn's call ``key`` arrived (``None``: the turn ended): count the withdrawn and deferred
        guesses it settles."""
        if key is not None:
            votes = self._unrun.pop(key, None)
            if votes is not None:
                for source, confidence in votes:
                    self.runtime.calibration.record(source, confidence, True)
            return
        for votes in self._unrun.values():
            for source, confidence in votes:
                self.runtime.calibration.record(source, confidence, False)
        self._unrun.clear()

    def _evict_expired(self, now: float) -> None:
        """Discard every entry whose TTL has passed (EXPIRED, then WASTED if its tool ran); cancel its work.

        Called by :meth:`speculate` once the earliest expiry in the store has passed, so an expired guess
        stops holding a slot, a snapshot or memory before the turn ends.
        """
        for entry in self._store.expired(now):
            self._store.pop(entry.key)
            self._finish(entry, _EXPIRED, "TTL passed")
        self._next_expiry = self._store.earliest_expiry()

    def end_turn(self) -> int:
        """Turn-end eviction: discard every unclaimed speculation and reset the turn budget."""
        n = 0
        for entry in self._store:
            n += self.discard(entry.key)
        self._next_expiry = _NEVER
        if self._unrun:
            self._learn_unrun(None)
        self._budget.reset()
        self._prepared.clear()
        return n

    async def close(self) -> None:
        """Discard everything and wait (briefly) until cancelled speculative work has stopped."""
        self.closed = True
        tasks: list[asyncio.Task[Any]] = [e.task for e in self._store if e.task is not None and not e.task.done()]
        for task in self._prepare_tasks:
            task.cancel()
            tasks.append(task)
        self.end_turn()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        self.runtime.breaker.forget(self._scope)
