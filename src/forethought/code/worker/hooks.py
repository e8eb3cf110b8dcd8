"""The worker side of a tool call: the shadow's tool functions, and launching calls through the channel.

A tool function in the shadow copies its arguments (plain data only, possibly holding pending results;
anything else blocks the statement), returns a lazy value at once and, when the pending inputs have
arrived, sends the call to the parent as data. The parent alone decides whether it runs; its answer
(a value, the tool's exception, or why it could not be known) resolves the call's cell.
"""

from __future__ import annotations

import builtins
import itertools
import threading
from collections.abc import Callable
from typing import Any, Protocol

from forethought.code.cell import Cell
from forethought.code.effects import observing
from forethought.code.lazy import Blocked, ShadowLazy, Waiter, find, replace
from forethought.code.signals import ShadowBlocked
from forethought.code.wire import NotData, encode, frame, token_bound

MAX_ARGUMENT_NODES = 100_000
_SCALARS = (str, int, float, bool, bytes, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset)


class Sender(Protocol):
    def send_frame(self, data: bytes) -> None:
        """Send one framed message (:func:`~forethought.code.wire.frame`) to the parent."""


def _is_lazy(value: Any) -> bool:
    return type(value) is ShadowLazy


def template(value: Any, budget: list[int]) -> Any:
    """A fresh copy of plain data that may hold pending shadow values; raises :class:`ShadowBlocked`."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ShadowBlocked("the arguments are too large to speculate")
    kind = type(value)
    if kind in _SCALARS or kind is ShadowLazy:
        return value
    if kind is Blocked:
        raise ShadowBlocked(str(object.__getattribute__(value, "reason")))
    if kind is dict:
        return {template(k, budget): template(v, budget) for k, v in value.items()}
    if kind in _CONTAINERS:
        items = [template(v, budget) for v in value]
        return items if kind is list else kind(items)
    raise ShadowBlocked(f"a {kind.__name__} argument is not data; the call is not speculated")


class ChannelLauncher:
    """Sends the shadow's calls to the parent once their inputs are known; resolves cells from answers."""

    def __init__(self, sender: Sender, max_tokens: int) -> None:
        self._sender = sender
        self._max_tokens = max_tokens
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._cells: dict[int, Cell] = {}

    def launch(self, tool: str, arguments: dict[str, Any], positional: tuple[Any, ...], source: str) -> Cell:
        cell = Cell()
        shape = (dict(arguments), list(positional))
        inputs = [lazy.cell for lazy in find(shape, _is_lazy)[0]]
        if not inputs:
            self._send(tool, shape, source, cell)
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
                self._send(tool, replace(shape, _is_lazy, lambda lazy: lazy.cell.result()), source, cell)

        for input_cell in inputs:
            input_cell.add_callback(input_done)
        return cell

    def _send(self, tool: str, shape: tuple[dict[str, Any], list[Any]], source: str, cell: Cell) -> None:
        try:
            kwargs, args = encode(shape[0]), encode(shape[1])
        except NotData as exc:
            cell.set_exception(ShadowBlocked(f"not data: {exc}"))
            return
        with self._lock:
            call_id = next(self._ids)
        data = frame({"op": "call", "id": call_id, "tool": tool, "args": args, "kwargs": kwargs, "source": source})
        if token_bound(data) > self._max_tokens:  # the parent would take such a frame for an attack
            cell.set_exception(ShadowBlocked("the arguments are too large to speculate"))
            return
        with self._lock:
            self._cells[call_id] = cell
        self._sender.send_frame(data)

    def answer(self, call_id: int, cell_result: Callable[[Cell], None]) -> None:
        """Resolve the cell of call ``call_id`` with ``cell_result`` (an unknown id is ignored)."""
        with self._lock:
            cell = self._cells.pop(call_id, None)
        if cell is not None:
            cell_result(cell)


def rebuild_error(kind: str, message: str) -> BaseException:
    """The tool's exception as the shadow sees it: a built-in exception type by name, else RuntimeError."""
    error_type = getattr(builtins, kind, None)
    if isinstance(error_type, type) and issubclass(error_type, Exception):
        try:
            return error_type(message)
        except Exception:  # a built-in exception with a different constructor
            return RuntimeError(f"{kind}: {message}")
    return RuntimeError(f"{kind}: {message}")


class ToolHook:
    """The shadow's stand-in for one tool."""

    __slots__ = ("_launcher", "_name", "_observe", "_reads_allowed", "_source", "_speculable", "_waiter")

    def __init__(self, name: str, speculable: bool, launcher: ChannelLauncher, waiter: Waiter, source: str,
                 observe: Callable[[Cell], None] | None = None,
                 reads_allowed: Callable[[], bool] | None = None) -> None:
        self._name = name
        self._speculable = speculable
        self._launcher = launcher
        self._waiter = waiter
        self._source = source
        self._observe = observe
        self._reads_allowed = reads_allowed
        """For a ``READ_ONLY`` tool: whether a read may still be launched (no effect the shadow cannot model
        came before it)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._speculable:
            return Blocked(f"{self._name} does not run before the real call")
        if self._reads_allowed is not None and not self._reads_allowed():
            return Blocked(f"{self._name} reads what an earlier statement's effect may have changed")
        with observing(None):  # sending the call is not the program's effect
            budget = [MAX_ARGUMENT_NODES]
            positional = tuple(template(a, budget) for a in args)
            arguments = {k: template(v, budget) for k, v in kwargs.items()}
            cell = self._launcher.launch(self._name, arguments, positional, self._source)
            if self._observe is not None:
                self._observe(cell)
        return ShadowLazy(cell, self._waiter)
