"""The shadow's queue: closed statements and peeks as units, and which unit may run next.

A :class:`Statement` comes from the segmenter, a :class:`PeekTask` looks into a block's unfinished tail;
the runner wraps each in a :class:`Unit` and fills in its analysis (:func:`merge` joins the analyses of
several statements written on one line). :func:`pick` takes the first unit that no earlier waiting unit
conflicts with (reads against writes, writes against both, a barrier against everything) and whose
inspected values are resolved (:func:`readiness`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import Any, Protocol

from forethought.code.analysis import SHALLOW, StatementInfo
from forethought.code.cell import Cell
from forethought.code.lazy import Blocked, ShadowLazy, find
from forethought.code.signals import ShadowSignal

SHADOW_FILENAME = "<shadow>"
SHADOW_MODULE_NAME = "__forethought_shadow__"
_MISSING: Any = object()


class PeekTask(Protocol):
    """A look into the unfinished tail of a block, run on the shadow thread."""

    block: int

    def reads(self) -> frozenset[str] | None:
        """Names the peek reads (``None``: nothing to peek)."""

    def run(self, namespace: Mapping[str, Any]) -> None:
        """Launch whatever the tail's closed calls allow."""


class Statement(Protocol):
    """A closed statement as the segmenter emits it."""

    @property
    def block(self) -> int:
        """The code block it belongs to."""

    @property
    def index(self) -> int:
        """Its position in the block."""

    @property
    def tree(self) -> ast.Module:
        """Its parsed form."""


def merge(infos: list[StatementInfo]) -> StatementInfo:
    """One info for several statements written on one line."""
    if len(infos) == 1:
        return infos[0]
    demand: dict[str, int] = {}
    for info in infos:
        for name, level in info.demand:
            demand[name] = max(level, demand.get(name, 0))
    return StatementInfo(
        reads=frozenset().union(*(i.reads for i in infos)), writes=frozenset().union(*(i.writes for i in infos)),
        demand=tuple(sorted(demand.items())), calls=frozenset().union(*(i.calls for i in infos)),
        tool_calls=frozenset().union(*(i.tool_calls for i in infos)),
        methods=tuple(m for i in infos for m in i.methods), mutated=frozenset().union(*(i.mutated for i in infos)),
        lazy_sites=frozenset().union(*(i.lazy_sites for i in infos)),
        kinds=frozenset().union(*(i.kinds for i in infos)),
        barrier=next((i.barrier for i in infos if i.barrier), None))


@dataclass(eq=False)
class Unit:
    """One statement or peek in the runner's queue, with what its analysis found."""

    block: int
    index: int
    statement: Statement | None = None
    peek: PeekTask | None = None
    info: StatementInfo | None = None
    code: CodeType | None = None
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    prepared: bool = False
    failed_syntax: str | None = None


def is_special(value: Any) -> bool:
    """Whether ``value`` is a pending speculated result or a blocked name (the values the shadow cannot use yet)."""
    kind = type(value)
    return kind is ShadowLazy or kind is Blocked


def pick(pending: list[Unit], ns: Mapping[str, Any], special: set[str], hooked: set[Cell],
         wake: Callable[[Cell], None]) -> tuple[Unit, str, str] | None:
    """The first unit no earlier one conflicts with and that need not wait, taken out of ``pending``, with its
    state and why (see :func:`readiness`); ``None`` when each must wait."""
    earlier_reads: set[str] = set()
    earlier_writes: set[str] = set()
    barrier = False
    for unit in list(pending):
        is_barrier = unit.peek is None and acts_as_barrier(unit, ns)
        conflict = barrier or (is_barrier and (earlier_reads or earlier_writes)) or bool(
            unit.writes & (earlier_reads | earlier_writes)) or bool(unit.reads & earlier_writes)
        if not conflict:
            state, reason = readiness(unit, ns, special, hooked, wake)
            if state != "wait":
                pending.remove(unit)
                return unit, state, reason
        earlier_reads |= unit.reads
        earlier_writes |= unit.writes
        barrier = barrier or is_barrier
    return None


def acts_as_barrier(unit: Unit, ns: Mapping[str, Any]) -> bool:
    """Whether ``unit`` orders against everything: its analysis says so, or it calls a function or class
    defined in the shadow (whose body may touch any name)."""
    info = unit.info
    if info is None:
        return False
    if info.barrier is not None:
        return True
    for name in info.calls:
        value = ns.get(name)
        if (type(value) is FunctionType and value.__code__.co_filename == SHADOW_FILENAME) or (
                isinstance(value, type) and value.__module__ == SHADOW_MODULE_NAME):
            return True
    return False


def readiness(unit: Unit, ns: Mapping[str, Any], special: set[str], hooked: set[Cell],
              wake: Callable[[Cell], None]) -> tuple[str, str]:
    """``("ready" | "wait" | "blocked" | "failed", why)`` for ``unit`` by the values it inspects; a pending
    speculated value it waits for calls ``wake`` once resolved (hooked once, recorded in ``hooked``)."""
    if unit.peek is not None:
        return "ready", ""
    if unit.failed_syntax is not None:
        return "failed", f"syntax error: {unit.failed_syntax}"
    info = unit.info
    assert info is not None
    waiting = False
    for name, level in info.demand:
        if name not in special:
            continue
        value = ns.get(name, _MISSING)
        if level == SHALLOW:
            items = [value] if is_special(value) else []
        else:
            items, complete = find(value, is_special)
            if not complete:
                return "blocked", f"{name!r} is too large to inspect"
        for item in items:
            if type(item) is Blocked:
                return "blocked", object.__getattribute__(item, "reason")
            cell = item.cell
            if not cell.done():
                waiting = True
                if cell not in hooked:
                    hooked.add(cell)
                    cell.add_callback(wake)
            elif cell.failed():
                error = cell.error()
                if isinstance(error, ShadowSignal):
                    return "blocked", str(error)
                return "failed", f"a speculated call it depends on raised {type(error).__name__}"
    return ("wait", "") if waiting else ("ready", "")


__all__ = ["SHADOW_FILENAME", "SHADOW_MODULE_NAME", "PeekTask", "Statement", "Unit", "acts_as_barrier",
           "is_special", "merge", "pick", "readiness"]
