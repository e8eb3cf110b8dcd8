"""Canonical fingerprints of in-memory state, for checking that two runs ended in the same state.

:func:`fingerprint` renders any Python object graph (dicts, lists, sets, plain objects, random
generators, timestamps) as compact canonical JSON text: keys and set members sorted, floats spelled
exactly (``1`` and ``1.0`` differ), shared mutable objects and cycles written as ``{"$ref": first path}``,
so the text is the same whenever two graphs are equal in content and in the sharing of mutable parts.
Attributes that hold wall-clock values by construction can be excluded by ``(class name, attribute)``.
"""

from __future__ import annotations

import datetime
import random
import types
from collections.abc import Collection
from typing import Any

from forethought._core.calls import dumps_canonical

Exclusions = Collection[tuple[str, str]]
"""``(class name, attribute name)`` pairs left out of object renderings."""

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)
_TIMES = (datetime.datetime, datetime.date, datetime.time, datetime.timedelta)


def render_state(value: Any, exclude: Exclusions = (), path: str = "$") -> Any:
    """A JSON-able canonical rendering of ``value`` (see the module docstring)."""
    return _Renderer(exclude).render(value, path)


def fingerprint(value: Any, exclude: Exclusions = ()) -> str:
    """Canonical text of ``value``'s whole object graph (deterministic, cycle-safe)."""
    return dumps_canonical(render_state(value, exclude))


class _Renderer:
    def __init__(self, exclude: Exclusions) -> None:
        self.exclude = frozenset(exclude)
        self.seen: dict[int, str] = {}

    def render(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            return {"$float": repr(value)}
        if isinstance(value, bytes):
            return {"$bytes": value.hex()}
        if isinstance(value, random.Random):
            return {"$random": repr(value.getstate())}
        if isinstance(value, _OPAQUE):
            return {"$repr": getattr(value, "__qualname__", getattr(value, "__name__", type(value).__name__))}
        if isinstance(value, _TIMES):
            return {"$time": repr(value)}
        if isinstance(value, tuple):  # immutable: its sharing cannot matter, so it is never a $ref
            return [self.render(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, frozenset):
            return {"$set": sorted((self.render(v, f"{path}{{}}") for v in value), key=dumps_canonical)}
        if not isinstance(value, list | set | dict) and not hasattr(value, "__dict__"):
            return {"$repr": repr(value)}
        ident = id(value)
        if ident in self.seen:
            return {"$ref": self.seen[ident]}
        self.seen[ident] = path
        if isinstance(value, list):
            return [self.render(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, set):
            return {"$set": sorted((self.render(v, f"{path}{{}}") for v in value), key=dumps_canonical)}
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda kv: repr(kv[0]))
            return {"$dict": [[self.render(k, f"{path}.key"), self.render(v, f"{path}.{k}")] for k, v in items]}
        cls = type(value).__name__
        attrs = {k: self.render(v, f"{path}.{k}") for k, v in sorted(vars(value).items())
                 if (cls, k) not in self.exclude}
        return {"$object": cls, "attrs": attrs}
