"""A session: speculate calls early, serve matching authoritative calls from them, run the rest.

``Runtime(tools, policy)`` is shared by many sessions (global concurrency, telemetry, thread pools);
``runtime.session()`` opens one :class:`Session` with its own isolated store. Predictors call
``session.speculate(call, source=..., confidence=...)``; the agent calls ``await session.execute(call)``,
which claims a matching speculation (a hit) or runs the tool (a miss). Every rule of the invariants of
docs/design.md on isolation, the side-effect boundary, authoritative first and failure transparency is
enforced here:

* an entry is served only to an identical canonical key, at most once, and only while fresh (not expired,
  no write in this session since a read-only speculation started, no write from any session to a state
  the tool reads, validator unchanged, snapshot still current);
* what a caller gets is its own: the tool receives a copy of the caller's arguments as spelled, and a
  served result is the original only for the one exact hit of an unwatched entry, else a copy;
* DESTRUCTIVE or undeclared tools are never run by ``speculate``; ISOLATED_WRITE runs only on a snapshot;
* authoritative calls take no speculative slot; a claimed speculation whose tool has not started yet is
  cancelled, and one that has run longer than a fresh call plausibly needs is abandoned for an
  authoritative run (:meth:`Runtime.claim_wait_limit`);
* a speculation that raised, hung or was cancelled is never surfaced: the call runs normally instead;
* a private tool (or one with private arguments) appears in telemetry and logs only as ``"<private>"``
  (or by name with no key hash), and its errors quote no values.

Accounting: every launched speculation ends exactly once, in :meth:`Session._finish` (unserved) or as a
hit. Saved time is credited from the speculation's own tool time, never more than it in total.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

from forethought._core.breaker import Outcome
from forethought._core.calls import CallKey, ToolCall
from forethought._core.live import LiveState
from forethought._core.ordering import CallOrder
from forethought._core.scheduler import maybe_await
from forethought._core.store import (
    PRICED_OUT,
    CallOutcome,
    Entry,
    SettledSpeculation,
    SpeculationTicket,
    isolated,
    own_arguments,
    settled_of,
)
from forethought._core.tools import Effect, Tool
from forethought._core.versions import read_token, still_current
from forethought.errors import CallError
from forethought.telemetry import EventKind

__all__ = ["CERTAIN", "Session"]

CERTAIN = 0.99
"""A guess at least this likely to hit still runs when the runtime backs off completely."""

_log = logging.getLogger(__name__)

# Enum members looked up once: attribute access on an Enum class costs ~0.1 µs, and the hot path does many.
_CANCELLED, _COMMITTED, _CONFLICT = EventKind.CANCELLED, EventKind.COMMITTED, EventKind.CONFLICT
_DEDUPLICATED, _EXPIRED, _FAILED, _HIT = EventKind.DEDUPLICATED, EventKind.EXPIRED, EventKind.FAILED, EventKind.HIT
_LAUNCHED, _MISS, _PARTIAL_HIT = EventKind.LAUNCHED, EventKind.MISS, EventKind.PARTIAL_HIT
_PREEMPTED, _PREPARED, _REJECTED, _STALE = EventKind.PREEMPTED, EventKind.PREPARED, EventKind.REJECTED, EventKind.STALE
_ISOLATED_WRITE, _READ_ONLY = Effect.ISOLATED_WRITE, Effect.READ_ONLY
_USEFUL = Outcome.USEFUL


class Session(LiveState):
    """One agent's view: an isolated speculation store and the authoritative call path.

    After :meth:`close` the session speculates nothing more; :meth:`execute` still runs calls plainly.
    """

    # --- speculation ------------------------------------------------------------------------------

    def speculate(self, call: ToolCall, source: str = "unknown", confidence: float = 1.0, *,
                  eta_s: float | None = None) -> SpeculationTicket:
        """Start ``call`` early if policy, effect, worth, budget and breaker allow; never raises on bad guesses.

        ``eta_s``: when the caller expects the model's own call, in seconds from now (``None``: unknown);
        a hit can hide no more tool time than that. The guess is priced by its calibrated chance of a hit
        (:meth:`Runtime.price`); one worth less than the policy's ``min_value_s`` is rejected, and when the
        turn budget is used up a more valuable guess takes the place of a worse one still waiting.
        Must be called from the event loop the session's calls run on.
        """
        loop = asyncio.get_running_loop()
        try:
            t, arguments, key = self.resolve(call)
        except CallError as exc:
            name = getattr(call, "name", None)
            known = self.tools.get(name) if isinstance(name, str) else None
            self._emit(_REJECTED, known, "",
                       source, confidence if isinstance(confidence, float | int) else None,
                       detail=type(exc).__name__)
            return SpeculationTicket("rejected", None, str(exc))
        reason = self._rejection(t, confidence)
        value = 0.0
        if reason is None:
            existing = self._store.get(key)
            if existing is not None:
                useless = self._useless(existing)
                if useless is None:
                    self._join(existing, source, confidence, eta_s)
                    self._emit(_DEDUPLICATED, t, key, source, confidence)
                    return SpeculationTicket("deduplicated", key)
                self._store.pop(key)  # a dead entry is replaced by a fresh run, not joined
                self._finish(existing, useless[0], useless[1])
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
            self._emit(_REJECTED, t, key, source,
                       confidence if isinstance(confidence, float | int) else None, detail=reason)
            return SpeculationTicket("rejected", key, reason)
        now = self._now()
        if now >= self._next_expiry:
            self._evict_expired(now)
        # Positional arguments: keywords would double the cost of this constructor on the hot path.
        entry = Entry(key, call, arguments, own_arguments(t.arguments.given(call)), t, source, confidence, now,
                      now + t.ttl_s, -1, self._now, [(source, confidence)])
        entry.value = value
        entry.slot = self.runtime.scheduler.capacity.request(self, value, lambda: self._preempt(entry))
        entry.task = loop.create_task(self._run_speculation(entry))  # it first runs after we return
        self._store.add(entry)
        if entry.expires < self._next_expiry:
            self._next_expiry = entry.expires
        self._emit(_LAUNCHED, t, key, source, confidence)
        return SpeculationTicket("launched", key)

    def _join(self, entry: Entry, source: str, confidence: float, eta_s: float | None) -> None:
        """A second guess of the same call: counted for calibration, and the entry is worth the better price."""
        entry.votes.append((source, confidence))
        priced, _ = self.runtime.price(entry.tool, source, confidence, eta_s)
        if priced.value > entry.value:
            entry.value = priced.value
            if entry.slot is not None and not entry.claimed:
                entry.slot.value = priced.value

    def _make_room(self, value: float) -> bool:
        """Preempt this turn's least valuable guess still waiting for a slot, if ``value`` beats it clearly."""
        waiting = [e for e in self._store if e.started is None and e.slot is not None and not e.slot.holding]
        if not waiting:
            return False
        worst = min(waiting, key=lambda e: e.value)
        if value <= worst.value + self.runtime.scheduler.capacity.margin_s:
            return False
        self._preempt(worst)
        return True

    def _preempt(self, entry: Entry) -> None:
        """Cancel ``entry`` for a more valuable guess (called by the capacity, or to free turn budget)."""
        if entry.claimed or entry.dropped:
            return
        if self._store.get(entry.key) is entry:
            self._store.pop(entry.key)
        if entry.started is None:
            self._budget.refund(entry.tool.cost_units)
        self._finish(entry, _PREEMPTED, "preempted by a more valuable guess")

    def _useless(self, entry: Entry) -> tuple[EventKind, str] | None:
        """Why an entry could no longer be served (expired, failed, stale), or ``None``."""
        if self._now() >= entry.expires:
            return _EXPIRED, "replaced by a new guess"
        if entry.error is not None:
            return _FAILED, type(entry.error).__name__
        if entry.started is not None and not self._fresh(entry):
            return _STALE, "a write happened since it started"
        return None

    def _fresh(self, entry: Entry) -> bool:
        """Whether no write can have changed what a started speculation read (any session's, for declared
        states; this session's, for any READ_ONLY tool)."""
        t = entry.tool
        if t.effect is _READ_ONLY and entry.epoch != self._epoch:
            return False
        return not t.read_versions or still_current(t.read_versions, entry.versions)

    def refusal(self, t: Tool, confidence: Any) -> str | None:
        """Why :meth:`speculate` would refuse a guess of ``t`` at ``confidence`` before pricing it (the session
        closed, the tool's effect or policy, a confidence out of range or under ``min_confidence``, an open
        circuit breaker), or ``None``."""
        return self._rejection(t, confidence)

    def _rejection(self, t: Tool, confidence: Any) -> str | None:
        if self.closed:
            return "session closed"
        cached = self._static_rejections.get(t.name)
        if cached is None or cached[0] is not t:
            cached = self._static_rejections[t.name] = (t, self._static_rejection(t))
        if cached[1] is not None:
            return cached[1]
        kind = type(confidence)
        exact = kind is float or kind is int  # the fast path; anything else is checked in full
        if not (exact or (isinstance(confidence, float | int) and not isinstance(confidence, bool))) or not (
                0.0 <= confidence <= 1.0):
            return f"confidence {confidence!r} is not a number between 0 and 1"
        policy = self.runtime.policy
        if confidence < policy.min_confidence:
            return f"confidence {confidence:.2f} below threshold {policy.min_confidence:.2f}"
        breaker = self.runtime.breaker
        if not breaker.allows(self._tool_scope(t.name)) or not breaker.allows(self._scope):
            return "circuit breaker open"
        return None

    def _static_rejection(self, t: Tool) -> str | None:
        """Why ``t`` may never be speculated under this runtime's policy (constant per tool)."""
        policy = self.runtime.policy
        if not policy.for_tool(t.name).speculate:
            return "policy denies speculation of this tool"
        if not t.speculable:
            return f"effect {t.effect.value} may not run early" + (
                " (no snapshot state)" if t.effect is _ISOLATED_WRITE else "")
        if policy.max_concurrent < 1 or policy.max_concurrent_per_session < 1:
            return "speculation disabled (no speculative slots)"
        return None

    async def _run_speculation(self, entry: Entry) -> Any:
        """The speculative task: never raises (errors land in ``entry.error``), except when cancelled."""
        t = entry.tool
        runtime = self.runtime
        capacity = runtime.scheduler.capacity
        slot = entry.slot
        assert slot is not None
        try:
            await capacity.wait(slot)
            if entry.dropped:
                return None
            entry.epoch = self._epoch
            if t.read_versions:
                entry.versions = read_token(t.read_versions)
            try:
                async with asyncio.timeout(runtime.policy.speculation_timeout_s):
                    if t.validator is not None:
                        entry.freshness = await maybe_await(t.validator(entry.call))
                    shared = self.shared
                    if shared is not None and not t.threaded and shared.shares(t):
                        entry.started = self._now()  # obtaining it is its run, from Redis or here
                        value = await shared.speculate(t, entry.key, entry.invoke)
                    elif t.threaded:
                        value = await runtime.scheduler.run_sync(entry.invoke, speculative=True)
                    else:
                        value = entry.invoke()
                    value = await maybe_await(value)
            except Exception as exc:
                entry.error = exc
                return None
            finally:
                if entry.started is not None:
                    entry.finished = self._now()
            runtime.note_runtime(t.name, entry.run_seconds)
            return value
        finally:
            capacity.release(slot)

    # --- watching speculations (for the agent, code execution and servers) ------------------------

    def has_speculation(self, key: CallKey) -> bool:
        """Whether a speculation under ``key`` is waiting in this session's store (launched, not claimed)."""
        return key in self._store

    def speculation_count(self) -> int:
        """How many speculations of this turn are waiting unclaimed (running or finished)."""
        return len(self._store)

    def on_settled(self, key: CallKey, callback: Callable[[SettledSpeculation], object]) -> bool:
        """Call ``callback`` once the speculation under ``key`` has ended (at once if it already has).

        Returns ``False`` (and never calls back) when no speculation is under ``key``. The callback runs
        on the event loop; what it raises is logged, never propagated.
        """
        entry = self._store.get(key)
        task = None if entry is None else entry.task
        if entry is None or task is None:
            return False

        def done(_: asyncio.Task[Any]) -> None:
            try:
                callback(settled_of(entry))
            except Exception as exc:
                _log.error("a settled-speculation callback for %s failed: %s", entry.tool.label,
                           type(exc).__name__, exc_info=not entry.tool.hide_key)

        entry.watched = True
        task.add_done_callback(done)
        return True

    async def wait_started(self, key: CallKey, grace_s: float, poll_s: float) -> None:
        """Give the speculation under ``key`` up to ``grace_s`` to start its tool (or end), polling.

        A claim cancels a speculation whose tool has not started yet; a caller about to claim a guess
        launched a moment ago waits here so the claim takes it instead of running the call twice.
        """
        entry = self._store.get(key)
        if entry is None or entry.task is None:
            return
        for _ in range(int(grace_s / poll_s)):
            if entry.started is not None or entry.task.done():
                return
            await asyncio.sleep(poll_s)

    async def wait_speculations(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until every speculation and prepare hook of this turn has finished (or ``timeout`` passes)."""
        tasks: list[asyncio.Task[Any]] = [e.task for e in self._store if e.task is not None and not e.task.done()]
        tasks += self._prepare_tasks
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
        start = self._now()
        if self._unrun:
            self._learn_unrun(key)
        entry = self._store.get(key)
        if (entry is not None and entry.task is not None and entry.task.done() and t.validator is None
                and self._order.clear_for(t.effect)):
            # The common hit: nothing to wait for and no await until it is served, so no other call can be
            # issued meanwhile and the call needs no place in the session's call order.
            self._store.pop(key)
            entry.claimed = True
            claimed = self._settle(entry, start, start)
            if claimed is not None:
                return claimed
        ticket, waits = self._order.begin(t.effect)
        try:
            ready = start
            if waits:
                await asyncio.wait(waits)
                ready = self._now()
            entry = self._store.pop(key)
            if entry is not None:
                entry.claimed = True
                if entry.slot is not None:
                    entry.slot.value = math.inf  # its own call waits on it now: never preempted
                try:
                    claimed = await self._claim(entry, start, ready)
                except BaseException:  # the caller was cancelled while the claim waited
                    if not entry.dropped:
                        self._finish(entry, _CANCELLED, "claim cancelled")
                    raise
                if claimed is not None:
                    return claimed
            if t.partial is not None:
                partial = self._claim_partial(t, arguments, start)
                if partial is not None:
                    return partial
            try:
                given = t.arguments.given(call)
                value = await self._run_authoritative(t, given if share_arguments else own_arguments(given, top=False))
                shared = self.shared
                if shared is not None and shared.shares(t):
                    shared.published(t, key, value)
            finally:
                waited = self._now() - start
                self._emit(_MISS, t, key, seconds=waited)
                self._telemetry.observe_wait("miss", waited)
            return CallOutcome(value, "miss", waited, 0.0)
        finally:
            CallOrder.end(ticket)

    async def _claim(self, entry: Entry, start: float, ready: float) -> CallOutcome | None:
        """Wait for ``entry`` if its tool is running, check its validator, then :meth:`_settle` it.

        ``start`` is when the call was issued, ``ready`` when its ordering let it take effect.
        """
        t, task = entry.tool, entry.task
        assert task is not None
        if not task.done():
            if self._now() >= entry.expires:
                self._finish(entry, _EXPIRED)
                return None
            if entry.started is None:
                self._finish(entry, _CANCELLED, "tool not started when claimed")
                return None
            remaining = self.runtime.claim_wait_limit(t) - entry.run_seconds
            if remaining > 0:
                await asyncio.wait([task], timeout=remaining)
            if not task.done():
                self._finish(entry, _CANCELLED, "running longer than a fresh call plausibly needs")
                return None
        if (t.validator is not None and entry.succeeded() and self._now() < entry.expires
                and not await self._validator_agrees(entry)):
            self._finish(entry, _STALE, "validator token changed")
            return None
        return self._settle(entry, start, ready)

    def _settle(self, entry: Entry, start: float, ready: float) -> CallOutcome | None:
        """Serve a finished ``entry`` if it is fresh and succeeded; ``None`` sends the caller to the miss path."""
        task = entry.task
        assert task is not None
        if self._now() >= entry.expires:
            self._finish(entry, _EXPIRED)
            return None
        if task.cancelled() or (entry.started is None and entry.error is None):
            self._finish(entry, _CANCELLED, "cancelled before it finished")
            return None
        if entry.error is not None:
            self._finish(entry, _FAILED, type(entry.error).__name__)
            return None
        t = entry.tool
        if ((t.effect is _READ_ONLY and entry.epoch != self._epoch)
                or (t.read_versions and not still_current(t.read_versions, entry.versions))):  # = not _fresh
            if entry.snapshot is not None:
                self._finish(entry, _CONFLICT, "a state it read was written since it started")
            else:
                self._finish(entry, _STALE, "a write happened since it started")
            return None
        if entry.snapshot is not None and not self._commit(entry):
            self._finish(entry, _CONFLICT, "state changed since the snapshot")
            return None
        now = self._now()
        waited = now - start
        tool_s = entry.run_seconds
        saved = max(0.0, min(tool_s - (now - ready), tool_s - entry.credited_s))
        entry.credited_s += saved
        entry.dropped = True
        self._record(t.name, _USEFUL)
        calibration = self.runtime.calibration
        for source, confidence in entry.votes:
            calibration.record(source, confidence, True)
        self._emit(_HIT, t, entry.key, entry.source, entry.confidence, saved)
        self._telemetry.observe_wait("hit", waited)
        value = task.result()  # served once: the caller gets the original unless a watcher also gets one
        return CallOutcome(isolated(value) if entry.watched else value, "hit", waited, saved, entry.source)

    async def _validator_agrees(self, entry: Entry) -> bool:
        """Whether the validator still gives the token seen at speculation start (errors and hangs: no)."""
        validator = entry.tool.validator
        assert validator is not None
        try:
            async with asyncio.timeout(self.runtime.claim_wait_limit(entry.tool)):
                return bool(await maybe_await(validator(entry.call)) == entry.freshness)
        except Exception:
            return False

    def _claim_partial(self, t: Tool, arguments: dict[str, Any], start: float) -> CallOutcome | None:
        rule = t.partial
        assert rule is not None
        if t.state is not None or t.validator is not None:
            return None
        for entry in self._store.of_tool(t.name):
            if not entry.succeeded() or not self._fresh(entry) or self._now() >= entry.expires:
                continue
            assert entry.task is not None
            try:
                if not rule.covers(entry.arguments, arguments):
                    continue
                value = rule.narrow(arguments, isolated(entry.task.result(), strict=True))  # narrow a copy
            except Exception:
                continue
            waited = self._now() - start
            saved = max(0.0, entry.run_seconds - entry.credited_s - waited)
            entry.credited_s += saved
            entry.partial_hits += 1
            self._record(t.name, _USEFUL)
            self._emit(_PARTIAL_HIT, t, entry.key, entry.source, entry.confidence, seconds=saved)
            self._telemetry.observe_wait("partial_hit", waited)
            return CallOutcome(value, "partial_hit", waited, saved, entry.source)
        return None
