"""Launching the shadow's tool calls as speculations: from the shadow thread, through the event loop.

:meth:`SessionLauncher.launch` may be called from any thread; it returns a :class:`Cell` at once. A call
whose arguments hold pending shadow values waits for them (its inputs) and launches when they resolve, so
independent calls fan out and dependent ones follow their inputs. On the loop, the call is keyed by the
session; if the real run already made it, the cell takes the real result; otherwise the call goes to
``Session.speculate``, and the cell follows the speculation (its value, or the error its entry holds). A
rejected, cancelled or timed-out launch resolves the cell with :class:`ShadowBlocked` (the shadow cannot
know the value); a tool that raised resolves it with the tool's exception.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from forethought._calls import ToolCall
from forethought._runtime import Session, SettledSpeculation
from forethought.code.cell import Cell
from forethought.code.lazy import ShadowLazy, find, replace
from forethought.code.link import Coordinator
from forethought.code.signals import ShadowBlocked
from forethought.errors import CallError, ToolExecutionError

SOURCE_SHADOW = "code-shadow"
SOURCE_PEEK = "code-peek"


def _is_lazy(value: Any) -> bool:
    return type(value) is ShadowLazy


class SessionLauncher:
    """Starts shadow tool calls as speculations of one session."""

    def __init__(self, session: Session, loop: asyncio.AbstractEventLoop, coordinator: Coordinator,
                 confidence: float = 0.9) -> None:
        self.session = session
        self.loop = loop
        self.coordinator = coordinator
        self.confidence = confidence
        self.launched = 0
        self.rejected: list[str] = []
        self._lock = threading.Lock()
        self.closed = False

    def launch(self, tool: str, arguments: Mapping[str, Any], positional: tuple[Any, ...], source: str) -> Cell:
        """Speculate ``tool(*positional, **arguments)`` (arguments may hold pending shadow values)."""
        cell = Cell()
        template = (dict(arguments), list(positional))
        inputs = [lazy.cell for lazy in find(template, _is_lazy)[0]]
        if not inputs:
            self._schedule(tool, template, source, cell)
            return cell
        remaining = [len(inputs)]

        def input_done(done: Cell) -> None:
            error = done.error()
            if error is not None:
                cell.set_exception(error)
                return
            with self._lock:
                remaining[0] -= 1
                ready = remaining[0] == 0
            if ready:
                concrete = replace(template, _is_lazy, lambda lazy: lazy.cell.result())
                self._schedule(tool, concrete, source, cell)

        for input_cell in inputs:
            input_cell.add_callback(input_done)
        return cell

    def _schedule(self, tool: str, template: tuple[dict[str, Any], list[Any]], source: str, cell: Cell) -> None:
        try:
            self.loop.call_soon_threadsafe(self._start, tool, template, source, cell)
        except RuntimeError:
            cell.set_exception(_blocked("the event loop is closed"))

    def _start(self, tool: str, template: tuple[dict[str, Any], list[Any]], source: str, cell: Cell) -> None:
        if self.closed or cell.done():
            cell.set_exception(_blocked("the turn ended"))
            return
        call = ToolCall(tool, template[0], tuple(template[1]))
        try:
            _, _, key = self.session.resolve(call)
        except CallError as exc:
            cell.set_exception(_blocked(f"not a valid call: {exc}"))
            return
        real = self.coordinator.real_result(key)
        if real is not None:
            real.add_done_callback(lambda f: _settle_from(cell, f))
            return
        if source == SOURCE_SHADOW:
            self.coordinator.want(key, call, source, self.confidence)
        ticket = self.session.speculate(call, source=source, confidence=self.confidence)
        if ticket.status not in ("launched", "deduplicated") or not self.session.on_settled(
                key, lambda result: _settle_from_result(cell, result)):
            self.rejected.append(f"{tool}: {ticket.reason or ticket.status}")
            cell.set_exception(_blocked(f"not speculated: {ticket.reason or ticket.status}"))
            return
        if ticket.launched:
            self.launched += 1


def _blocked(reason: str) -> BaseException:
    return ShadowBlocked(reason)


def _settle_from_result(cell: Cell, result: SettledSpeculation) -> None:
    """Resolve ``cell`` from a finished speculation."""
    if result.cancelled:
        cell.set_exception(_blocked("the speculation was cancelled"))
    elif result.error is not None:
        error = result.error
        cell.set_exception(_blocked("the speculation timed out") if isinstance(error, TimeoutError) else error)
    elif result.ok:
        cell.set_result(result.value)
    else:
        cell.set_exception(_blocked("the speculation ended without a value"))


def _settle_from(cell: Cell, future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        cell.set_exception(_blocked("the speculation was cancelled"))
        return
    error = future.exception()
    if error is None:
        cell.set_result(future.result())
    elif isinstance(error, ToolExecutionError) and error.__cause__ is not None:
        cell.set_exception(error.__cause__)
    elif isinstance(error, TimeoutError):
        cell.set_exception(_blocked("the speculation timed out"))
    else:
        cell.set_exception(error)
