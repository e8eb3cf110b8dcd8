"""Lazy values of the shadow, the marker of a blocked value, and the walk that finds and replaces them.

A tool call in the shadow returns a :class:`ShadowLazy` at once; the speculation runs meanwhile. The shadow
runner resolves a statement's inputs before running it, so a lazy is normally replaced by its value before
anything inspects it; the forwarding methods here are the fallback for the cases static analysis misses
(each forces the value, waiting for the speculation). A :class:`Blocked` value stands for something the
shadow may not know; any use of it raises :class:`ShadowBlocked`, which skips only the statement using it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from forethought.code.cell import Cell
from forethought.code.signals import ShadowBlocked

SCAN_LIMIT = 200_000
"""Containers walked when looking for lazy values; beyond it the value counts as unresolved."""


class Waiter(Protocol):
    """Waits for a cell on the shadow thread (accounting the wait, honouring a stop)."""

    def wait_cell(self, cell: Cell) -> Any:
        """The cell's value, raising the shadow signal that stands for its failure."""


class Blocked:
    """A value the shadow may not know; using it in any way blocks the using statement."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        object.__setattr__(self, "reason", reason)

    def _block(self, *_: Any, **__: Any) -> Any:
        raise ShadowBlocked(object.__getattribute__(self, "reason"))

    def __getattr__(self, name: str) -> Any:
        self._block()

    def __repr__(self) -> str:
        return f"<blocked: {object.__getattribute__(self, 'reason')}>"

    __str__ = __format__ = __bool__ = __len__ = __iter__ = __contains__ = _block
    __getitem__ = __setitem__ = __delitem__ = __call__ = __setattr__ = _block
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _block
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __abs__ = _block
    __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = __index__ = _block

    def __eq__(self, other: object) -> bool:
        self._block()
        return False

    def __hash__(self) -> int:
        self._block()
        return 0


class Forwarding(abc.ABC):
    """Forwards every use to ``force()``: the fallback of a lazy value that something inspects."""

    __slots__ = ()

    @abc.abstractmethod
    def force(self) -> Any:
        """The value (waiting for it)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self.force())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.force(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.force(), name, value)

    def __repr__(self) -> str:
        return repr(self.force())

    def __str__(self) -> str:
        return str(self.force())

    def __format__(self, spec: str) -> str:
        return format(self.force(), spec)

    def __bool__(self) -> bool:
        return bool(self.force())

    def __len__(self) -> int:
        return len(self.force())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.force())

    def __contains__(self, item: Any) -> bool:
        return item in self.force()

    def __getitem__(self, key: Any) -> Any:
        return self.force()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.force()[key] = value

    def __eq__(self, other: object) -> bool:
        return bool(self.force() == force_value(other))

    def __ne__(self, other: object) -> bool:
        return bool(self.force() != force_value(other))

    def __lt__(self, other: Any) -> Any:
        return self.force() < force_value(other)

    def __le__(self, other: Any) -> Any:
        return self.force() <= force_value(other)

    def __gt__(self, other: Any) -> Any:
        return self.force() > force_value(other)

    def __ge__(self, other: Any) -> Any:
        return self.force() >= force_value(other)

    def __hash__(self) -> int:
        return hash(self.force())

    def __add__(self, other: Any) -> Any:
        return self.force() + force_value(other)

    def __radd__(self, other: Any) -> Any:
        return force_value(other) + self.force()

    def __sub__(self, other: Any) -> Any:
        return self.force() - force_value(other)

    def __rsub__(self, other: Any) -> Any:
        return force_value(other) - self.force()

    def __mul__(self, other: Any) -> Any:
        return self.force() * force_value(other)

    def __rmul__(self, other: Any) -> Any:
        return force_value(other) * self.force()

    def __truediv__(self, other: Any) -> Any:
        return self.force() / force_value(other)

    def __floordiv__(self, other: Any) -> Any:
        return self.force() // force_value(other)

    def __mod__(self, other: Any) -> Any:
        return self.force() % force_value(other)

    def __neg__(self) -> Any:
        return -self.force()

    def __abs__(self) -> Any:
        return abs(self.force())

    def __int__(self) -> int:
        return int(self.force())

    def __float__(self) -> float:
        return float(self.force())

    def __index__(self) -> int:
        return int(self.force().__index__())


class ShadowLazy(Forwarding):
    """The pending result of a speculated call in the shadow."""

    __slots__ = ("_cell", "_waiter")

    def __init__(self, cell: Cell, waiter: Waiter) -> None:
        object.__setattr__(self, "_cell", cell)
        object.__setattr__(self, "_waiter", waiter)

    @property
    def cell(self) -> Cell:
        cell: Cell = object.__getattribute__(self, "_cell")
        return cell

    def force(self) -> Any:
        """Wait for the value (raising the signal that stands for a failed or blocked speculation)."""
        waiter: Waiter = object.__getattribute__(self, "_waiter")
        return waiter.wait_cell(self.cell)


def force_value(value: Any) -> Any:
    """``value`` itself, or the value of a lazy one."""
    return value.force() if issubclass(type(value), Forwarding) else value


Predicate = Callable[[Any], bool]


def find(value: Any, wanted: Predicate, limit: int = SCAN_LIMIT) -> tuple[list[Any], bool]:
    """The objects matching ``wanted`` inside ``value`` (plain containers, walked deeply, cycle-safe).

    Returns ``(found, complete)``; ``complete`` is false when the walk stopped at ``limit`` containers.
    """
    found: list[Any] = []
    seen: set[int] = set()
    stack = [value]
    visited = 0
    while stack:
        item = stack.pop()
        if wanted(item):
            found.append(item)
            continue
        kind = type(item)
        if kind not in (list, tuple, dict, set, frozenset) or id(item) in seen:
            continue
        visited += 1
        if visited > limit:
            return found, False
        seen.add(id(item))
        if kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            stack.extend(item)
    return found, True


def replace(value: Any, wanted: Predicate, mapper: Callable[[Any], Any], memo: dict[int, Any] | None = None) -> Any:
    """``value`` with every object matching ``wanted`` swapped for ``mapper(obj)`` (dict keys and set members
    included).

    Lists, dicts and sets are changed in place (aliases see the values; a dict keeps its order); tuples and
    frozensets are rebuilt when something inside changed. Pass one ``memo`` to several calls so that a
    container reachable from several of them is rebuilt once (every reference then sees the same object).
    """
    seen: dict[int, Any] = {} if memo is None else memo

    def walk(item: Any) -> Any:
        if wanted(item):
            return mapper(item)
        kind = type(item)
        if kind not in (list, tuple, dict, set, frozenset):
            return item
        key = id(item)
        if key in seen:
            return seen[key]
        seen[key] = item
        if kind is list:
            for i, element in enumerate(item):
                new = walk(element)
                if new is not element:
                    item[i] = new
            return item
        if kind is dict:
            pairs = [(k, v, walk(k), walk(v)) for k, v in list(item.items())]
            if any(nk is not k for k, _, nk, _ in pairs):
                item.clear()
                item.update((nk, nv) for _, _, nk, nv in pairs)
            else:
                for k, v, _, nv in pairs:
                    if nv is not v:
                        item[k] = nv
            return item
        elements = [walk(e) for e in item]
        if all(a is b for a, b in zip(elements, item, strict=True)):
            return item
        if kind is set:
            item.clear()
            item.update(elements)
            return item
        rebuilt = kind(elements)
        seen[key] = rebuilt
        return rebuilt

    return walk(value)
