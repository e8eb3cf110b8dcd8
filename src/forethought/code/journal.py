"""The undo journal of a real run: what statements run ahead of pending calls changed, so it can be undone.

A statement that runs while earlier calls are still pending may only rebind names and change lists, dicts
and sets held by names (the executor checks this). Before it runs, the journal records the old bindings of
the names it writes and shallow copies of the containers it changes in place. If a pending call issued at
statement ``k`` turns out to have raised, :meth:`Journal.rollback` undoes every statement from ``k`` on, in
reverse, restoring containers in place (aliases see the restored contents).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_MISSING: Any = object()
JOURNALED_CONTAINERS = (list, dict, set)


@dataclass(slots=True)
class _Entry:
    statement: int
    names: dict[str, Any]
    containers: list[tuple[Any, Any]] = field(default_factory=list)


class Journal:
    """Undo records of the statements run since the last point where nothing was pending."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, statement: int, namespace: dict[str, Any], names: Iterable[str],
               mutated: Iterable[str]) -> None:
        """Remember the state ``statement`` may change (call before running it)."""
        entry = _Entry(statement, {name: namespace.get(name, _MISSING) for name in names})
        for name in mutated:
            value = namespace.get(name, _MISSING)
            if type(value) in JOURNALED_CONTAINERS:
                entry.containers.append((value, value.copy()))
        self._entries.append(entry)

    def clear(self) -> None:
        self._entries.clear()

    def rollback(self, statement: int, namespace: dict[str, Any]) -> None:
        """Undo every recorded statement numbered ``statement`` or later, newest first."""
        while self._entries and self._entries[-1].statement >= statement:
            entry = self._entries.pop()
            for container, saved in entry.containers:
                if type(container) is list:
                    container[:] = saved
                else:
                    container.clear()
                    container.update(saved)
            for name, value in entry.names.items():
                if value is _MISSING:
                    namespace.pop(name, None)
                else:
                    namespace[name] = value
