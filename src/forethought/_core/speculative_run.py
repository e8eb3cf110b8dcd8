"""The speculative task: one launched guess's run, from its slot to READY or FAILED.

:meth:`~forethought._core.session.Session.speculate` launches :meth:`SpeculativeRun.run` as the entry's task.
It waits for a speculative slot, records the versions the run depends on, checks the tool's validator, and
runs the tool (on the loop, in the speculative thread pool, or through the shared results of other workers)
under the policy's speculation timeout. It never raises, except when cancelled: whatever the tool, its
validator or a shared backend raises (``SystemExit`` and library ``BaseException`` s too) lands in
``entry.error``, and the call the guess was for runs normally (docs/design.md, invariant 5).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from forethought._core.entry import Entry
from forethought._core.host import Host
from forethought._core.lifecycle import State, move, start
from forethought._core.live import Live
from forethought._core.scheduler import maybe_await
from forethought._core.shared import SharedRuns, last_change
from forethought._core.versions import read_token

__all__ = ["SpeculativeRun"]

_S_QUEUED, _S_RUNNING, _S_READY, _S_FAILED = State.QUEUED, State.RUNNING, State.READY, State.FAILED


class SpeculativeRun:
    """Runs one session's launched speculations (:meth:`run` is each one's task)."""

    __slots__ = ("_live", "_now", "_runtime", "_shared")

    def __init__(self, runtime: Host, live: Live, now: Callable[[], float],
                 shared: Callable[[], SharedRuns | None]) -> None:
        self._runtime = runtime
        self._live = live
        self._now = now
        self._shared = shared

    async def run(self, entry: Entry) -> Any:
        """The speculative task: never raises (errors land in ``entry.error``), except when cancelled."""
        t = entry.tool
        runtime = self._runtime
        capacity = runtime.scheduler.capacity
        slot = entry.slot
        assert slot is not None
        try:
            await capacity.wait(slot)
            if entry.state is not _S_QUEUED:
                return None
            reads = entry.reads = self._live.reads(t)
            if reads:
                entry.versions = read_token(reads)
            try:
                async with asyncio.timeout(runtime.policy.speculation_timeout_s):
                    if t.validator is not None:
                        entry.freshness = await maybe_await(t.validator(entry.call))
                    shared = self._shared()
                    if shared is not None and not t.threaded and shared.shares(t):
                        # obtaining it is its run, from another worker or here
                        if not start(entry, self._now()):
                            return None
                        value = await shared.speculate(t, entry.key, lambda: entry.invoke(starting=False),
                                                       not_before=last_change(reads))
                    elif t.threaded:
                        value = await runtime.scheduler.run_sync(entry.invoke, speculative=True)
                    else:
                        value = entry.invoke()
                    value = await maybe_await(value)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit, GeneratorExit, a library's own: never surfaces (invariant 5)
                entry.error = exc
                _ended(entry)
                return None
            finally:
                if entry.started is not None:
                    entry.finished = self._now()
            runtime.note_runtime(t.name, entry.run_seconds)
            _ended(entry)
            return value
        finally:
            capacity.release(slot)


def _ended(entry: Entry) -> None:
    """The speculative run ended (with a value, or an error): READY or FAILED while still unclaimed (FAILED
    too for one whose validator raised or timed out before its tool began)."""
    state = entry.state
    if state is _S_RUNNING:
        move(entry, _S_FAILED if entry.error is not None else _S_READY)
    elif state is _S_QUEUED and entry.error is not None:
        move(entry, _S_FAILED)
