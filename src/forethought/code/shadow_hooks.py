"""The tool functions of the shadow namespace: each call becomes a speculation and returns a lazy value.

A hook checks its arguments first: they must be JSON values (lists, dicts with string keys, strings, finite
numbers, booleans, ``None``), possibly holding pending shadow values; anything else cannot be keyed the
way the real call will be, so the hook blocks (and only the statements depending on the result are
skipped). Arguments are copied at the call, so later changes to a list passed in do not change the
speculated call. A tool whose effect does not allow early runs returns :class:`Blocked`: its result is
unknown until the real run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from forethought._tools import Tool
from forethought.code.cell import Cell
from forethought.code.json_copy import NotJSONError, json_copy
from forethought.code.lazy import Blocked, ShadowLazy, Waiter
from forethought.code.signals import ShadowBlocked

MAX_ARGUMENT_NODES = 100_000


class Launch(Protocol):
    def launch(self, tool: str, arguments: dict[str, Any], positional: tuple[Any, ...], source: str) -> Cell:
        """Speculate one call; its result arrives in the returned cell."""


def json_template(value: Any, budget: list[int]) -> Any:
    """A fresh copy of a JSON value that may hold pending shadow values; raises :class:`ShadowBlocked`."""
    try:
        return json_copy(value, budget, ShadowLazy, _blocked_reason)
    except NotJSONError as exc:
        raise ShadowBlocked(str(exc)) from None


def _blocked_reason(value: Any) -> str | None:
    return str(object.__getattribute__(value, "reason")) if type(value) is Blocked else None


class ShadowHook:
    """The shadow's stand-in for one tool."""

    __slots__ = ("_launcher", "_observe", "_source", "_tool", "_waiter")

    def __init__(self, tool: Tool, launcher: Launch, waiter: Waiter, source: str,
                 observe: Callable[[Cell], None] | None = None) -> None:
        self._tool = tool
        self._launcher = launcher
        self._waiter = waiter
        self._source = source
        self._observe = observe

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tool = self._tool
        if not tool.speculable:
            return Blocked(f"{tool.name} ({tool.effect.value}) does not run before the real call")
        budget = [MAX_ARGUMENT_NODES]
        positional = tuple(json_template(a, budget) for a in args)
        arguments = {k: json_template(v, budget) for k, v in kwargs.items()}
        cell = self._launcher.launch(tool.name, arguments, positional, self._source)
        if self._observe is not None:
            self._observe(cell)
        return ShadowLazy(cell, self._waiter)
