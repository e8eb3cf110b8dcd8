"""How a session touches the live state: authoritative runs, commits of speculative snapshots, and
``prepare`` hooks for hints.

:class:`LiveState` sits between the bookkeeping of :class:`~forethought._core.ledger.SessionBase` and the
speculation and claim logic of :class:`~forethought._core.session.Session`. An authoritative run is the only
place a tool runs on the live state; a hit of an ISOLATED_WRITE speculation is committed here (a write:
the epoch moves, version counters are bumped); a ``prepare`` hook warms what a call will need and never
changes state.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from forethought._core.ledger import SessionBase
from forethought._core.scheduler import maybe_await
from forethought._core.store import Entry, discard_quietly, own_arguments
from forethought._core.tools import Tool, invoke_tool
from forethought._core.versions import Write, end_write
from forethought.errors import ForethoughtError, ToolExecutionError
from forethought.telemetry import EventKind

__all__ = ["LiveState"]

_log = logging.getLogger(__name__)
_COMMITTED, _PREPARED = EventKind.COMMITTED, EventKind.PREPARED


class LiveState(SessionBase):
    """Authoritative runs, snapshot commits and prepare hooks of one session."""

    @contextlib.contextmanager
    def untracked_write(self) -> Iterator[None]:
        """An effect outside any tool is in progress (a code action's own statement writing a file, say).

        While it runs and once it has ended, no read speculated before its end may be served: every READ_ONLY
        speculation that started before the block ends is stale at its claim.
        """
        self._epoch += 1
        try:
            yield
        finally:
            self._epoch += 1

    def prepare(self, name: str, known: Mapping[str, Any] | None = None, source: str = "unknown") -> bool:
        """Run tool ``name``'s ``prepare`` hook for a hint, with the ``known`` arguments; at most once per
        tool per turn, in the background. Returns whether it was started.

        Never for a tool the policy denies, a closed session or when the runtime backs off completely;
        what the hook returns is ignored and what it raises is counted (PREPARED, with the error type),
        never surfaced.
        """
        t = self.tools.get(name) if isinstance(name, str) else None
        if (t is None or t.prepare is None or self.closed or name in self._prepared
                or not self.runtime.policy.for_tool(name).speculate or self.runtime.pressure().level >= 1.0):
            return False
        self._prepared.add(name)
        given = own_arguments(dict(known or {}))
        task = asyncio.get_running_loop().create_task(self._run_prepare(t, given, source))
        self._prepare_tasks.add(task)
        task.add_done_callback(self._prepare_tasks.discard)
        return True

    async def _run_prepare(self, t: Tool, known: Mapping[str, Any], source: str) -> None:
        hook = t.prepare
        assert hook is not None
        detail = "ok"
        try:
            async with asyncio.timeout(self.runtime.policy.speculation_timeout_s):
                if inspect.iscoroutinefunction(hook):
                    await hook(known)
                else:  # a sync hook may block (opening a connection): on the speculative thread lane
                    await maybe_await(await self.runtime.scheduler.run_sync(lambda: hook(known), speculative=True))
        except Exception as exc:
            detail = type(exc).__name__
        self._emit(_PREPARED, t, "", source, detail=detail)

    def _commit(self, entry: Entry) -> bool:
        """Commit a hit's snapshot into the live state (a write: bumps the epoch); ``False`` on conflict."""
        snapshot = entry.snapshot
        assert snapshot is not None
        entry.snapshot = None
        self._epoch += 1
        t = entry.tool
        try:
            committed = bool(snapshot.commit())
        except Exception as exc:
            _log.error("commit of a %s snapshot failed: %s", t.label, type(exc).__name__,
                       exc_info=not t.hide_key)  # a private call's traceback may quote its values
            committed = False
        finally:
            self._epoch += 1
        if not committed:
            discard_quietly(snapshot, t.label, not t.hide_key)
            return False
        for version in t.write_versions:
            version.bump()
        self._emit(_COMMITTED, entry.tool, entry.key, entry.source, entry.confidence)
        return True

    async def _run_authoritative(self, t: Tool, arguments: Mapping[str, Any]) -> Any:
        """Run ``t`` on the live state with the caller's own ``arguments``.

        A write counts as in progress, for every session, from before it starts until the tool function
        has really finished: for a threaded tool that is on the worker thread itself, which keeps running
        when the awaiting caller is cancelled. Only then do the state's version and its cell move on.
        """
        writes = t.effect.writes
        if writes:
            self._epoch += 1
        for version in t.write_versions:
            version.begin_write()
        started = self._now()
        write = Write(t.cells_written, t.write_versions) if t.threaded else None
        try:
            target = t.state.live if t.state is not None else None

            if write is not None:
                def run() -> Any:
                    assert write is not None
                    if not write.begin():
                        return None  # abandoned before it started: it never runs
                    value = None
                    try:
                        value = invoke_tool(t, target, arguments)
                        return value
                    finally:
                        if not ((asyncio.iscoroutine(value) or isinstance(value, asyncio.Future))
                                and write.hand_to_loop()):
                            write.end()

                return await maybe_await(await self.runtime.scheduler.run_sync(run, speculative=False))
            return await maybe_await(invoke_tool(t, target, arguments))
        except ForethoughtError:
            raise
        except Exception as exc:
            reason = type(exc).__name__ if t.hide_key else f"{type(exc).__name__}: {exc}"
            raise ToolExecutionError(t.name, reason) from exc
        finally:
            if write is None:
                if t.cells_written or t.write_versions:
                    end_write(t.cells_written, t.write_versions)
            elif write.on_loop:
                write.end()
            else:
                write.abandon()  # cancelled or never scheduled: ends it only if its thread never started
            if writes:
                self._epoch += 1
            self.runtime.note_runtime(t.name, self._now() - started)
