"""The tool calls of a real run: lazy calls issued early and claimed in program order; eager calls; replay.

Within statements the executor has checked to be free of outside effects, a PURE or READ_ONLY tool call at
one of the statement's *lazy sites* returns a :class:`PendingCall` at once: the call is *issued* (speculated,
so it runs concurrently) but not yet *made*. The site is recognised from the calling frame (its code object
and the position of its call instruction), so the program's code runs unrewritten and no name of ours is
in its namespace or builtins. Calls are *claimed* (made authoritatively through ``Session.execute``, which
takes the running speculation) strictly in issue order, when a value is needed, before any eager call, and
at the end; at most :data:`MAX_PENDING` are pending at once. So the authoritative call sequence, and every
effect, keeps plain execution's order; only the waiting overlaps. A claimed call that raised raises
:class:`Deferred`, on which the executor rolls back to the statement that issued it and replays that
statement from the log, so the error surfaces exactly where plain execution raises it. Arguments that are
not JSON values cannot be keyed: those calls run directly, in order (a tool that may write counts as an
effect outside any tool on the session's write clock, see :mod:`~forethought.code.real_effects`).
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from types import CodeType, FrameType
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.runtime import CallOutcome, Session, SettledSpeculation
from forethought._core.tools import Effect, Tool
from forethought.code.analysis import SiteId
from forethought.code.effects import observing
from forethought.code.json_copy import NotJSONError, json_copy
from forethought.code.lazy import Forwarding, find, replace
from forethought.code.link import RealLink
from forethought.code.plain import call_directly
from forethought.code.real_effects import RealEffects
from forethought.code.results import CallRecord, as_made
from forethought.code.run_ahead import RunAheadGuard
from forethought.errors import CallError, ToolExecutionError

SOURCE_REAL = "code-real"
START_GRACE_S = 0.02
START_POLL_S = 0.0005
_UNAVAILABLE: Any = object()
_MAX_ARGUMENT_NODES = 100_000
MAX_PENDING = 256
"""Calls pending at once, at most: a lazy call past it claims the earlier ones first (bounds what a run issues
ahead, and the event loop's work for it)."""
_READS = (Effect.PURE, Effect.READ_ONLY)


class Mode(enum.Enum):
    """How tool calls behave in the statement being run."""

    EAGER = "eager"
    LAZY = "lazy"
    REPLAY = "replay"


class Deferred(BaseException):
    """A lazily issued call raised when claimed: the run rolls back to its statement and replays it."""

    def __init__(self, pending: PendingCall) -> None:
        super().__init__(pending.tool.name)
        self.pending = pending


class _ShapeMismatch(Exception):
    """The speculation under the call's key was made with other Python types (a tuple for a list, ...)."""


class _ToolFailed(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class PendingCall(Forwarding):
    """An issued, not yet claimed, tool call of the real run (the value a lazy call site returns)."""

    __slots__ = ("args", "error", "index", "issued", "kwargs", "plane", "state", "statement", "task", "tool",
                 "value")

    def __init__(self, plane: CallPlane, index: int, tool: Tool, args: list[Any], kwargs: dict[str, Any],
                 statement: int) -> None:
        for name, value in (("plane", plane), ("index", index), ("tool", tool), ("args", args), ("kwargs", kwargs),
                            ("statement", statement), ("issued", None), ("task", None), ("state", "pending"),
                            ("value", None), ("error", None)):
            object.__setattr__(self, name, value)

    def force(self) -> Any:
        plane: CallPlane = object.__getattribute__(self, "plane")
        return plane.force(self)


def is_pending(value: Any) -> bool:
    return type(value) is PendingCall


def _template(value: Any, budget: list[int]) -> Any:
    return json_copy(value, budget, PendingCall)


def code_tree(code: CodeType) -> Iterator[CodeType]:
    """``code`` and every code object nested in it (comprehensions, ...)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from code_tree(const)


class CallPlane:
    """Issues, claims, records and replays the tool calls of one executor's runs."""

    def __init__(self, session: Session, link: RealLink) -> None:
        self.session = session
        self.link = link
        self.effects = RealEffects(session)
        self.guard = RunAheadGuard(0.0, lambda: False)
        """Replaced by the executor's; the plane holds interruptions off in its own work."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.mode = Mode.EAGER
        self.statement = 0
        self.pending: deque[PendingCall] = deque()
        self.records: list[CallRecord] = []
        self.log: list[tuple[int, str, bool, Any]] = []
        self.replay: deque[tuple[int, str, bool, Any]] = deque()
        self._issued = 0
        self._sites: frozenset[SiteId] = frozenset()
        self._positions: dict[int, list[tuple[int | None, int | None, int | None, int | None]]] = {}

    def reset(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.effects.reset(loop)
        self.mode = Mode.EAGER
        self.pending.clear()
        self.records = []
        self.log = []
        self.replay.clear()
        self.lazy_sites(None, frozenset())

    def lazy_sites(self, code: CodeType | None, sites: frozenset[SiteId]) -> None:
        """The running statement's compiled code and its lazy call sites (``None``: no statement runs lazily)."""
        self._sites = sites
        self._positions = {} if code is None or not sites else {
            id(c): list(c.co_positions()) for c in code_tree(code)}

    def _at_lazy_site(self, frame: FrameType) -> bool:
        positions = self._positions.get(id(frame.f_code))
        index = frame.f_lasti // 2
        if positions is None or index >= len(positions):
            return False
        line, end_line, column, end_column = positions[index]
        return (line, column, end_line, end_column) in self._sites

    # --- entry points from the program (worker thread) --------------------------------------------

    def invoke(self, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any], frame: FrameType) -> Any:
        """A tool call of the program (a :class:`~forethought.code.plain.ToolFunction` called from ``frame``)."""
        with observing(None), self.guard.quiet():  # our own work: no effect of the program, no interruption
            if self.mode is Mode.LAZY and self._at_lazy_site(frame):
                return self.lazy_call(tool, args, kwargs)
            return self.call(tool, args, kwargs)

    def lazy_call(self, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call at a lazy site: issued and returned as a :class:`PendingCall` when it may be."""
        if tool.effect not in _READS or len(self.pending) >= MAX_PENDING:
            return self.call(tool, args, kwargs)
        try:
            budget = [_MAX_ARGUMENT_NODES]
            targs, tkwargs = _template(list(args), budget), _template(dict(kwargs), budget)
        except NotJSONError:
            return self.call(tool, args, kwargs)
        if not find([targs, tkwargs], is_pending)[0]:
            try:
                self.session.resolve(ToolCall(tool.name, tkwargs, tuple(targs)))
            except CallError:
                return self.call(tool, args, kwargs)
        self._issued += 1
        pending = PendingCall(self, self._issued, tool, targs, tkwargs, self.statement)
        self.pending.append(pending)
        assert self.loop is not None
        object.__setattr__(pending, "issued", asyncio.run_coroutine_threadsafe(self._speculate(pending), self.loop))
        return pending

    def call(self, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """An eager call: everything issued before it is claimed first, then it is made."""
        if self.mode is Mode.REPLAY:
            return self._replayed(tool)
        self.claim_all()
        values = replace([list(args), dict(kwargs)], is_pending, self.value_of)
        args_list, kwargs_dict = values[0], values[1]
        try:
            budget = [_MAX_ARGUMENT_NODES]
            _template(kwargs_dict, budget), _template(args_list, budget)  # keyable?
            call = ToolCall(tool.name, kwargs_dict, tuple(args_list))  # the tool gets the program's own objects
            self.session.resolve(call)
        except (NotJSONError, CallError):
            return self._direct(tool, tuple(args_list), kwargs_dict, self.statement)
        try:
            return self._authoritative(call, tool, None, self.statement)
        except _ToolFailed as failed:
            raise failed.error from None

    def force(self, pending: PendingCall) -> Any:
        """A pending value was inspected: claim up to it and return its value."""
        with observing(None), self.guard.quiet():
            self.claim_through(pending)
            return self.value_of(pending)

    # --- claiming ---------------------------------------------------------------------------------

    def value_of(self, pending: PendingCall) -> Any:
        if pending.state != "claimed":
            self.claim_through(pending)
        return pending.value

    def claim_through(self, target: PendingCall) -> None:
        while self.pending and self.pending[0].index <= target.index:
            self._claim(self.pending.popleft())

    def claim_all(self) -> None:
        while self.pending:
            self._claim(self.pending.popleft())

    def _claim(self, pending: PendingCall) -> None:
        values = replace([pending.args, pending.kwargs], is_pending, lambda p: p.value)
        call = ToolCall(pending.tool.name, values[1], tuple(values[0]))
        try:
            value = self._authoritative(call, pending.tool, pending.issued, pending.statement)
        except _ToolFailed as failed:
            object.__setattr__(pending, "state", "failed")
            object.__setattr__(pending, "error", failed.error)
            raise Deferred(pending) from None
        object.__setattr__(pending, "value", value)
        object.__setattr__(pending, "state", "claimed")

    def _authoritative(self, call: ToolCall, tool: Tool, issued: Future[Any] | None, statement: int) -> Any:
        assert self.loop is not None
        made = as_made(call)
        future = asyncio.run_coroutine_threadsafe(self._execute(call, issued), self.loop)
        try:
            outcome: CallOutcome = future.result()
        except _ShapeMismatch:  # a speculation under this key ran with other argument types: plain's call
            try:
                return self._direct(tool, tuple(call.positional), dict(call.arguments), statement)
            except Exception as exc:  # the tool's own error: raised where plain raises it (the caller decides)
                raise _ToolFailed(exc) from None
        except ToolExecutionError as exc:
            error = exc.__cause__ if exc.__cause__ is not None else exc
            self.records.append(CallRecord(made, "miss", ok=False))
            self.log.append((statement, tool.name, False, error))
            raise _ToolFailed(error) from None
        kind: str = outcome.kind
        parallel = False
        if outcome.source == SOURCE_REAL:
            kind, parallel = "miss", True
        self.records.append(CallRecord(made, kind, outcome.source, parallel))
        self.log.append((statement, tool.name, True, outcome.value))
        return outcome.value

    def _direct(self, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any], statement: int) -> Any:
        """Call the tool's function as plain exec does; recorded under ``statement``, the statement that issued
        the call (a pending call claimed later belongs to its own statement, not the claiming one)."""
        assert self.loop is not None
        call = as_made(ToolCall(tool.name, kwargs, args))
        try:
            if tool.effect in _READS:
                value = call_directly(tool, args, kwargs, self.loop)
            else:  # a write the session does not see: reads guessed before it ends are stale
                with self.effects.writing():
                    value = call_directly(tool, args, kwargs, self.loop)
        except BaseException as exc:
            self.records.append(CallRecord(call, "direct", ok=False))
            self.log.append((statement, tool.name, False, exc))
            raise
        self.records.append(CallRecord(call, "direct"))
        self.log.append((statement, tool.name, True, value))
        return value

    # --- replay -----------------------------------------------------------------------------------

    def start_replay(self, statement: int) -> None:
        """Replay ``statement``: its calls return what the log recorded, in order."""
        self.replay = deque(entry for entry in self.log if entry[0] == statement)
        self.mode = Mode.REPLAY

    def _replayed(self, tool: Tool) -> Any:
        if not self.replay:
            raise RuntimeError(f"replay diverged at a call of {tool.name}")
        _, name, ok, value = self.replay.popleft()
        if name != tool.name:
            raise RuntimeError(f"replay diverged: expected {name}, got {tool.name}")
        if not ok:
            raise value
        return value

    # --- on the event loop ------------------------------------------------------------------------

    async def _execute(self, call: ToolCall, issued: Future[Any] | None) -> CallOutcome:
        if issued is not None:
            await asyncio.wait([asyncio.wrap_future(issued)])
        _, _, key = self.session.resolve(call)
        if not self.session.has_speculation(key):
            await self.link.before_call(key)
        await self.session.wait_started(key, START_GRACE_S, START_POLL_S)
        if self.session.has_speculation(key) and not self.link.same_shape(key, call):
            raise _ShapeMismatch
        result = self.link.started(key)
        try:
            outcome = await self.session.execute_detailed(call, share_arguments=True)
        except BaseException as exc:
            result.set_exception(exc)
            raise
        else:
            result.set_result(outcome.value)
        finally:
            self.link.claimed(key)
        return outcome

    async def _speculate(self, pending: PendingCall) -> None:
        inputs = find([pending.args, pending.kwargs], is_pending)[0]
        known: dict[int, Any] = {}
        for item in inputs:
            value = await self._speculative_value(item)
            if value is _UNAVAILABLE:
                return
            known[id(item)] = value
        values = replace([pending.args, pending.kwargs], is_pending, lambda p: known[id(p)])
        call = ToolCall(pending.tool.name, values[1], tuple(values[0]))
        try:
            _, _, key = self.session.resolve(call)
        except CallError:
            return
        if not self.session.has_speculation(key):
            await self.link.before_call(key)
        self.link.note_shape(key, call)
        self.session.speculate(call, source=SOURCE_REAL, confidence=1.0)
        settled: asyncio.Future[SettledSpeculation] = asyncio.get_running_loop().create_future()

        def done(result: SettledSpeculation) -> None:
            if not settled.done():
                settled.set_result(result)

        if self.session.on_settled(key, done):
            object.__setattr__(pending, "task", settled)

    async def _speculative_value(self, item: PendingCall) -> Any:
        if item.state == "claimed":
            return item.value
        if item.issued is not None:
            await asyncio.wait([asyncio.wrap_future(item.issued)])
        settled: asyncio.Future[SettledSpeculation] | None = item.task
        if item.state == "claimed" or settled is None:
            return item.value if item.state == "claimed" else _UNAVAILABLE
        result = await settled
        if result.ok:
            return result.value
        return item.value if item.state == "claimed" else _UNAVAILABLE
