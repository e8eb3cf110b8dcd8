"""The runtime facade: sessions that speculate calls early and execute authoritative calls.

``Runtime(tools, policy)`` is shared by many sessions (global concurrency, telemetry, thread pools);
``runtime.session()`` opens one :class:`Session` with its own isolated store. Predictors call
``session.speculate(call, source=..., confidence=...)``; the agent calls ``await session.execute(call)``,
which claims a matching speculation (a hit) or runs the tool (a miss). Every rule of DESIGN.md's
invariants 1, 2, 4 and 5 is enforced here:

* an entry is served only to an identical canonical key, at most once, and only while fresh (not expired,
  no write since a read-only speculation started, validator unchanged, snapshot still current);
* DESTRUCTIVE or undeclared tools are never run by ``speculate``; ISOLATED_WRITE runs only on a snapshot;
* authoritative calls take no speculative slot; a claimed speculation still queued is cancelled, and one
  running far longer than usual is abandoned for an authoritative run;
* a speculation that raised, hung or was cancelled is never surfaced: the call runs normally instead.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from forethought.breaker import CircuitBreaker, Outcome
from forethought.calls import KEY_SEPARATOR, CallKey, ToolCall, dumps_canonical
from forethought.errors import CallError, ForethoughtError, ToolExecutionError
from forethought.ordering import CallOrder
from forethought.policy import Policy
from forethought.scheduler import Scheduler, maybe_await
from forethought.store import Entry, SpeculationStore
from forethought.telemetry import Event, EventKind, Telemetry, key_hash
from forethought.tools import Effect, Tool, ToolRegistry, invoke_tool

RUNTIME_EWMA_WEIGHT = 0.3


@dataclass(frozen=True, slots=True)
class SpeculationTicket:
    """What ``speculate`` did with a guess: ``status`` is launched, deduplicated or rejected."""

    status: str
    key: CallKey | None = None
    reason: str = ""

    @property
    def launched(self) -> bool:
        return self.status == "launched"


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """The authoritative result of one call and how it was obtained."""

    value: Any
    kind: str  # "hit", "partial_hit" or "miss"
    waited_s: float
    saved_s: float
    source: str = ""


@dataclass(frozen=True, slots=True)
class SessionStats:
    """Counts and seconds for one session (or a whole runtime)."""

    launched: int = 0
    deduplicated: int = 0
    rejected: int = 0
    hits: int = 0
    partial_hits: int = 0
    misses: int = 0
    wasted: int = 0
    cancelled: int = 0
    expired: int = 0
    failed: int = 0
    stale: int = 0
    conflicts: int = 0
    committed: int = 0
    saved_s: float = 0.0
    wasted_s: float = 0.0

    @property
    def alpha(self) -> float:
        """Acceptance rate: the fraction of authoritative calls served by a speculation."""
        total = self.hits + self.partial_hits + self.misses
        return (self.hits + self.partial_hits) / total if total else 0.0


_STAT_FIELDS = {EventKind.LAUNCHED: "launched", EventKind.DEDUPLICATED: "deduplicated",
                EventKind.REJECTED: "rejected", EventKind.HIT: "hits", EventKind.PARTIAL_HIT: "partial_hits",
                EventKind.MISS: "misses", EventKind.WASTED: "wasted", EventKind.CANCELLED: "cancelled",
                EventKind.EXPIRED: "expired", EventKind.FAILED: "failed", EventKind.STALE: "stale",
                EventKind.CONFLICT: "conflicts", EventKind.COMMITTED: "committed"}


def stats_from(counts: Counter[EventKind], saved_s: float, wasted_s: float) -> SessionStats:
    values: dict[str, Any] = {field: counts.get(kind, 0) for kind, field in _STAT_FIELDS.items()}
    return SessionStats(**values, saved_s=saved_s, wasted_s=wasted_s)


class Runtime:
    """Shared state of all sessions: tools, policy, scheduler, breaker and telemetry."""

    def __init__(self, tools: Iterable[Tool] = (), policy: Policy | None = None,
                 telemetry: Telemetry | None = None) -> None:
        self.policy = policy or Policy()
        self.tools = ToolRegistry(self._with_policy(tools))
        self.telemetry = telemetry or Telemetry()
        self.scheduler = Scheduler(self.policy)
        self.breaker = CircuitBreaker(self.policy.breaker)
        self.tool_runtime_ewma: dict[str, float] = {}
        self._ids = itertools.count(1)

    def _with_policy(self, tools: Iterable[Tool]) -> list[Tool]:
        return [self.policy.for_tool(t.name).apply(t) for t in tools]

    def session(self, session_id: str | None = None, tools: Iterable[Tool] = ()) -> Session:
        """Open a session; ``tools`` adds or replaces tools for this session only (e.g. bound to its state)."""
        extra = self._with_policy(tools)
        registry = self.tools.merged(extra) if extra else self.tools
        return Session(self, session_id or f"s{next(self._ids)}", registry)

    def stats(self) -> SessionStats:
        t = self.telemetry
        return stats_from(t.counts, t.saved_s, t.wasted_s)

    def note_runtime(self, tool: str, seconds: float) -> None:
        old = self.tool_runtime_ewma.get(tool)
        self.tool_runtime_ewma[tool] = seconds if old is None else (
            old + RUNTIME_EWMA_WEIGHT * (seconds - old))

    def claim_wait_limit(self, tool: str) -> float:
        """How long a claim waits on a running speculation before running the call itself."""
        typical = self.tool_runtime_ewma.get(tool, 0.0)
        return self.policy.claim_wait_floor_s + self.policy.claim_wait_factor * typical

    def close(self) -> None:
        self.scheduler.close()


class Session:
    """One agent's view: an isolated speculation store and the authoritative call path."""

    def __init__(self, runtime: Runtime, session_id: str, tools: ToolRegistry) -> None:
        self.runtime = runtime
        self.id = session_id
        self.tools = tools
        self.store = SpeculationStore()
        self.order = CallOrder()
        self.budget = runtime.scheduler.budget()
        self._slots = runtime.scheduler.session_slots()
        self._counts: Counter[EventKind] = Counter()
        self._saved_s = 0.0
        self._wasted_s = 0.0
        self.epoch = 0  # bumped at start and end of every authoritative write
        self.closed = False

    # --- telemetry --------------------------------------------------------------------------------

    def _emit(self, kind: EventKind, tool: str, key: str, source: str = "", confidence: float | None = None,
              seconds: float = 0.0, detail: str = "") -> None:
        self._counts[kind] += 1
        if kind in (EventKind.HIT, EventKind.PARTIAL_HIT):
            self._saved_s += seconds
        elif kind is EventKind.WASTED:
            self._wasted_s += seconds
        self.runtime.telemetry.emit(Event(kind, self.id, tool, key_hash(key) if key else "", source,
                                          confidence, seconds, detail))

    def stats(self) -> SessionStats:
        return stats_from(self._counts, self._saved_s, self._wasted_s)

    # --- keys -------------------------------------------------------------------------------------

    def resolve(self, call: ToolCall) -> tuple[Tool, dict[str, Any], CallKey]:
        """Look up the tool and canonicalise the call; raises a :class:`CallError` on bad input."""
        t = self.tools.get_tool(call.name)
        arguments = t.arguments.canonical_arguments(call)
        return t, arguments, call.name + KEY_SEPARATOR + dumps_canonical(arguments)

    # --- speculation ------------------------------------------------------------------------------

    def speculate(self, call: ToolCall, source: str = "unknown", confidence: float = 1.0) -> SpeculationTicket:
        """Start ``call`` early if policy, effect, budget and breaker allow; never raises on bad guesses."""
        try:
            t, arguments, key = self.resolve(call)
        except CallError as exc:
            self._emit(EventKind.REJECTED, call.name if isinstance(call.name, str) else "?", "", source,
                       confidence, detail=str(exc))
            return SpeculationTicket("rejected", None, str(exc))
        reason = self._rejection(t, source, confidence)
        existing = self.store.get(key)
        if reason is None and existing is not None:
            existing.sources.append(source)
            self._emit(EventKind.DEDUPLICATED, t.name, key, source, confidence)
            return SpeculationTicket("deduplicated", key)
        if reason is None:
            reason = self.budget.reserve(t.cost_units)
        if reason is not None:
            self._emit(EventKind.REJECTED, t.name, key, source, confidence, detail=reason)
            return SpeculationTicket("rejected", key, reason)
        now = time.monotonic()
        entry = Entry(key=key, call=call, arguments=arguments, tool=t, source=source, confidence=confidence,
                      created=now, expires=now + t.ttl_s, epoch=-1, sources=[source])
        self.store.add(entry)
        entry.task = asyncio.get_running_loop().create_task(self._run_speculation(entry))
        entry.task.add_done_callback(_retrieve_exception)
        self._emit(EventKind.LAUNCHED, t.name, key, source, confidence)
        return SpeculationTicket("launched", key)

    def _rejection(self, t: Tool, source: str, confidence: float) -> str | None:
        if self.closed:
            return "session closed"
        if not self.runtime.policy.for_tool(t.name).speculate:
            return "policy denies speculation of this tool"
        if not t.speculable:
            return f"effect {t.effect.value} may not run early" + (
                " (no snapshot state)" if t.effect is Effect.ISOLATED_WRITE else "")
        if confidence < self.runtime.policy.min_confidence:
            return f"confidence {confidence:.2f} below threshold {self.runtime.policy.min_confidence:.2f}"
        breaker = self.runtime.breaker
        if not breaker.allows(f"tool:{t.name}") or not breaker.allows(f"session:{self.id}"):
            return "circuit breaker open"
        return None

    async def _run_speculation(self, entry: Entry) -> Any:
        t = entry.tool
        async with self.runtime.scheduler.speculative_slot(self._slots):
            if self.store.get(entry.key) is not entry:
                raise asyncio.CancelledError  # discarded while queued
            entry.started = time.monotonic()
            entry.epoch = self.epoch
            try:
                if t.validator is not None:
                    entry.freshness = await maybe_await(t.validator(entry.call))

                def run() -> Any:
                    target = None
                    if t.state is not None:
                        entry.snapshot = t.state.snapshot()
                        target = entry.snapshot.target
                    return invoke_tool(t, target, entry.arguments)

                async with asyncio.timeout(self.runtime.policy.speculation_timeout_s):
                    if t.threaded:
                        value = await maybe_await(await self.runtime.scheduler.run_sync(run, speculative=True))
                    else:
                        value = await maybe_await(run())
            finally:
                entry.finished = time.monotonic()
            self.runtime.note_runtime(t.name, entry.run_seconds)
            return value

    # --- the authoritative path -------------------------------------------------------------------

    async def execute(self, call: ToolCall) -> Any:
        """Run ``call`` authoritatively (claiming a speculation when one matches) and return its value."""
        return (await self.execute_detailed(call)).value

    async def execute_detailed(self, call: ToolCall) -> CallOutcome:
        """Like :meth:`execute`, also saying whether it was a hit and how long it waited."""
        t, arguments, key = self.resolve(call)
        start = time.monotonic()
        with self.order.issue(t.effect) as waits:
            if waits:
                await asyncio.wait(waits)
            entry = self.store.pop(key)
            if entry is not None:
                claimed = await self._claim(entry, start)
                if claimed is not None:
                    return claimed
            if t.partial is not None:
                partial = self._claim_partial(t, arguments, start)
                if partial is not None:
                    return partial
            value = await self._run_authoritative(t, arguments)
            waited = time.monotonic() - start
            self._emit(EventKind.MISS, t.name, key, seconds=waited)
            self.runtime.telemetry.observe_wait("miss", waited)
            return CallOutcome(value, "miss", waited, 0.0)

    async def _claim(self, entry: Entry, start: float) -> CallOutcome | None:
        """Serve ``entry`` if it is fresh and succeeds; ``None`` sends the caller down the miss path."""
        t, key, task = entry.tool, entry.key, entry.task
        assert task is not None
        if time.monotonic() >= entry.expires:
            self._drop(entry, EventKind.EXPIRED)
            return None
        if entry.started is None:
            self._drop(entry, EventKind.CANCELLED, "still queued when claimed")
            return None
        if not task.done():
            await asyncio.wait([task], timeout=self.runtime.claim_wait_limit(t.name))
            if not task.done():
                self._drop(entry, EventKind.CANCELLED, "running far longer than usual when claimed")
                return None
        if task.cancelled() or task.exception() is not None:
            self._record(t.name, Outcome.ERROR)
            self._emit(EventKind.FAILED, t.name, key, entry.source, entry.confidence,
                       detail=repr(task.exception()) if not task.cancelled() else "cancelled")
            self._discard_snapshot(entry)
            return None
        if not await self._fresh(entry):
            self._record(t.name, Outcome.WASTED)
            self._emit(EventKind.STALE, t.name, key, entry.source, entry.confidence)
            self._discard_snapshot(entry)
            return None
        if entry.snapshot is not None:
            self.epoch += 1
            committed = entry.snapshot.commit()
            self.epoch += 1
            if not committed:
                self._record(t.name, Outcome.WASTED)
                self._emit(EventKind.CONFLICT, t.name, key, entry.source, entry.confidence)
                return None
            self._emit(EventKind.COMMITTED, t.name, key, entry.source, entry.confidence)
        waited = time.monotonic() - start
        saved = max(0.0, entry.run_seconds - waited)
        self._record(t.name, Outcome.USEFUL)
        self._emit(EventKind.HIT, t.name, key, entry.source, entry.confidence, seconds=saved)
        self.runtime.telemetry.observe_wait("hit", waited)
        return CallOutcome(task.result(), "hit", waited, saved, entry.source)

    async def _fresh(self, entry: Entry) -> bool:
        t = entry.tool
        if t.effect is Effect.READ_ONLY and entry.epoch != self.epoch:
            return False
        if t.validator is not None:
            try:
                return bool(await maybe_await(t.validator(entry.call)) == entry.freshness)
            except Exception:
                return False
        return True

    def _claim_partial(self, t: Tool, arguments: dict[str, Any], start: float) -> CallOutcome | None:
        rule = t.partial
        assert rule is not None
        for entry in self.store.of_tool(t.name):
            if (not entry.succeeded() or entry.snapshot is not None
                    or (t.effect is Effect.READ_ONLY and entry.epoch != self.epoch)
                    or time.monotonic() >= entry.expires or t.validator is not None):
                continue
            try:
                if not rule.covers(entry.arguments, arguments):
                    continue
                assert entry.task is not None
                value = rule.narrow(arguments, entry.task.result())
            except Exception:
                continue
            waited = time.monotonic() - start
            self._record(t.name, Outcome.USEFUL)
            self._emit(EventKind.PARTIAL_HIT, t.name, entry.key, entry.source, entry.confidence,
                       seconds=entry.run_seconds)
            self.runtime.telemetry.observe_wait("partial_hit", waited)
            return CallOutcome(value, "partial_hit", waited, entry.run_seconds, entry.source)
        return None

    async def _run_authoritative(self, t: Tool, arguments: dict[str, Any]) -> Any:
        writes = t.effect.writes
        if writes:
            self.epoch += 1
        started = time.monotonic()
        try:
            target = t.state.live if t.state is not None else None

            def run() -> Any:
                return invoke_tool(t, target, arguments)

            if t.threaded:
                return await maybe_await(await self.runtime.scheduler.run_sync(run, speculative=False))
            return await maybe_await(run())
        except ForethoughtError:
            raise
        except Exception as exc:
            raise ToolExecutionError(t.name, f"{type(exc).__name__}: {exc}") from exc
        finally:
            if t.state is not None:
                t.state.mark_changed()
            self.runtime.note_runtime(t.name, time.monotonic() - started)
            if writes:
                self.epoch += 1

    # --- discarding -------------------------------------------------------------------------------

    def _record(self, tool: str, outcome: Outcome) -> None:
        self.runtime.breaker.record(f"tool:{tool}", outcome)
        self.runtime.breaker.record(f"session:{self.id}", outcome)

    def _discard_snapshot(self, entry: Entry) -> None:
        if entry.snapshot is not None:
            entry.snapshot.discard()
            entry.snapshot = None

    def _drop(self, entry: Entry, kind: EventKind, detail: str = "") -> None:
        """Cancel an entry's work and account for it (it has already left the store)."""
        task = entry.task
        if task is not None and not task.done():
            task.cancel()
        self._discard_snapshot(entry)
        if kind in (EventKind.WASTED, EventKind.CANCELLED) and entry.started is not None:
            self._record(entry.tool.name, Outcome.WASTED)
            self._emit(EventKind.WASTED, entry.tool.name, entry.key, entry.source, entry.confidence,
                       seconds=entry.run_seconds, detail=detail)
        if kind is not EventKind.WASTED:
            self._emit(kind, entry.tool.name, entry.key, entry.source, entry.confidence, detail=detail)

    def discard(self, key: CallKey) -> bool:
        """Discard one speculation (cancelling its work); returns whether it existed."""
        entry = self.store.pop(key)
        if entry is None:
            return False
        self._drop(entry, EventKind.WASTED if entry.started is not None else EventKind.CANCELLED)
        return True

    def evict_expired(self) -> int:
        now = time.monotonic()
        expired = self.store.expired(now)
        for entry in expired:
            self.store.pop(entry.key)
            self._drop(entry, EventKind.EXPIRED)
        return len(expired)

    def end_turn(self) -> int:
        """Turn-end eviction: discard every unclaimed speculation and reset the turn budget."""
        n = 0
        for entry in self.store:
            n += self.discard(entry.key)
        self.budget.reset()
        return n

    async def close(self) -> None:
        """Discard everything and wait until cancelled speculative work has stopped."""
        self.closed = True
        tasks = [e.task for e in self.store if e.task is not None]
        self.end_turn()
        if tasks:
            await asyncio.wait(tasks)


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    """Mark a speculative task's exception as seen: failures never surface, not even as warnings."""
    if not task.cancelled():
        task.exception()
