"""The shadow runner: closed statements of streamed code run early, out of order, in the worker's copy.

It runs inside the OS-isolated worker process (:mod:`forethought.code.worker`): isolation comes from the
kernel, so model code runs here unmodified. One thread executes statements as they close. A statement runs
as soon as (1) no earlier statement still waiting touches the names it touches (reads against writes, writes
against both; calls of functions defined in the shadow order against everything) and (2) the values it
inspects are resolved: a statement that only passes a pending result along (to another tool, into a list)
runs at once, so independent calls fan out and dependent ones launch when their inputs arrive. A watchdog
interrupts Python code of one statement that outruns its CPU budget (waits for speculations do not count);
a statement that swallows the interruption ends the worker.

Outcomes: a statement that is blocked (a value the shadow may not know, a non-data argument, the CPU
budget), or that raises an error the sandbox may have caused (``OSError``, a library's own error), turns
the names it writes or changes into :class:`Blocked`, so only its dependents are skipped; a statement that
raises an error of the program itself (``KeyError``, ``TypeError``, ...), or whose speculated call raised,
ends its block (the real run stops there too), unless it has a ``try``. Peek tasks over the unfinished tail
run between statements, against the same namespace.

Effects the shadow cannot model are barriers for reads: a statement that had an effect outside its
namespace (an audit event, :mod:`~forethought.code.effects`: a file written, the environment changed, a
process or C function called), or that was skipped without being free of such effects, is *unfaithful*: no
call of a ``READ_ONLY`` tool from a later statement (in program order) or a peek is launched any more
(:meth:`ShadowRunner.reads_allowed`). A read launched before the effect was seen is made stale by the real
run, whose own effects advance the session's write clock.

The queue and what may run next live in :mod:`forethought.code.shadow_queue`; the per-statement control
(CPU accounting, waits, the watchdog's interruption) in :mod:`forethought.code.shadow_control`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forethought.code.analysis import DEEP, SHALLOW, StatementInfo, analyze
from forethought.code.cell import Cell
from forethought.code.effects import install, observing
from forethought.code.lazy import Blocked, ShadowLazy, find, replace
from forethought.code.safety import dynamically_safe, statically_safe, writes_outside
from forethought.code.shadow_control import MAX_WAIT_S, Control, clear_async_exception, raise_async
from forethought.code.shadow_queue import (
    SHADOW_FILENAME,
    SHADOW_MODULE_NAME,
    PeekTask,
    Statement,
    Unit,
    is_special,
    merge,
    pick,
)
from forethought.code.signals import (
    ShadowBlocked,
    ShadowBudgetExceeded,
    ShadowSignal,
    ShadowStopped,
    ShadowToolFailed,
)

__all__ = ["EXIT_MEMORY", "EXIT_RUNAWAY", "MAX_NOTES", "MAX_WAIT_S", "SHADOW_FILENAME", "SHADOW_MODULE_NAME",
           "WATCHDOG_PERIOD_S", "Control", "PeekTask", "ShadowRunner", "ShadowStats", "Statement", "merge"]

WATCHDOG_PERIOD_S = 0.05
MAX_NOTES = 50
_GIVE_UP_FACTOR = 3.0
"""A statement still computing at this multiple of its CPU budget swallowed the interruption: the worker ends."""
EXIT_RUNAWAY = 3
EXIT_MEMORY = 4
PEEK_INDEX = 1 << 30
"""Where a peek stands in its block: after every closed statement."""
_PROGRAM_ERRORS = (ArithmeticError, LookupError, TypeError, ValueError, NameError, AttributeError, AssertionError,
                   StopIteration, ShadowToolFailed)
"""Errors the program itself raises wherever it runs: the real run stops there too, so the block's speculation
stops. Any other error (an ``OSError``, a library's own error) may be the sandbox refusing something; it skips
only the statement's dependents."""


def _is_lazy(value: Any) -> bool:
    return type(value) is ShadowLazy


@dataclass(slots=True)
class ShadowStats:
    """What the shadow did in one turn."""

    statements: int = 0
    executed: int = 0
    blocked: int = 0
    failed: int = 0
    peeks: int = 0


class ShadowRunner:
    """Runs one turn's closed statements early on its own thread."""

    def __init__(self, *, build_namespace: Callable[[], dict[str, Any]], tools: frozenset[str], control: Control,
                 preplan: Callable[[ast.stmt, Mapping[str, Any]], None] | None = None,
                 on_idle: Callable[[], None] | None = None,
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self._build_namespace = build_namespace
        self._tools = tools
        self.guard = control
        self._preplan = preplan
        self._on_idle = on_idle
        self._on_fatal = on_fatal
        self.ns: dict[str, Any] = {}
        self._pending: list[Unit] = []
        self._cond = threading.Condition()
        self._idle = False
        self._ready = False
        self._stopped = False
        self._aborted: dict[int, int] = {}
        self._special: set[str] = set()
        self._hooked: set[Cell] = set()
        self._current: Unit | None = None
        self.position: tuple[int, int] = (0, 0)
        """Where the statement (or peek) running now stands: ``(block, index)``."""
        self.unfaithful: tuple[int, int] | None = None
        """The earliest statement, in program order, that the shadow could not run faithfully."""
        self.is_tool: Callable[[Any], bool] = lambda _: False
        """Recognises the shadow's tool functions (set by the worker)."""
        self._watch_lock = threading.Lock()
        self._armed: Unit | None = None
        self._fired: Unit | None = None
        self.notes: list[str] = []
        self.stats = ShadowStats()
        self._thread = threading.Thread(target=self._main, name="forethought-shadow", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="forethought-shadow-watchdog", daemon=True)

    # --- producer side (any thread) ---------------------------------------------------------------

    def start(self) -> None:
        install()
        self._thread.start()
        self._watchdog.start()

    def submit(self, statement: Statement) -> None:
        with self._cond:
            if self._stopped or statement.index >= self._aborted.get(statement.block, 1 << 62):
                return
            self.stats.statements += 1
            self._pending.append(Unit(statement.block, statement.index, statement=statement))
            self._wake_locked()

    def submit_peek(self, task: PeekTask) -> None:
        """Queue a peek; an older peek of the same block still waiting is replaced."""
        with self._cond:
            if self._stopped or task.block in self._aborted:
                return
            self._pending = [u for u in self._pending if not (u.peek is not None and u.block == task.block)]
            self._pending.append(Unit(task.block, -1, peek=task))
            self._wake_locked()

    def recheck(self) -> None:
        """Look at the pending statements again (something outside them changed): the runner reports idle
        once more when it has nothing to run, even if it had nothing before."""
        self._wake()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self.guard.stopped = True
            self._pending.clear()
            self._wake_locked()
            self._release_idle_waiters()

    @property
    def lock(self) -> threading.Condition:
        """The runner's (re-entrant) lock: held while it reports idle, so a submission and its
        sequence number are seen together."""
        return self._cond

    def join(self, timeout: float) -> bool:
        """Wait for the shadow thread to end (after :meth:`stop`); returns whether it did."""
        if not self._thread.is_alive():
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def idle(self) -> bool:
        """Whether the shadow has nothing it can run right now."""
        with self._cond:
            return self._stopped or (self._idle and self._ready)

    def reads_allowed(self) -> bool:
        """Whether a ``READ_ONLY`` call from the statement running now may be launched: no statement before it
        (or it itself, before this call) had an effect the shadow cannot model."""
        return self.unfaithful is None or self.position < self.unfaithful

    def _unfaithful_at(self, unit: Unit, why: str) -> None:
        position = (unit.block, unit.index)
        if self.unfaithful is None or position < self.unfaithful:
            self.unfaithful = position
            self._note(f"block {unit.block} statement {unit.index + 1}: {why}; later reads not speculated")

    def on_launch(self, cell: Cell) -> None:
        """Called (on the shadow thread) for each call a statement launches."""
        unit = self._current
        if unit is None or unit.statement is None:
            return
        cell.add_callback(lambda done: self._call_done(unit, done))

    # --- internals: waking and idling -------------------------------------------------------------

    def _wake_locked(self) -> None:
        self._idle = False
        self._cond.notify_all()

    def _wake(self, _: Cell | None = None) -> None:
        with self._cond:
            self._wake_locked()

    def _release_idle_waiters(self) -> None:
        if self._on_idle is not None:
            self._on_idle()

    def _call_done(self, unit: Unit, cell: Cell) -> None:
        error = cell.error()
        if error is None or isinstance(error, ShadowSignal):
            return
        info = unit.info
        if info is not None and "try" not in info.kinds:
            with self._cond:
                self._abort_locked(unit.block, unit.index + 1, f"a speculated call of statement {unit.index + 1} "
                                                               f"raised {type(error).__name__}")

    def _abort_locked(self, block: int, index: int, why: str) -> None:
        if index < self._aborted.get(block, 1 << 62):
            self._aborted[block] = index
            self._note(f"block {block}: speculation stops at statement {index + 1} ({why})")
        self._pending = [u for u in self._pending
                         if u.block != block or (u.peek is None and u.index < index)]

    def _note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES and text not in self.notes:
            self.notes.append(text)

    # --- the thread -------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self.ns = self._build_namespace()
        except Exception as exc:  # a broken namespace only costs this turn's speculation
            self._note(f"shadow namespace not built: {type(exc).__name__}: {exc}")
            self.stop()
            return
        with self._cond:
            self._ready = True
        while True:
            with self._cond:
                unprepared = [u for u in self._pending if not u.prepared]
            for unit in unprepared:
                self._prepare(unit)
            with self._cond:
                picked = None
                while picked is None:
                    if self._stopped:
                        self._release_idle_waiters()
                        return
                    if any(not u.prepared for u in self._pending):
                        break
                    picked = self._pick()
                    if picked is None:
                        self._idle = True
                        self._release_idle_waiters()
                        self._cond.wait()
            if picked is None:
                continue
            unit, state, reason = picked
            if unit.peek is not None:
                self._run_peek(unit.peek)
            elif state == "blocked":
                self._poison(unit, reason)
            elif state == "failed":
                with self._cond:
                    self._abort_locked(unit.block, unit.index, reason)
            else:
                self._execute(unit)

    def _pick(self) -> tuple[Unit, str, str] | None:
        return pick(self._pending, self.ns, self._special, self._hooked, self._wake)

    def _prepare(self, unit: Unit) -> None:
        unit.prepared = True
        if unit.peek is not None:
            reads = unit.peek.reads()
            unit.reads = reads if reads is not None else frozenset()
            return
        assert unit.statement is not None
        tree = unit.statement.tree
        unit.info = merge([analyze(s, self._tools) for s in tree.body])
        unit.reads, unit.writes = unit.info.reads, unit.info.writes
        try:
            unit.code = compile(tree, SHADOW_FILENAME, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            unit.failed_syntax = str(getattr(exc, "msg", exc))

    def _resolve_inputs(self, info: StatementInfo) -> None:
        for name, level in info.demand:
            if name not in self._special or name not in self.ns:
                continue
            value = self.ns[name]
            if level == DEEP:
                self.ns[name] = replace(value, _is_lazy, lambda lazy: lazy.cell.result())
            elif level == SHALLOW and type(value) is ShadowLazy:
                self.ns[name] = value.cell.result()

    def _execute(self, unit: Unit) -> None:
        info, code = unit.info, unit.code
        assert info is not None and code is not None and unit.statement is not None
        self._resolve_inputs(info)
        self.position = (unit.block, unit.index)
        if writes_outside(info, self.ns):
            self._unfaithful_at(unit, "it may change state the shadow does not see")
        preplan = self._preplan
        if preplan is not None:
            for statement in unit.statement.tree.body:
                self._safely(functools.partial(preplan, statement, self.ns))
        self.guard.start_statement()
        self._current = unit
        outcome: BaseException | None = None
        try:
            try:
                with self._watch_lock:
                    self._armed = unit
                with observing(lambda event: self._unfaithful_at(unit, f"an effect outside the shadow ({event})")):
                    exec(code, self.ns)
            finally:
                with self._watch_lock:
                    self._armed = None
                    clear_async_exception(self.guard.thread_id)
        except BaseException as exc:
            outcome = exc
        self._current = None
        self._after(unit, info, outcome)

    def _after(self, unit: Unit, info: StatementInfo, outcome: BaseException | None) -> None:
        if outcome is None:
            self.stats.executed += 1
            for name in info.writes:
                found, complete = find(self.ns.get(name), is_special)
                if found or not complete:
                    self._special.add(name)
                else:
                    self._special.discard(name)
        elif isinstance(outcome, ShadowStopped):
            return
        elif isinstance(outcome, MemoryError):
            self._fatal(f"statement {unit.index + 1} of block {unit.block} ran out of memory", EXIT_MEMORY)
        elif isinstance(outcome, ShadowToolFailed) or not isinstance(outcome, ShadowSignal):
            uncertain = self.guard.touched_lazy and isinstance(outcome, TypeError | AttributeError)
            sandboxed = not isinstance(outcome, _PROGRAM_ERRORS)  # maybe the sandbox refused something
            if uncertain or sandboxed or "try" in info.kinds:
                self._poison(unit, f"{type(outcome).__name__}: {outcome}")
            else:
                self.stats.failed += 1
                with self._cond:
                    self._abort_locked(unit.block, unit.index, f"{type(outcome).__name__}: {outcome}")
        else:
            self._poison(unit, str(outcome) or type(outcome).__name__)

    def _poison(self, unit: Unit, reason: str) -> None:
        self.stats.blocked += 1
        self._note(f"block {unit.block} statement {unit.index + 1}: skipped ({reason})")
        info = unit.info
        pure = info is not None and statically_safe(info) and dynamically_safe(info, self.ns, vars(builtins),
                                                                                 self.is_tool)
        if not pure:
            self._unfaithful_at(unit, "skipped, and it may have effects")
        changed = set(unit.writes)
        if info is not None:
            changed |= info.mutated | {receiver for receiver, _ in info.methods if receiver}
        for name in changed:  # names it writes, and names whose objects it may have changed half-way
            self.ns[name] = Blocked(reason)
            self._special.add(name)

    def _run_peek(self, task: PeekTask) -> None:
        self.position = (task.block, PEEK_INDEX)
        self.stats.peeks += 1
        self.guard.start_statement()
        self._safely(lambda: task.run(self.ns))

    def _safely(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except (Exception, ShadowBlocked):  # a peek or plan is a bet: failing to place it costs nothing
            return

    def _fatal(self, why: str, code: int) -> None:
        """The worker cannot go on: say why (best effort), then end the process at once."""
        try:
            if self._on_fatal is not None:
                self._on_fatal(why)
        finally:
            os._exit(code)

    # --- the watchdog -----------------------------------------------------------------------------

    def _watch(self) -> None:
        limit = self.guard.statement_cpu_s
        while not self._stopped:
            time.sleep(WATCHDOG_PERIOD_S)
            with self._watch_lock:
                unit = self._armed
                if unit is None:
                    continue
                used = self.guard.cpu_seconds()
                if used > limit * _GIVE_UP_FACTOR:
                    self._fatal(f"statement {unit.index + 1} of block {unit.block} kept computing past its CPU "
                                f"budget", EXIT_RUNAWAY)
                if used <= limit or unit is self._fired:
                    continue
                self._fired = unit
                raise_async(self.guard.thread_id, ShadowBudgetExceeded)
