"""The code predictor (speculative programmatic tool calling): speculate the tool calls of streamed code.

For agents whose action is Python code that calls tools (CodeAct, smolagents' code mode, RLM), the calls
sit inside generated code. :class:`CodePredictor` watches the message stream and, per turn
(:class:`CodeTurn`):

1. extracts code (:mod:`~forethought.code.fence`) and cuts it into top-level statements the
   moment each closes (:mod:`~forethought.code.segment`), at a cost per delta independent of the
   program's length;
2. sends closed statements to the turn's OS-isolated worker process (:mod:`~forethought.code.worker`),
   which runs them against a copy of the REPL namespace; each tool call there comes back as data, is
   checked and goes to ``Session.speculate``, and is a lazy value in the worker: independent calls fan
   out, dependent ones launch when their inputs arrive;
3. sends the unfinished statement to the worker to peek into (:mod:`~forethought.code.peek`): a loop over
   a known list fans out before it closes, a call whose closing parenthesis has streamed launches.

Where the worker's isolation is unavailable (not Linux, no Landlock, a container forbidding it), code
speculation turns itself off with one warning; extraction and the real run work as always.

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

from forethought._core.runtime import Session
from forethought.code.fence import (
    BlockClosed,
    BlockLine,
    BlockOpened,
    CodeBlock,
    CodeMode,
    FenceEvent,
    FenceExtractor,
)
from forethought.code.link import Coordinator, RealLink
from forethought.code.segment import ClosedStatement, StatementSegmenter
from forethought.code.worker.client import ShadowClient, snapshot
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import WorkerPool, shared_pool

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
    """Speculates tool calls of code streamed by the model; one :class:`CodeTurn` per assistant message.

    Workers come from ``pool`` (by default a process-wide pool for ``limits``, started on construction so
    the first turn finds one ready).
    """

    name = "code"

    def __init__(self, *, mode: CodeMode = CodeMode.AUTO, peek: bool = True,
                 limits: ShadowLimits | None = None, confidence: float = 0.9,
                 pool: WorkerPool | None = None) -> None:
        self.mode = mode
        self.peek = peek
        self.limits = limits or ShadowLimits()
        self.confidence = confidence
        self.pool = pool if pool is not None else shared_pool(self.limits)
        self.pool.warm()
        self.definitions: dict[str, str] = {}
        """Source of the top-level functions and classes seen so far, re-created in later shadows."""

    def remember(self, code: str) -> None:
        """Record the top-level definitions of ``code`` (so the shadow can re-create them next turn)."""
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            return
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef | ast.ClassDef):
                self.definitions[statement.name] = ast.unparse(statement)

    def begin(self, session: Session, namespace: Mapping[str, Any]) -> CodeTurn:
        """Start a turn against the REPL ``namespace`` (call from the event loop the session runs in)."""
        return CodeTurn(self, session, namespace)


class CodeTurn:
    """One streamed message: extraction and segmentation here, execution and peeking in the worker."""

    def __init__(self, predictor: CodePredictor, session: Session, namespace: Mapping[str, Any]) -> None:
        self.predictor = predictor
        self.session = session
        self.tools = frozenset(session.tools)
        self.limits = predictor.limits
        self.coordinator = Coordinator(session, self._settle)
        self.extractor = FenceExtractor(predictor.mode)
        self.segmenters: dict[int, StatementSegmenter] = {}
        self.functions: set[str] = {
            name for name, source in predictor.definitions.items() if source.startswith(("def ", "@"))}
        self._peekable: set[int] = set()
        self._calls_pattern = self._pattern()
        self.blocks: list[CodeBlock] = []
        self._closed = False
        self.shadow = ShadowClient(session, self.coordinator, predictor.pool, predictor.confidence, self.limits)
        fields, self._snapshot_notes = snapshot(namespace, self.tools, predictor.definitions)
        self.shadow.send({"op": "begin", "tools": self.shadow.tools, "reads": self.shadow.reads, "peek": predictor.peek,
                          **fields})

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
        names = sorted(self.tools | self.functions)
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
                if isinstance(node, ast.FunctionDef) and node.name not in self.functions:
                    self.functions.add(node.name)
                    self._calls_pattern = self._pattern()
            self.shadow.send({"op": "stmt", "seq": self.shadow.next_seq(), "block": statement.block,
                              "index": statement.index, "source": statement.source})

    def _submit_peek(self, block: int) -> None:
        segmenter = self.segmenters.get(block)
        if segmenter is None or not segmenter.lines:
            return
        tail = segmenter.open_source
        current = self.extractor.current
        partial = self.extractor.partial_line()
        if current is not None and current.block == block and partial:
            tail += "\n" + partial
        self.shadow.send({"op": "peek", "seq": self.shadow.next_seq(), "block": block, "tail": tail})

    async def _settle(self, within_s: float) -> None:
        await self.shadow.settle(within_s)

    # --- the end ----------------------------------------------------------------------------------

    async def settle(self, within_s: float = 1.0) -> None:
        """Wait until the shadow has nothing it can run right now (tests and diagnostics)."""
        await self.shadow.settle(within_s)

    @property
    def idle(self) -> bool:
        """Whether the worker has run everything sent so far that it can (or is gone)."""
        return self.shadow.idle

    async def close(self, wait_s: float = 0.0) -> bool:
        """Kill the turn's worker; speculations still in the store are the session's to claim or discard.

        Returns ``True``: the worker is killed at once (``wait_s`` is accepted for compatibility).
        """
        if not self._closed:
            self._closed = True
            self.shadow.close()
        await asyncio.sleep(0)
        return True

    @property
    def notes(self) -> list[str]:
        """What the turn could not speculate, and why (unfenced code, blocked statements, syntax errors)."""
        out = list(self.extractor.notes)
        out += [f"block {b}: {s.broken}; later statements not speculated" for b, s in self.segmenters.items()
                if s.broken]
        out += self._snapshot_notes
        out += self.shadow.end_notes()
        if self.shadow.rejected:
            out.append(f"{len(self.shadow.rejected)} shadow call(s) not speculated, e.g. {self.shadow.rejected[0]}")
        return out

    def stats(self) -> CodeTurnStats:
        s = self.shadow.stats
        return CodeTurnStats(statements=s["statements"], executed=s["executed"], blocked=s["blocked"],
                             failed=s["failed"], peeks=s["peeks"], launched=self.shadow.launched,
                             rejected=len(self.shadow.rejected), relaunched=self.coordinator.relaunched)
