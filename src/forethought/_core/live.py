"""How a session touches live state: authoritative runs, commits of speculative snapshots, effects outside
any tool, and ``prepare`` hooks for hints.

:class:`Live` is the only place a tool runs on the live state. Every write goes through the one write clock
(:mod:`forethought._core.versions`): it begins on the versions of everything it may change (its states, the
session, the world) and ends when its work has really ended — a threaded tool's thread, an async tool's own
task — never when its caller stopped waiting. A hit of an ISOLATED_WRITE speculation is committed here (a
write too); a ``prepare`` hook warms what a call will need and never changes state.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from forethought._core.entry import Entry, discard_quietly, own_arguments
from forethought._core.ledger import Ledger
from forethought._core.policy import Policy
from forethought._core.pressure import Pressure
from forethought._core.scheduler import Scheduler, maybe_await
from forethought._core.tools import Effect, Tool, ToolRegistry, invoke_tool
from forethought._core.versions import Version, Write, WriteClock, versions_of
from forethought.errors import ForethoughtError, ToolExecutionError
from forethought.telemetry import EventKind

__all__ = ["Live"]

_log = logging.getLogger(__name__)
_COMMITTED, _PREPARED = EventKind.COMMITTED, EventKind.PREPARED


class Live:
    """Authoritative runs, snapshot commits, untracked writes and prepare hooks of one session."""

    def __init__(self, ledger: Ledger, tools: ToolRegistry, policy: Policy, scheduler: Scheduler,
                 clock: WriteClock, now: Callable[[], float], note_runtime: Callable[[str, float], None],
                 pressure: Callable[[], Pressure]) -> None:
        self._ledger = ledger
        self._tools = tools
        self._policy = policy
        self._scheduler = scheduler
        self._clock = clock
        self._now = now
        self._note_runtime = note_runtime
        self._pressure = pressure
        self.version: Version = clock.session()
        """This session's own version: every write of the session moves it (its READ_ONLY reads depend on it)."""
        self.fenced: Version = clock.fenced()
        """Moved only by this session's fences (:meth:`begin_fence`): every speculation's reads depend on it."""
        self._everything = (self.version, clock.world)
        self._world = (clock.world, self.fenced)
        """What a READ_ONLY tool that declares no state reads: every write, and this session's fences."""
        self._writes_of: dict[int, tuple[Tool, tuple[Version, ...]]] = {}
        self._reads_of: dict[int, tuple[Tool, tuple[Version, ...]]] = {}
        self.prepared: set[str] = set()
        """Tools whose prepare hook ran this turn."""
        self.prepare_tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    # --- versions ---------------------------------------------------------------------------------

    def reads(self, t: Tool) -> tuple[Version, ...]:
        """The versions a speculation of ``t`` must find unchanged: a READ_ONLY tool's reads depend on this
        session's writes and on what it declares (on the world's writes when it declares nothing); any
        other tool's on what it declares (an ISOLATED_WRITE snapshot's own cell has its commit rule); all
        but a PURE tool's on this session's fences (:meth:`begin_fence`) too."""
        found = self._reads_of.get(id(t))
        if found is not None and found[0] is t:
            return found[1]
        if t.effect is Effect.READ_ONLY:
            # the world moves with every write of every session, this one's included: with the session's fence
            # version it stands for them all
            versions = (self.version, *t.read_versions, self.fenced) if t.read_versions else self._world
        elif t.effect is Effect.PURE:  # nothing any effect could change
            versions = t.read_versions
        else:  # a snapshot's commit checks only its own cell: a fence must hold it back here
            versions = (*t.read_versions, self.fenced)
        self._reads_of[id(t)] = (t, versions)
        return versions

    def _writes(self, t: Tool) -> tuple[Version, ...]:
        found = self._writes_of.get(id(t))
        if found is not None and found[0] is t:
            return found[1]
        versions = (*self._everything, *t.write_versions) if t.effect.writes else t.write_versions
        self._writes_of[id(t)] = (t, versions)
        return versions

    # --- effects outside any tool ----------------------------------------------------------------

    def begin_untracked_write(self, states: Iterable[object] = ()) -> Write:
        """An effect outside any tool begins (a relayed call of unknown effect, a statement of a code action):
        no read speculated before its end may be served. ``states``: what else it may change (a state shared
        with other processes, say). End the returned write when it has really ended."""
        return self._clock.untracked(self.version, versions_of(states))

    def begin_fence(self) -> Write:
        """An effect of this session nobody can see begins (a call the caller's loop runs itself): no speculation
        of this session started before the returned write ends may be served (a read, or a snapshot that would
        commit over it); other sessions are not held back. End it when the effect has surely ended."""
        return Write((), (self.fenced,))

    @contextlib.contextmanager
    def untracked_write(self) -> Iterator[None]:
        """:meth:`begin_untracked_write` for a block that ends when the effect does."""
        write = self.begin_untracked_write()
        try:
            yield
        finally:
            write.end()

    # --- prepare hooks ----------------------------------------------------------------------------

    def prepare(self, name: str, known: Mapping[str, Any] | None = None, source: str = "unknown") -> bool:
        """Run tool ``name``'s ``prepare`` hook for a hint, with the ``known`` arguments; at most once per
        tool per turn, in the background. Returns whether it was started.

        Never for a tool the policy denies, a closed session or when the runtime backs off completely;
        what the hook returns is ignored and what it raises is counted (PREPARED, with the error type),
        never surfaced.
        """
        t = self._tools.get(name) if isinstance(name, str) else None
        if (t is None or t.prepare is None or self.closed or name in self.prepared
                or not t.speculate or not self._policy.for_tool(name).speculate or self._pressure().level >= 1.0):
            return False
        self.prepared.add(name)
        given = own_arguments(dict(known or {}))
        task = asyncio.get_running_loop().create_task(self._run_prepare(t, given, source))
        self.prepare_tasks.add(task)
        task.add_done_callback(self.prepare_tasks.discard)
        return True

    async def _run_prepare(self, t: Tool, known: Mapping[str, Any], source: str) -> None:
        hook = t.prepare
        assert hook is not None
        detail = "ok"
        try:
            async with asyncio.timeout(self._policy.speculation_timeout_s):
                if inspect.iscoroutinefunction(hook):
                    await hook(known)
                else:  # a sync hook may block (opening a connection): on the speculative thread lane
                    await maybe_await(await self._scheduler.run_sync(lambda: hook(known), speculative=True))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a hint's hook never surfaces, whatever it raises
            detail = type(exc).__name__
        self._ledger.emit(_PREPARED, t, "", source, detail=detail)

    # --- commits and authoritative runs ------------------------------------------------------------

    def commit(self, entry: Entry) -> bool:
        """Commit a hit's snapshot into the live state (a write of the session and the world); ``False`` on
        conflict (the live state moved since the snapshot's base)."""
        snapshot = entry.snapshot
        assert snapshot is not None
        entry.snapshot = None
        t = entry.tool
        write = Write((), self._everything)
        try:
            committed = bool(snapshot.commit())
        except Exception as exc:
            _log.error("commit of a %s snapshot failed: %s", t.label, type(exc).__name__,
                       exc_info=not t.hide_key)  # a private call's traceback may quote its values
            committed = False
        finally:
            write.end()
        if not committed:
            discard_quietly(snapshot, t.label, not t.hide_key)
            return False
        for version in t.write_versions:
            version.bump()
        self._ledger.emit(_COMMITTED, entry.tool, entry.key, entry.source, entry.confidence)
        return True

    async def run(self, t: Tool, arguments: Mapping[str, Any]) -> Any:
        """Run ``t`` on the live state with the caller's own ``arguments``.

        A write counts as in progress, for every session, from before it starts until its work has really
        ended: on the worker thread for a threaded tool (which keeps running when the awaiting caller is
        cancelled), in the tool's own task for an async one (cancelling the caller cancels the task, and the
        write ends when the task does). Only then do the states' versions and cells move on.
        """
        versions = self._writes(t)
        write = Write(t.cells_written, versions) if (versions or t.cells_written) else None
        started = self._now()
        ends_here = True  # whether this coroutine's exit ends the write (else its thread or task does)
        try:
            target = t.state.live if t.state is not None else None
            if t.threaded and write is not None:
                ends_here = False
                return await self._run_threaded_write(t, target, arguments, write)
            if t.threaded:
                return await maybe_await(await self._scheduler.run_sync(
                    lambda: invoke_tool(t, target, arguments), speculative=False))
            value = invoke_tool(t, target, arguments)
            if write is None or not (asyncio.iscoroutine(value) or isinstance(value, asyncio.Future)):
                return await maybe_await(value)
            ends_here = False
            task = asyncio.ensure_future(value)
            task.add_done_callback(lambda _: write.end())
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                task.cancel()  # the caller gave up: so does the tool, and its write ends with its task
                raise
        except ForethoughtError:
            raise
        except Exception as exc:
            reason = type(exc).__name__ if t.hide_key else f"{type(exc).__name__}: {exc}"
            raise ToolExecutionError(t.name, reason) from exc
        finally:
            if write is not None and ends_here:
                write.end()
            self._note_runtime(t.name, self._now() - started)

    async def _run_threaded_write(self, t: Tool, target: Any, arguments: Mapping[str, Any], write: Write) -> Any:
        def run() -> Any:
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

        try:
            return await maybe_await(await self._scheduler.run_sync(run, speculative=False))
        finally:
            if write.on_loop:
                write.end()
            else:
                write.abandon()  # cancelled or never scheduled: ends it only if its thread never started
