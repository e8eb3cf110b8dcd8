"""Real execution of model code through a session: claims speculations, runs independent calls concurrently.

:class:`CodeExecutor` runs a code block statement by statement in a worker thread, against a persistent
namespace whose tool functions go through ``Session.execute`` (so a speculation with the same canonical key
is claimed). Statements the :mod:`~forethought.code.safety` check accepts run *lazily*: their PURE and
READ_ONLY calls return pending values and run concurrently, and the statements after them keep running
while the namespace changes they make are journaled. Anything else is a barrier: all pending calls are
claimed first, in issue order. The observable behaviour (printed output, the error and where it is raised,
the authoritative call sequence, the final namespace) is the one plain execution gives; a call that raises
is handled by rolling back to its statement and replaying it with the recorded results.

Plain semantics, whatever the program does with its namespace: each statement runs as a function whose
builtins are fixed to the block's (as the one frame of plain ``exec`` has them), so rebinding or deleting
``__builtins__`` changes what plain exec's changes and nothing more; nothing of ours is looked up by name in
the namespace or the builtins. Running ahead of pending calls is bounded: only bounded statements run lazily
(:func:`~forethought.code.safety.bounded`), at most :data:`RUN_AHEAD_CPU_S` of CPU each while calls are
pending (past it, the statement is undone and runs again once every earlier call is claimed), and no
placeholder of ours stays anywhere the program can reach once its value is known. A statement's effects
outside the namespace advance the session's write clock (:mod:`~forethought.code.real_effects`).
"""

from __future__ import annotations
import __future__

import ast
import asyncio
import time
import types
from types import CodeType
from typing import Any

from forethought._core.runtime import Session
from forethought.code.analysis import DEEP, SHALLOW, StatementInfo, analyze
from forethought.code.capture import Output, capturing_builtins
from forethought.code.journal import Journal
from forethought.code.lazy import find, replace
from forethought.code.link import NullLink, RealLink
from forethought.code.plain import CODE_FILENAME, ToolFunction
from forethought.code.real_calls import CallPlane, Deferred, Mode, PendingCall, is_pending
from forethought.code.results import ExecResult
from forethought.code.run_ahead import RunAheadExceeded, RunAheadGuard
from forethought.code.safety import bounded, dynamically_safe, statically_safe, writes_outside

RUN_AHEAD_CPU_S = 0.05
"""CPU a statement may use while earlier calls are pending; past it, it waits for them instead."""
_MISSING: Any = object()


class CodeExecutor:
    """Runs code blocks for one session against a persistent namespace."""

    def __init__(self, session: Session, namespace: dict[str, Any] | None = None, *,
                 link: RealLink | None = None, lazy: bool = True) -> None:
        self.session = session
        self.namespace: dict[str, Any] = namespace if namespace is not None else {}
        self.lazy = lazy
        self.plane = CallPlane(session, link or NullLink())
        self._tool_names = frozenset(session.tools)
        for name in session.tools:
            self.namespace[name] = ToolFunction(session.tools.get_tool(name), self.plane.invoke)
        self._lock = asyncio.Lock()
        self._journal = Journal()
        self._touched: set[str] = set()
        self._codes: dict[int, CodeType] = {}
        self._flags = 0
        self._builtins: dict[str, Any] = {}
        self.guard = RunAheadGuard(RUN_AHEAD_CPU_S, lambda: bool(self.plane.pending))
        self.plane.guard = self.guard

    @property
    def link(self) -> RealLink:
        return self.plane.link

    @link.setter
    def link(self, value: RealLink) -> None:
        self.plane.link = value

    async def run(self, code: str) -> ExecResult:
        """Execute one block; the program's own error is returned in the result, never raised.

        Blocks run one at a time, in the order ``run`` was called (as in a REPL).
        """
        async with self._lock:
            loop = asyncio.get_running_loop()
            self.plane.reset(loop)
            output = Output()
            self._builtins = capturing_builtins(output)
            self.namespace["__builtins__"] = self._builtins
            started = time.monotonic()
            error: BaseException | None = None
            try:
                tree = ast.parse(code, CODE_FILENAME)
                compile(tree, CODE_FILENAME, "exec", dont_inherit=True)
                await asyncio.to_thread(self._run_statements, tree)
            except BaseException as exc:  # the program's error is a result
                if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                    raise
                error = exc
            return ExecResult(output.text(), error, tuple(self.plane.records), time.monotonic() - started)

    # --- the worker thread ------------------------------------------------------------------------

    def _run_statements(self, tree: ast.Module) -> None:
        self._flags = future_flags(tree)
        self._journal.clear()
        self._touched = set()
        self._codes = {}
        self.guard.start()
        try:
            for index, statement in enumerate(tree.body):
                self._statement(index, statement)
            self._barrier()
        except Deferred as deferred:
            self._fail_at(deferred)
        finally:
            self.guard.stop()
            self.plane.mode = Mode.EAGER
            self.plane.lazy_sites(None, frozenset())
            self._settle_namespace()

    def _statement(self, index: int, statement: ast.stmt) -> None:
        info = analyze(statement, self._tool_names)
        lazy = self.lazy and statically_safe(info) and bounded(statement)
        if lazy:
            self._resolve_demanded(info)
            lazy = dynamically_safe(info, self.namespace, self._builtins, self._is_tool)
        try:
            self._execute(index, statement, info, lazy)
        except RunAheadExceeded:  # undo it, claim what came before, and run it again the plain way
            self._discard_issued_by(index)
            self._journal.rollback(index, self.namespace)
            self._execute(index, statement, info, False)

    def _execute(self, index: int, statement: ast.stmt, info: StatementInfo, lazy: bool) -> None:
        plane = self.plane
        if not lazy:
            self._barrier()
        elif plane.pending or info.lazy_sites:  # otherwise no rollback can reach this statement
            self._journal.record(index, self.namespace, info.writes, info.mutated)
        if lazy or self._touched:  # what it binds or fills may hold (or alias) a pending value
            self._touched |= info.writes | info.mutated
        code = self._codes.get(index)
        if code is None:
            code = self._codes[index] = self._compile(statement)
        plane.statement = index
        plane.mode = Mode.LAZY if lazy else Mode.EAGER
        plane.lazy_sites(code if lazy else None, info.lazy_sites if lazy else frozenset())
        try:
            with plane.effects.statement(writes_outside(info, self.namespace)):
                if lazy:
                    with self.guard.armed(index):
                        self._exec(code)
                else:
                    self._exec(code)
        except (Deferred, RunAheadExceeded):
            raise
        except BaseException:
            if plane.pending:
                plane.claim_all()
            raise
        finally:
            plane.lazy_sites(None, frozenset())

    def _exec(self, code: CodeType) -> None:
        """Run one statement as plain exec's single frame would: with the block's builtins, whatever
        ``__builtins__`` the program has bound (or deleted) in its namespace since the block began."""
        namespace = self.namespace
        theirs = namespace.get("__builtins__", _MISSING)
        namespace["__builtins__"] = self._builtins
        try:
            function = types.FunctionType(code, namespace)  # takes the builtins in the namespace now
        finally:
            if theirs is _MISSING:
                del namespace["__builtins__"]
            else:
                namespace["__builtins__"] = theirs
        function()

    def _compile(self, statement: ast.stmt) -> CodeType:
        code: CodeType = compile(ast.Module(body=[statement], type_ignores=[]), CODE_FILENAME, "exec",
                                 flags=self._flags, dont_inherit=True)
        return code

    def _is_tool(self, value: Any) -> bool:
        return type(value) is ToolFunction and value.invoked_by(self.plane.invoke)

    def _resolve_demanded(self, info: StatementInfo) -> None:
        """Claim what the statement inspects (up to the newest pending call inside it) and put the claimed
        values in place everywhere the run changed (one walk, so aliases stay aliases)."""
        newest: PendingCall | None = None
        for name, level in info.demand:
            if name not in self._touched or name not in self.namespace:
                continue
            value = self.namespace[name]
            if level == SHALLOW and is_pending(value):
                found = [value]
            elif level == DEEP:
                found = find(value, is_pending)[0]
            else:
                continue
            if found:
                candidate = max(found, key=_index)
                if newest is None or _index(candidate) > _index(newest):
                    newest = candidate
        if newest is not None:
            self.plane.claim_through(newest)
            self._settle_namespace()

    def _barrier(self) -> None:
        """Claim every pending call; then no value in the namespace is pending."""
        self.plane.claim_all()
        self._settle_namespace()
        self._journal.clear()

    def _settle_namespace(self) -> None:
        """Put claimed values where pending ones were (names and containers the run changed), one walk for all
        of them, so a container reachable from several names stays one object."""
        memo: dict[int, Any] = {}
        for name in list(self._touched):
            if name in self.namespace:
                self.namespace[name] = replace(self.namespace[name], _claimed, _value, memo)
        if not self.plane.pending:
            self._touched = set()

    def _discard_issued_by(self, index: int) -> None:
        """Forget the pending calls statement ``index`` issued (their speculations stay the session's)."""
        plane = self.plane
        while plane.pending and plane.pending[-1].statement >= index:
            plane.pending.pop()

    def _fail_at(self, deferred: Deferred) -> None:
        """A call issued at statement ``k`` raised: undo statements ``k``.. and replay ``k`` to raise it."""
        pending = deferred.pending
        plane = self.plane
        plane.pending.clear()
        self._journal.rollback(pending.statement, self.namespace)
        plane.start_replay(pending.statement)
        try:
            self._exec(self._codes[pending.statement])
        finally:
            plane.mode = Mode.EAGER
        error = pending.error
        assert error is not None
        raise error

def future_flags(tree: ast.Module) -> int:
    """Compiler flags of the module's ``from __future__`` imports (each statement is compiled alone)."""
    flags = 0
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        for alias in node.names:
            feature = getattr(__future__, alias.name, None)
            if feature is not None:
                flags |= feature.compiler_flag
    return flags


def _index(pending: PendingCall) -> int:
    index: int = pending.index
    return index


def _claimed(value: Any) -> bool:
    return type(value) is PendingCall and value.state == "claimed"


def _value(pending: PendingCall) -> Any:
    return pending.value
