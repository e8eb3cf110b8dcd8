"""A session: speculate calls early, serve matching authoritative calls from them, run the rest.

``Runtime(tools, policy)`` is shared by many sessions; ``runtime.session()`` opens one :class:`Session` with
its own isolated store. Every way in talks to it the same way: ``session.speculate(call, source=...,
confidence=...)`` for a guess, ``await session.execute(call)`` for the authoritative call, which claims a
matching speculation (a hit) or runs the tool (a miss). A session is composed of small parts, each with a
narrow job: the :class:`~forethought._core.store.SpeculationStore` (unclaimed speculations by key), the
:class:`~forethought._core.ledger.Ledger` (counts, telemetry, breaker, calibration, how a speculation ends),
:class:`~forethought._core.live.Live` (authoritative runs, commits, the write clock),
:class:`~forethought._core.speculative_run.SpeculativeRun` (each launched guess's task) and
:class:`~forethought._core.claims.Claims` (the authoritative path). A speculation's life is the state
machine of :mod:`forethought._core.lifecycle`.

The rules every way in inherits from here (docs/design.md, "Invariants" and "When a speculation may be
served"):

* an entry is served only to an identical canonical key (:func:`~forethought._core.calls.may_serve`), at
  most once, and only while fresh;
* what a caller gets is its own: the tool receives a copy of the caller's arguments as spelled, and a
  served result is the original only for the one exact hit of an unwatched entry, else a copy;
* DESTRUCTIVE or undeclared tools are never run by ``speculate``; ISOLATED_WRITE runs only on a snapshot;
* authoritative calls take no speculative slot; a claimed speculation whose tool has not started yet is
  cancelled, and one that has run longer than a fresh call plausibly needs is abandoned;
* a speculation that raised, hung or was cancelled is never surfaced: the call runs normally instead;
* a private tool (or one with private arguments) appears in telemetry and logs only as ``"<private>"`` (or
  by name with no key hash), and its errors quote no values.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from forethought._core.admission import Admission
from forethought._core.calls import CallKey, ToolCall
from forethought._core.claims import Claims
from forethought._core.entry import (
    PRICED_OUT,
    CallOutcome,
    Entry,
    SettledSpeculation,
    SpeculationTicket,
    TicketStatus,
    own_arguments,
)
from forethought._core.host import Host
from forethought._core.ledger import Guess, Ledger
from forethought._core.lifecycle import IN_STORE, State, move, proposed
from forethought._core.live import Live
from forethought._core.shared import SharedRuns
from forethought._core.speculative_run import SpeculativeRun
from forethought._core.store import SpeculationStore
from forethought._core.tools import Tool, ToolRegistry
from forethought._core.unrun import Unrun
from forethought._core.versions import Write
from forethought._core.watching import wait_started, watch_settled
from forethought.errors import CallError
from forethought.telemetry import EventKind, SessionStats

__all__ = ["CERTAIN", "CERTAIN_VOTE", "CLOSE_WAIT_S", "Host", "Session"]

CERTAIN = 0.99
"""A guess at least this likely to hit still runs when the runtime backs off completely."""
CERTAIN_VOTE = 0.99
"""A guess with a vote at least this confident is never withdrawn by :meth:`Session.revise`."""
CLOSE_WAIT_S = 5.0
"""How long :meth:`Session.close` waits for cancelled speculative work to stop."""

_NEVER = float("inf")

# Enum members looked up once: attribute access on an Enum class costs ~0.1 µs, and the hot path does many.
_CANCELLED, _DEDUPLICATED, _DEFERRED = EventKind.CANCELLED, EventKind.DEDUPLICATED, EventKind.DEFERRED
_EXPIRED, _FAILED, _LAUNCHED = EventKind.EXPIRED, EventKind.FAILED, EventKind.LAUNCHED
_PREEMPTED, _REJECTED, _STALE, _WITHDRAWN = (EventKind.PREEMPTED, EventKind.REJECTED, EventKind.STALE,
                                             EventKind.WITHDRAWN)
_T_LAUNCHED, _T_DEDUPLICATED, _T_REJECTED = TicketStatus.LAUNCHED, TicketStatus.DEDUPLICATED, TicketStatus.REJECTED
_S_QUEUED, _S_RUNNING = State.QUEUED, State.RUNNING
_S_REFUSED, _S_JOINED, _S_DEFERRED, _S_PROPOSED = State.REFUSED, State.JOINED, State.DEFERRED, State.PROPOSED
_LAUNCHED_CAUSE, _REJECTED_CAUSE = "launched", "rejected"
_DEDUPLICATED_CAUSE, _DEFERRED_CAUSE = "deduplicated", "deferred"


class Session:
    """One agent's view: an isolated speculation store and the authoritative call path.

    After :meth:`close` the session speculates nothing more; :meth:`execute` still runs calls plainly.
    """

    def __init__(self, runtime: Host, session_id: str, tools: ToolRegistry, shared: SharedRuns | None = None) -> None:
        self.runtime = runtime
        self.id = session_id
        self.tools = tools
        self.shared: SharedRuns | None = shared
        """Where speculations of shared tools obtain their values (``None``: nothing is shared)."""
        self._lookup = tools.table().get
        self._now = runtime.clock.monotonic
        self._store = SpeculationStore()
        self._budget = runtime.scheduler.budget()
        self._ledger = Ledger(session_id, runtime.telemetry, runtime.breaker, runtime.calibration,
                              runtime.scheduler.capacity)
        self._live = Live(self._ledger, tools, runtime.policy, runtime.scheduler, runtime.writes, self._now,
                          runtime.note_runtime, runtime.pressure)
        self._claims = Claims(self._store, self._ledger, self._live, self._now, runtime.claim_wait_limit,
                              lambda: self.shared)
        self._run = SpeculativeRun(runtime, self._live, self._now, lambda: self.shared).run
        self._rejection = Admission(runtime.policy, self._live, self._ledger.allowed).refusal
        self._next_expiry = _NEVER  # no entry in the store expires before this
        self._unrun = Unrun(self._ledger.learn)
        """This turn's guesses withdrawn or deferred: learnt from when the turn's calls are known."""
        self._unrun_held = self._unrun.held

    @property
    def closed(self) -> bool:
        return self._live.closed

    # --- keys -------------------------------------------------------------------------------------

    def resolve(self, call: ToolCall) -> tuple[Tool, dict[str, Any], CallKey]:
        """Look up the tool and key the call by the one rule; raises a :class:`CallError` on bad input."""
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

    # --- speculation ------------------------------------------------------------------------------

    def speculate(self, call: ToolCall, source: str = "unknown", confidence: float = 1.0, *,
                  eta_s: float | None = None) -> SpeculationTicket:
        """Start ``call`` early if policy, effect, worth, budget and breaker allow; never raises on bad guesses.

        ``eta_s``: when the caller expects the model's own call, in seconds from now (``None``: unknown);
        a hit can hide no more tool time than that. The guess is priced by its calibrated chance of a hit
        (``Runtime.price``); one worth less than the policy's ``min_value_s`` is refused, and when the turn
        budget is used up a more valuable guess takes the place of a worse one still waiting. Must be called
        from the event loop the session's calls run on.
        """
        loop = asyncio.get_running_loop()
        ledger = self._ledger
        try:
            t, arguments, key = self.resolve(call)
        except CallError as exc:
            name = getattr(call, "name", None)
            known = self.tools.get(name) if isinstance(name, str) else None
            proposed(ledger, Guess(known, ""), _S_REFUSED, _REJECTED_CAUSE)
            ledger.emit(_REJECTED, known, "", source, confidence if isinstance(confidence, float | int) else None,
                        detail=type(exc).__name__)
            why = str(exc)
            if known is not None and known.hide_key:  # a path through its arguments may hold a private value
                why = f"{known.label}: the arguments do not fit the tool's schema ({type(exc).__name__})"
            return SpeculationTicket(_T_REJECTED, None, why)
        reason = self._rejection(t, confidence)
        value = 0.0
        if reason is None:
            existing = self._store.get(key)
            if existing is not None:
                useless = self._useless(existing)
                if useless is None:
                    self._join(existing, source, confidence, eta_s)
                    proposed(ledger, existing, _S_JOINED, _DEDUPLICATED_CAUSE)
                    ledger.emit(_DEDUPLICATED, t, key, source, confidence)
                    return SpeculationTicket(_T_DEDUPLICATED, key)
                self._store.pop(key)  # a dead entry is replaced by a fresh run, not joined
                ledger.discard(existing, useless[0], useless[1])
            priced, pressure = self.runtime.price(t, source, confidence, eta_s)
            value = priced.value
            if pressure.level >= 1.0 and priced.p_hit < CERTAIN:
                reason = "backing off: " + pressure.reason
            elif value < self.runtime.policy.min_value_s:
                reason = (f"{PRICED_OUT}{1000 * value:.2f} ms (P(hit) {priced.p_hit:.2f}, hides {priced.hide_s:.3f} s) "
                          f"below {1000 * self.runtime.policy.min_value_s:.2f} ms")
            else:
                reason = self._budget.reserve(t.cost_units)
                if reason is not None and self._make_room(value):
                    reason = self._budget.reserve(t.cost_units)
        if reason is not None:
            proposed(ledger, Guess(t, key), _S_REFUSED, _REJECTED_CAUSE)
            ledger.emit(_REJECTED, t, key, source, confidence if isinstance(confidence, float | int) else None,
                        detail=reason)
            return SpeculationTicket(_T_REJECTED, key, reason)
        now = self._now()
        if now >= self._next_expiry:
            self._evict_expired(now)
        # Positional arguments: keywords would double the cost of this constructor on the hot path.
        entry = Entry(key, call, arguments, own_arguments(t.arguments.given(call)), t, source, confidence, now,
                      now + t.ttl_s, self._now, [(source, confidence)], _S_PROPOSED, ledger)
        entry.value = value
        entry.slot = self.runtime.scheduler.capacity.request(self, value, lambda: self._preempt(entry))
        move(entry, _S_QUEUED, _LAUNCHED_CAUSE)
        entry.task = loop.create_task(self._run(entry))  # it first runs after we return
        self._store.add(entry)
        if entry.expires < self._next_expiry:
            self._next_expiry = entry.expires
        ledger.emit(_LAUNCHED, t, key, source, confidence)
        return SpeculationTicket(_T_LAUNCHED, key)

    def _join(self, entry: Entry, source: str, confidence: float, eta_s: float | None) -> None:
        """A second guess of the same call: counted for calibration, and the entry is worth the better price."""
        entry.votes.append((source, confidence))
        priced, _ = self.runtime.price(entry.tool, source, confidence, eta_s)
        if priced.value > entry.value:
            entry.value = priced.value
            if entry.slot is not None:
                entry.slot.value = priced.value

    def _make_room(self, value: float) -> bool:
        """Preempt this turn's least valuable guess still waiting for a slot, if ``value`` beats it clearly."""
        waiting = [e for e in self._store if e.state is _S_QUEUED and e.slot is not None and not e.slot.holding]
        if not waiting:
            return False
        worst = min(waiting, key=lambda e: e.value)
        if value <= worst.value + self.runtime.scheduler.capacity.margin_s:
            return False
        self._preempt(worst)
        return True

    def _preempt(self, entry: Entry) -> None:
        """Cancel ``entry`` for a more valuable guess (called by the capacity, or to free turn budget)."""
        if entry.state not in IN_STORE:  # claimed or ended: never preempted
            return
        if self._store.get(entry.key) is entry:
            self._store.pop(entry.key)
        if entry.state is _S_QUEUED:
            self._budget.refund(entry.tool.cost_units)
        self._ledger.discard(entry, _PREEMPTED, "preempted by a more valuable guess")

    def _useless(self, entry: Entry) -> tuple[EventKind, str] | None:
        """Why an entry could no longer be served (expired, failed, stale), or ``None``."""
        if self._now() >= entry.expires:
            return _EXPIRED, "replaced by a new guess"
        if entry.error is not None:
            return _FAILED, type(entry.error).__name__
        if entry.started is not None and not self._claims.fresh(entry):
            return _STALE, "a write happened since it started"
        return None

    def refusal(self, t: Tool, confidence: Any) -> str | None:
        """Why :meth:`speculate` would refuse a guess of ``t`` at ``confidence`` before pricing it (the session
        closed, the tool's effect or policy, a confidence out of range or under ``min_confidence``, an open
        circuit breaker), or ``None``."""
        return self._rejection(t, confidence)

    # --- watching speculations (for the agent, code execution and servers) ------------------------

    def has_speculation(self, key: CallKey) -> bool:
        """Whether a speculation under ``key`` is waiting in this session's store (launched, not claimed)."""
        return key in self._store

    def speculation_count(self) -> int:
        """How many speculations of this turn are waiting unclaimed (running or finished)."""
        return len(self._store)

    def on_settled(self, key: CallKey, callback: Callable[[SettledSpeculation], object], *,
                   copy: bool = True) -> bool:
        """Call ``callback`` once the speculation under ``key`` has ended (at once if it already has).

        Returns ``False`` (and never calls back) when no speculation is under ``key``. The callback runs
        on the event loop; what it raises is logged, never propagated. With ``copy`` (the default) the
        callback gets its own copy of the value, and the call the speculation serves gets one too (a value
        is never shared); ``copy=False`` is for a watcher that only reads the value at once and keeps nothing
        of it (encodes it, say): it sees the original, and costs no copy on either side.
        """
        return watch_settled(self._store, key, callback, copy)

    async def wait_started(self, key: CallKey, grace_s: float, poll_s: float) -> None:
        """Give the speculation under ``key`` up to ``grace_s`` to start its tool (or end), polling.

        A claim cancels a speculation whose tool has not started yet; a caller about to claim a guess
        launched a moment ago waits here so the claim takes it instead of running the call twice.
        """
        await wait_started(self._store, key, grace_s, poll_s)

    async def wait_speculations(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until every speculation and prepare hook of this turn has finished (or ``timeout`` passes)."""
        tasks: list[asyncio.Task[Any]] = [e.task for e in self._store if e.task is not None and not e.task.done()]
        tasks += self._live.prepare_tasks
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    # --- the authoritative path -------------------------------------------------------------------

    async def execute(self, call: ToolCall, *, share_arguments: bool = False) -> Any:
        """Run ``call`` authoritatively (claiming a speculation when one matches) and return its value.

        On a miss the tool gets a private copy of the call's argument values (same values and types), so
        it cannot change objects the caller or a predictor still holds. ``share_arguments=True`` hands it
        the caller's own objects instead, as a plain function call would (the code executor's real run
        does this, so a tool that changes a list it was passed changes the program's list).
        """
        return (await self.execute_detailed(call, share_arguments=share_arguments)).value

    async def execute_detailed(self, call: ToolCall, *, share_arguments: bool = False) -> CallOutcome:
        """Like :meth:`execute`, also saying whether it was a hit and how long it waited."""
        t, arguments, key = self.resolve(call)
        if self._unrun_held:
            self._unrun.settle(key)
        return await self._claims.execute(call, t, arguments, key, share_arguments)

    def prepare(self, name: str, known: Mapping[str, Any] | None = None, source: str = "unknown") -> bool:
        """Run tool ``name``'s ``prepare`` hook for a hint (see :meth:`Live.prepare`)."""
        return self._live.prepare(name, known, source)

    def begin_untracked_write(self, states: Iterable[object] = ()) -> Write:
        """An effect outside any tool begins (a call relayed blind, a code statement the shadow could not model):
        every READ_ONLY speculation of this session, and of any session whose read tool declares no state,
        started before the returned write ends is stale at its claim, as is every speculation that reads one
        of ``states`` (declared as a tool's ``reads``). Call ``end()`` on it when the effect has really ended
        (an upstream answered), not when its caller stopped waiting."""
        return self._live.begin_untracked_write(states)

    def begin_fence(self) -> Write:
        """An effect of this session it cannot see begins (a call the caller's loop runs itself): no speculation
        of this session started before the returned write ends is served (a read, or a snapshot that would commit
        over it); other sessions are not held back. Call ``end()`` on it once the effect has surely ended."""
        return self._live.begin_fence()

    @contextlib.contextmanager
    def untracked_write(self) -> Iterator[None]:
        """:meth:`begin_untracked_write` for a block that ends when the effect does."""
        with self._live.untracked_write():
            yield

    def stats(self) -> SessionStats:
        return self._ledger.stats()

    # --- withdrawn and deferred guesses --------------------------------------------------------------

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
        if entry is None or entry.state not in (_S_QUEUED, _S_RUNNING):
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
        if entry.state is _S_QUEUED:
            self._budget.refund(entry.tool.cost_units)
        self._unrun.hold(key, entry.votes)
        self._ledger.discard(entry, _WITHDRAWN, f"P(hit) revised to {p_hit:.2f}", learn=False)
        return True

    def defer(self, call: ToolCall, source: str, confidence: float, detail: str = "") -> CallKey | None:
        """A guess of ``call`` is held back, not run (yet): evidence due soon makes it worth more later.

        Emits DEFERRED. Whether it would have hit is learnt as a withdrawn guess's is (a call this turn with
        the same key counts it as a hit for ``source``, the turn's end as a miss), unless it runs after all
        (:meth:`undefer`). Returns its key, or ``None`` for a call that is not valid here, or a closed
        session (nothing is kept).
        """
        if self._live.closed:
            return None
        try:
            t, _, key = self.resolve(call)
        except CallError:
            return None
        self._unrun.hold(key, [(source, confidence)])
        proposed(self._ledger, Guess(t, key), _S_DEFERRED, _DEFERRED_CAUSE)
        self._ledger.emit(_DEFERRED, t, key, source, confidence, detail=detail)
        return key

    def is_deferred(self, key: CallKey, source: str, confidence: float) -> bool:
        """Whether a guess :meth:`defer` held is still pending: its call has not come, nor the turn's end."""
        return self._unrun.holds(key, source, confidence)

    def undefer(self, key: CallKey, source: str, confidence: float) -> None:
        """A deferred guess runs after all: its outcome is learnt when its speculation ends, not here."""
        if self._unrun.release(key, source, confidence):
            entry = self._store.get(key)
            proposed(self._ledger, Guess(entry.tool if entry is not None else None, key), _S_PROPOSED)

    # --- turns and the end ------------------------------------------------------------------------

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
        self._ledger.discard(entry, kind, "discarded" if kind is not _FAILED else type(entry.error).__name__)
        return True

    def renew_turn(self) -> None:
        """A new model step begins where nobody ends turns (a tap, an adapter): the turn budget and the prepare
        hooks start afresh; speculations are kept (another stream of the session may still claim them: an
        unclaimed one ends by its TTL, or at :meth:`end_turn` or :meth:`close`)."""
        self._budget.reset()
        self._live.prepared.clear()

    def _evict_expired(self, now: float) -> None:
        """Discard every entry whose TTL has passed (EXPIRED, then WASTED if its tool ran); cancel its work.

        Called by :meth:`speculate` once the earliest expiry in the store has passed, so an expired guess
        stops holding a slot, a snapshot or memory before the turn ends.
        """
        for entry in self._store.expired(now):
            self._store.pop(entry.key)
            self._ledger.discard(entry, _EXPIRED, "TTL passed")
        self._next_expiry = self._store.earliest_expiry()

    def end_turn(self) -> int:
        """Turn-end eviction: discard every unclaimed speculation and reset the turn budget."""
        n = 0
        for entry in self._store:
            n += self.discard(entry.key)
        self._next_expiry = _NEVER
        if self._unrun_held:
            self._unrun.settle(None)
        self._budget.reset()
        self._live.prepared.clear()
        return n

    async def close(self) -> None:
        """Discard everything and wait (briefly) until cancelled speculative work has stopped."""
        self._live.closed = True
        tasks: list[asyncio.Task[Any]] = [e.task for e in self._store if e.task is not None and not e.task.done()]
        for task in self._live.prepare_tasks:
            task.cancel()
            tasks.append(task)
        self.end_turn()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        self._ledger.forget()
