"""The code predictor (speculative programmatic tool calling): speculate the tool calls of streamed code.

For agents whose action is Python code that calls tools (CodeAct, smolagents' code mode, RLM), the calls
sit inside generated code. :class:`CodePredictor` watches the message stream and, per turn
(:class:`CodeTurn`):

1. extracts code (:mod:`~forethought.code.fence`) and cuts it into top-level statements the
   moment each closes (:mod:`~forethought.code.segment`), at a cost per delta independent of the
   program's length;
2. runs closed statements in a sandboxed shadow copy of the REPL namespace
   (:class:`~forethought.code.shadow.ShadowRunner`), where each tool call becomes a speculation through
   ``Session.speculate`` and returns a lazy value: independent calls fan out, dependent ones launch when
   their inputs arrive;
3. peeks into the unfinished statement (:mod:`~forethought.code.peek`): a loop over a known list
   fans out before it closes, a call whose closing parenthesis has streamed launches.

The real run (:class:`~forethought.code.executor.CodeExecutor`, given ``turn.link``) claims those
speculations by canonical key. The predictor never changes what the real run computes.

Usage::

    predictor = CodePredictor()
    turn = predictor.begin(session, namespace)      # in the event loop
    for delta in stream: turn.feed(delta)
    blocks = turn.finish()
    executor = CodeExecutor(session, namespace, link=turn.link)
    for block in blocks: result = await executor.run(block.code)
    await turn.close(); session.end_turn()
"""

from __future__ import annotations

import ast
import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forethought._runtime import Session
from forethought.code.checker import refusal
from forethought.code.evaluate import Unresolvable
from forethought.code.fence import (
    BlockClosed,
    BlockLine,
    BlockOpened,
    CodeBlock,
    CodeMode,
    FenceEvent,
    FenceExtractor,
)
from forethought.code.guard import SHADOW_FILENAME, Guard, ShadowLimits
from forethought.code.instrument import InstrumentError, instrument
from forethought.code.launcher import SOURCE_PEEK, SOURCE_SHADOW, SessionLauncher
from forethought.code.link import Coordinator, RealLink
from forethought.code.namespace import shadow_namespace
from forethought.code.peek import Deduplicating, TailPeek, preplan, wants_preplan
from forethought.code.sandbox_builtins import safe_builtins
from forethought.code.sandbox_modules import SafeImporter
from forethought.code.segment import ClosedStatement, StatementSegmenter
from forethought.code.shadow import ShadowRunner
from forethought.code.shadow_hooks import ShadowHook
from forethought.code.signals import ShadowSignal

__all__ = ["CodeMode", "CodePredictor", "CodeTurn", "CodeTurnStats"]


@dataclass(frozen=True, slots=True)
class CodeTurnStats:
    """What the predictor did in one turn."""

    statements: int
    executed: int
    blocked: int
    failed: int
    peeks: int
    launched: int
    rejected: int
    relaunched: int


class CodePredictor:
    """Speculates tool calls of code streamed by the model; one :class:`CodeTurn` per assistant message."""

    name = "code"

    def __init__(self, *, mode: CodeMode = CodeMode.AUTO, peek: bool = True,
                 limits: ShadowLimits | None = None, confidence: float = 0.9) -> None:
        self.mode = mode
        self.peek = peek
        self.limits = limits or ShadowLimits()
        self.confidence = confidence
        self.definitions: dict[str, ast.stmt] = {}
        """Top-level functions and classes of code seen so far, re-created in later shadows."""

    def remember(self, code: str) -> None:
        """Record the top-level definitions of ``code`` (so the shadow can re-create them next turn)."""
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef | ast.ClassDef):
                self.definitions[statement.name] = statement

    def begin(self, session: Session, namespace: Mapping[str, Any]) -> CodeTurn:
        """Start a turn against the REPL ``namespace`` (call from the event loop the session runs in)."""
        return CodeTurn(self, session, namespace)


class CodeTurn:
    """One streamed message: extraction, segmentation, shadow execution and peeking."""

    def __init__(self, predictor: CodePredictor, session: Session, namespace: Mapping[str, Any]) -> None:
        self.predictor = predictor
        self.session = session
        self._real = namespace
        loop = asyncio.get_running_loop()
        self.tools = frozenset(session.tools)
        self.limits = predictor.limits
        self.coordinator = Coordinator(session, self._settle)
        self.launcher = SessionLauncher(session, loop, self.coordinator, predictor.confidence)
        self.guard = Guard(self.limits)
        self.importer = SafeImporter(self.guard)
        self.extractor = FenceExtractor(predictor.mode)
        self.segmenters: dict[int, StatementSegmenter] = {}
        self._peek_launch = Deduplicating(self._launch_peek)
        self._peek_hooks = {name: ShadowHook(session.tools.get_tool(name), self.launcher, self.guard, SOURCE_PEEK)
                            for name in self.tools}
        self.functions: dict[str, ast.FunctionDef] = {
            name: d for name, d in predictor.definitions.items() if isinstance(d, ast.FunctionDef)}
        """Functions defined in the code (earlier turns and this one), which peeks follow into."""
        self._peekable: set[int] = set()
        self._calls_pattern = self._pattern()
        self.runner = ShadowRunner(build_namespace=self._build_namespace, tools=self.tools, guard=self.guard,
                                   preplan=self._preplan if predictor.peek else None)
        self.blocks: list[CodeBlock] = []
        self._closed = False
        self.runner.start()

    # --- streaming (event loop thread) ------------------------------------------------------------

    @property
    def link(self) -> RealLink:
        """What the real executor of this turn reports to."""
        return self.coordinator

    def feed(self, delta: str) -> None:
        """Take one text delta of the assistant message."""
        peek_blocks: set[int] = set()
        for event in self.extractor.feed(delta):
            self._event(event, peek_blocks)
        if self.predictor.peek:
            for block in peek_blocks:
                self._submit_peek(block)

    def finish(self) -> list[CodeBlock]:
        """The message ended: flush everything; returns the code blocks to execute, in order."""
        for event in self.extractor.finish():
            self._event(event, set())
        self.blocks = list(self.extractor.blocks)
        for block in self.blocks:
            self.predictor.remember(block.code)
        return self.blocks

    def _pattern(self) -> re.Pattern[str] | None:
        names = sorted(self.tools | set(self.functions))
        return re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\s*\(") if names else None

    def _event(self, event: FenceEvent, peek_blocks: set[int]) -> None:
        if isinstance(event, BlockOpened):
            self.segmenters[event.block] = StatementSegmenter(event.block)
        elif isinstance(event, BlockLine):
            block = event.block
            segmenter = self.segmenters[block]
            self._submit(segmenter.push_line(event.line))
            if not segmenter.lines:
                self._peekable.discard(block)
                peek_blocks.discard(block)
                return
            if self._calls_pattern is not None and self._calls_pattern.search(event.line):
                self._peekable.add(block)
            if block in self._peekable:
                peek_blocks.add(block)
        elif isinstance(event, BlockClosed):
            self._submit(self.segmenters[event.block].finish())

    def _submit(self, statements: list[ClosedStatement]) -> None:
        for statement in statements:
            for node in statement.tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.functions[node.name] = node
                    self._calls_pattern = self._pattern()
            self.runner.submit(statement)

    def _submit_peek(self, block: int) -> None:
        segmenter = self.segmenters.get(block)
        if segmenter is None or not segmenter.lines:
            return
        tail = segmenter.open_source
        current = self.extractor.current
        partial = self.extractor.partial_line()
        if current is not None and current.block == block and partial:
            tail += "\n" + partial
        self.runner.submit_peek(TailPeek(block, tail, self.tools, self._peek_launch, self.limits.max_unroll,
                                         dict(self.functions)))

    # --- the shadow side (shadow thread) ----------------------------------------------------------

    def _build_namespace(self) -> dict[str, Any]:
        hooks = {name: ShadowHook(self.session.tools.get_tool(name), self.launcher, self.guard, SOURCE_SHADOW,
                                  observe=self.runner.on_launch) for name in self.tools}
        table = safe_builtins(self.guard, self.importer)
        guard = self.guard
        table.update(__ft_tick__=guard.tick, __ft_call__=guard.call, __ft_iter__=guard.iterate,
                     __ft_wrap__=guard.wrap_argument, __ft_binop__=guard.binop, __ft_iop__=guard.iop,
                     __ft_setattr__=guard.setattr, __ft_delattr__=guard.delattr, __ft_reraise__=guard.reraise,
                     __ft_sized__=guard.sized)
        ns, notes = shadow_namespace(self._real, hooks=hooks, builtins_map=table, importer=self.importer,
                                     definitions=self.predictor.definitions, define=self._define,
                                     copy_limit=self.limits.max_copy_nodes)
        for note in notes:
            self.runner.notes.append(note)
        return ns

    def _define(self, ns: dict[str, Any], statement: ast.stmt) -> str | None:
        tree = ast.Module(body=[statement], type_ignores=[])
        reason = refusal(tree)
        if reason is not None:
            return reason
        try:
            code = compile(instrument(tree), SHADOW_FILENAME, "exec", dont_inherit=True)
            self.guard.start_statement()
            exec(code, ns)
        except (InstrumentError, Exception, ShadowSignal) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _launch_peek(self, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return self._peek_hooks[tool](*args, **kwargs)
        except ShadowSignal as exc:
            raise Unresolvable(str(exc)) from None

    def _preplan(self, statement: ast.stmt, namespace: Mapping[str, Any]) -> None:
        functions = dict(self.functions)
        if wants_preplan(statement, functions):
            preplan(statement, namespace, self.tools, self._peek_launch, functions, self.limits.max_unroll)

    async def _settle(self, within_s: float) -> None:
        await self.runner.settle(within_s)

    # --- the end ----------------------------------------------------------------------------------

    async def settle(self, within_s: float = 1.0) -> None:
        """Wait until the shadow has nothing it can run right now (tests and diagnostics)."""
        await self.runner.settle(within_s)

    async def close(self, wait_s: float = 0.0) -> bool:
        """Stop the shadow; speculations still in the store are the session's to claim or discard.

        Waits up to ``wait_s`` (off the event loop) for the shadow thread to end; returns whether it has.
        """
        if not self._closed:
            self._closed = True
            self.runner.stop()
            self.launcher.closed = True
        if wait_s <= 0:
            return self.runner.join(0)
        return await asyncio.to_thread(self.runner.join, wait_s)

    @property
    def notes(self) -> list[str]:
        """What the turn could not speculate, and why (unfenced code, blocked statements, syntax errors)."""
        out = list(self.extractor.notes)
        out += [f"block {b}: {s.broken}; later statements not speculated" for b, s in self.segmenters.items()
                if s.broken]
        out += self.runner.notes
        if self.launcher.rejected:
            out.append(f"{len(self.launcher.rejected)} shadow call(s) not speculated, e.g. "
                       f"{self.launcher.rejected[0]}")
        return out

    def stats(self) -> CodeTurnStats:
        s = self.runner.stats
        return CodeTurnStats(statements=s.statements, executed=s.executed, blocked=s.blocked, failed=s.failed,
                             peeks=s.peeks, launched=self.launcher.launched, rejected=len(self.launcher.rejected),
                             relaunched=self.coordinator.relaunched)
