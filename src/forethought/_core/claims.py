"""The authoritative call path: claim a speculation with the call's key when one may serve it, else run.

:class:`Claims` is the part of a :class:`~forethought._core.session.Session` that answers ``execute``. A call
takes its place in the session's call order, takes the entry under its key out of the store (CLAIMED) and
serves it only if every rule of docs/design.md "When a speculation may be served" holds: its tool has
started (a claim never waits behind the speculative queue) and is not hung, it succeeded, it is fresh (not
expired, no write since it started to anything it reads, its validator's token unchanged, its snapshot still
current). Otherwise the entry is DISCARDED and the tool runs on the live state, exactly as without
forethought. A failed rule is never an error.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from forethought._core.breaker import Outcome
from forethought._core.calls import CallKey, ToolCall
from forethought._core.entry import CallKind, CallOutcome, Entry, isolated, own_arguments
from forethought._core.ledger import Ledger
from forethought._core.lifecycle import State, move
from forethought._core.live import Live
from forethought._core.ordering import CallOrder
from forethought._core.scheduler import maybe_await
from forethought._core.shared import SharedRuns
from forethought._core.store import SpeculationStore
from forethought._core.tools import Tool
from forethought._core.versions import ReadToken, StateVersion, Version, still_current
from forethought.telemetry import EventKind

__all__ = ["Claims"]


def _current(versions: tuple[Version, ...], token: ReadToken) -> bool:
    """:func:`~forethought._core.versions.still_current`, with the common case (two in-memory versions: a read
    that depends on the world and its session's fence) inline."""
    if len(versions) == 2 and token is not None and len(token) == 2:
        v, w = versions
        if type(v) is StateVersion and type(w) is StateVersion:
            return not v.writers and not w.writers and v.version == token[0] and w.version == token[1]
    return still_current(versions, token)

_CANCELLED, _CONFLICT, _EXPIRED = EventKind.CANCELLED, EventKind.CONFLICT, EventKind.EXPIRED
_FAILED, _MISS, _PARTIAL_HIT, _STALE = EventKind.FAILED, EventKind.MISS, EventKind.PARTIAL_HIT, EventKind.STALE
_HIT_KIND, _PARTIAL_KIND, _MISS_KIND = CallKind.HIT, CallKind.PARTIAL_HIT, CallKind.MISS
_CLAIMED, _USEFUL = State.CLAIMED, Outcome.USEFUL


class Claims:
    """``execute`` for one session: claim, check, serve, or run."""

    def __init__(self, store: SpeculationStore, ledger: Ledger, live: Live, now: Callable[[], float],
                 claim_wait_limit: Callable[[Tool], float], shared: Callable[[], SharedRuns | None]) -> None:
        self._store = store
        self._ledger = ledger
        self._live = live
        self._now = now
        self._claim_wait_limit = claim_wait_limit
        self._shared = shared
        self.order = CallOrder()

    def fresh(self, entry: Entry) -> bool:
        """Whether no write can have changed what a started speculation read (any write of this session, or
        of the world, for a READ_ONLY tool; any write, from anywhere, to a state the tool declares)."""
        versions = entry.reads if entry.started is not None else self._live.reads(entry.tool)
        return not versions or still_current(versions, entry.versions)

    async def execute(self, call: ToolCall, t: Tool, arguments: dict[str, Any], key: CallKey,
                      share_arguments: bool) -> CallOutcome:
        start = self._now()
        entry = self._store.get(key)
        if (entry is not None and entry.task is not None and entry.task.done() and t.validator is None
                and self.order.clear_for(t.effect)):
            # The common hit: nothing to wait for and no await until it is served, so no other call can be
            # issued meanwhile and the call needs no place in the session's call order.
            self._store.pop(key)
            move(entry, _CLAIMED)
            claimed = self._settle(entry, start, start)
            if claimed is not None:
                return claimed
        ticket, waits = self.order.begin(t.effect)
        try:
            ready = start
            if waits:
                await asyncio.wait(waits)
                ready = self._now()
            entry = self._store.pop(key)
            if entry is not None:
                move(entry, _CLAIMED)
                if entry.slot is not None:
                    entry.slot.value = math.inf  # its own call waits on it now: never preempted
                try:
                    claimed = await self._claim(entry, start, ready)
                except BaseException:  # the caller was cancelled while the claim waited
                    self._ledger.discard(entry, _CANCELLED, "claim cancelled")
                    raise
                if claimed is not None:
                    return claimed
            if t.partial is not None:
                partial = self._claim_partial(t, arguments, start)
                if partial is not None:
                    return partial
            try:
                given = t.arguments.given(call)
                began_at = time.time()  # wall clock: a published value is compared across processes
                value = await self._live.run(t, given if share_arguments else own_arguments(given, top=False))
                shared = self._shared()
                if shared is not None and shared.shares(t):
                    shared.published(t, key, value, began_at)
            finally:
                waited = self._now() - start
                self._ledger.emit(_MISS, t, key, seconds=waited)
                self._ledger.observe_wait("miss", waited)
            return CallOutcome(value, _MISS_KIND, waited, 0.0)
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
                self._ledger.discard(entry, _EXPIRED)
                return None
            if entry.started is None:
                self._ledger.discard(entry, _CANCELLED, "tool not started when claimed")
                return None
            remaining = self._claim_wait_limit(t) - entry.run_seconds
            if remaining > 0:
                await asyncio.wait([task], timeout=remaining)
            if not task.done():
                self._ledger.discard(entry, _CANCELLED, "running longer than a fresh call plausibly needs")
                return None
        if (t.validator is not None and entry.succeeded() and self._now() < entry.expires
                and not await self._validator_agrees(entry)):
            self._ledger.discard(entry, _STALE, "validator token changed")
            return None
        return self._settle(entry, start, ready)

    def _settle(self, entry: Entry, start: float, ready: float) -> CallOutcome | None:
        """Serve a finished, claimed ``entry`` if it is fresh and succeeded; ``None`` sends the caller to
        the miss path."""
        task = entry.task
        assert task is not None
        if self._now() >= entry.expires:
            self._ledger.discard(entry, _EXPIRED)
            return None
        if task.cancelled() or (entry.started is None and entry.error is None):
            self._ledger.discard(entry, _CANCELLED, "cancelled before it finished")
            return None
        if entry.error is not None:
            self._ledger.discard(entry, _FAILED, type(entry.error).__name__)
            return None
        versions = entry.reads  # it started (checked above): the versions it read were recorded then
        if versions and not _current(versions, entry.versions):  # = not self.fresh(entry)
            if entry.snapshot is not None:
                self._ledger.discard(entry, _CONFLICT, "a state it read was written since it started")
            else:
                self._ledger.discard(entry, _STALE, "a write happened since it started")
            return None
        committed = entry.snapshot is not None
        if committed and not self._live.commit(entry):
            self._ledger.discard(entry, _CONFLICT, "state changed since the snapshot")
            return None
        now = self._now()
        waited = now - start
        tool_s = entry.run_seconds
        saved = max(0.0, min(tool_s - (now - ready), tool_s - entry.credited_s))
        entry.credited_s += saved
        self._ledger.served(entry, saved, committed)
        self._ledger.observe_wait("hit", waited)
        value = task.result()  # served once: the caller gets the original unless a watcher also gets one
        return CallOutcome(isolated(value) if entry.watched else value, _HIT_KIND, waited, saved, entry.source)

    async def _validator_agrees(self, entry: Entry) -> bool:
        """Whether the validator still gives the token seen at speculation start (errors and hangs: no)."""
        validator = entry.tool.validator
        assert validator is not None
        try:
            async with asyncio.timeout(self._claim_wait_limit(entry.tool)):
                return bool(await maybe_await(validator(entry.call)) == entry.freshness)
        except asyncio.CancelledError:
            raise
        except BaseException:  # whatever it raises (SystemExit too) means "changed": the call runs normally
            return False

    def _claim_partial(self, t: Tool, arguments: dict[str, Any], start: float) -> CallOutcome | None:
        """A READY speculation of the same tool whose call covers this one serves a narrowed copy (it stays
        in the store, READY, for more)."""
        rule = t.partial
        assert rule is not None
        if t.state is not None or t.validator is not None:
            return None
        for entry in self._store.of_tool(t.name):
            if not entry.succeeded() or not self.fresh(entry) or self._now() >= entry.expires:
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
            self._ledger.record(t.name, _USEFUL)
            self._ledger.emit(_PARTIAL_HIT, t, entry.key, entry.source, entry.confidence, seconds=saved)
            self._ledger.observe_wait("partial_hit", waited)
            return CallOutcome(value, _PARTIAL_KIND, waited, saved, entry.source)
        return None

