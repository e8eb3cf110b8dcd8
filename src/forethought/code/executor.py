"""Real execution of model code through a session: claims speculations, runs independent calls concurrently.

:class:`CodeExecutor` runs a code block statement by statement in a worker thread, against a persistent
namespace whose tool functions go through ``Session.execute`` (so a speculation with the same canonical key
is claimed). Statements the :mod:`~forethought.code.safety` check accepts run *lazily*: their PURE and
READ_ONLY calls return pending values and run concurrently, and the statements after them keep running
while the namespace changes they make are journaled. Anything else is a barrier: all pending calls are
claimed first, in issue order. The observable behaviour (printed output, the error and where it is raised,
the authoritative call sequence, the final namespace) is the one plain execution gives; a call that raises
is handled by rolling back to its statement and replaying it with the recorded results.
"""

from __future__ import annotations
import __future__

import ast
import asyncio
import time
from types import CodeType
from typing import Any

from forethought._core.runtime import Session
from forethought.code.analysis import DEEP, SHALLOW, StatementInfo, analyze
from forethought.code.capture import Output, capturing_builtins
from forethought.code.journal import Journal
from forethought.code.lazy import find, replace
from forethought.code.link import NullLink, RealLink
from forethought.code.plain import CODE_FILENAME
from forethought.code.real_calls import CallPlane, Deferred, Mode, PendingCall, RealHook, is_pending
from forethought.code.results import ExecResult
from forethought.code.safety import dynamically_safe, statically_safe, with_lazy_sites


def _is_real_tool(value: Any) -> bool:
    return type(value) is RealHook


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
            self.namespace[name] = RealHook(session.tools.get_tool(name), self.plane)
        self._lock = asyncio.Lock()
        self._journal = Journal()
        self._touched: set[str] = set()
        self._codes: dict[int, CodeType] = {}
        self._flags = 0

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

            def lazy(func: Any, /, *args: Any, **kwargs: Any) -> Any:
                return self.plane.lazy_call(func, args, kwargs)

            self.namespace["__builtins__"] = capturing_builtins(output, {"__ft_lazy__": lazy})
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
        try:
            for index, statement in enumerate(tree.body):
                self._statement(index, statement)
            self._barrier()
        except Deferred as deferred:
            self._fail_at(deferred)
        finally:
            self.plane.mode = Mode.EAGER
            self._settle_namespace()

    def _statement(self, index: int, statement: ast.stmt) -> None:
        info = analyze(statement, self._tool_names)
        plane = self.plane
        lazy = self.lazy and statically_safe(info)
        if lazy:
            self._resolve_demanded(info)
            lazy = dynamically_safe(info, self.namespace, _is_real_tool)
        if not lazy:
            self._barrier()
            code = self._compile(ast.Module(body=[statement], type_ignores=[]))
        else:
            code = self._compile(with_lazy_sites(statement, info.lazy_sites))
            if plane.pending or info.lazy_sites:  # otherwise no rollback can reach this statement
                self._journal.record(index, self.namespace, info.writes, info.mutated)
                self._touched |= info.writes
        self._codes[index] = code
        plane.statement = index
        plane.mode = Mode.LAZY if lazy else Mode.EAGER
        try:
            exec(code, self.namespace)
        except Deferred:
            raise
        except BaseException:
            if plane.pending:
                plane.claim_all()
            raise

    def _compile(self, tree: ast.Module) -> CodeType:
        code: CodeType = compile(tree, CODE_FILENAME, "exec", flags=self._flags, dont_inherit=True)
        return code

    def _resolve_demanded(self, info: StatementInfo) -> None:
        """Claim what the statement inspects (up to the newest pending call inside it) and fill it in."""
        for name, level in info.demand:
            if name not in self._touched or name not in self.namespace:
                continue
            value = self.namespace[name]
            if level == SHALLOW:
                if is_pending(value):
                    self.namespace[name] = self.plane.value_of(value)
                continue
            if level == DEEP:
                found, _ = find(value, is_pending)
                if found:
                    self.plane.claim_through(max(found, key=_index))
                    self.namespace[name] = replace(value, is_pending, self.plane.value_of)

    def _barrier(self) -> None:
        """Claim every pending call; then no value in the namespace is pending."""
        self.plane.claim_all()
        self._settle_namespace()
        self._journal.clear()

    def _settle_namespace(self) -> None:
        """Put claimed values where pending ones were (names and containers the run changed)."""
        for name in list(self._touched):
            if name in self.namespace:
                self.namespace[name] = replace(self.namespace[name], _claimed, _value)
        if not self.plane.pending:
            self._touched = set()

    def _fail_at(self, deferred: Deferred) -> None:
        """A call issued at statement ``k`` raised: undo statements ``k``.. and replay ``k`` to raise it."""
        pending = deferred.pending
        plane = self.plane
        plane.pending.clear()
        self._journal.rollback(pending.statement, self.namespace)
        plane.start_replay(pending.statement)
        try:
            exec(self._codes[pending.statement], self.namespace)
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
