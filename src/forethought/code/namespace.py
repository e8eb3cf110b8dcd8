"""The shadow namespace: a copy of the REPL namespace that shadow code may read and change freely.

Plain data (numbers, strings, lists, dicts, sets, dates, the common ``collections`` types) is deep-copied, so
the shadow's changes never reach the real namespace. Allowed modules become their proxies. Functions and
classes are not copied (their code reads the real globals): those defined in code the predictor has seen are
re-created from their source, checked and instrumented like any shadow statement; anything else (other
objects, other modules, values too large to copy) becomes :class:`Blocked`, so only the statements that use
it are skipped. Tool functions are replaced by the shadow's speculating hooks.
"""

from __future__ import annotations

import ast
import collections
import copy
import datetime
import types
from collections.abc import Callable, Mapping
from typing import Any

from forethought.code.lazy import Blocked
from forethought.code.sandbox_modules import SafeImporter
from forethought.code.signals import ShadowBlocked

SHADOW_MODULE_NAME = "__forethought_shadow__"
"""The shadow's ``__name__``: not in ``sys.modules``, so nothing can reach real globals through it."""
_SCALARS = (type(None), bool, int, float, complex, str, bytes, range, datetime.date, datetime.time,
            datetime.timedelta, datetime.timezone)
_CONTAINERS = (list, tuple, dict, set, frozenset, collections.OrderedDict, collections.Counter, collections.deque)
_FACTORIES = (None, list, dict, set, int, float, str, tuple)

Definer = Callable[[dict[str, Any], ast.stmt], str | None]
"""Runs one definition statement in the shadow namespace; returns why it could not, or ``None``."""


def plain_size(value: Any, limit: int) -> int | None:
    """How many objects make up ``value`` if it is plain data of at most ``limit`` objects, else ``None``."""
    seen: set[int] = set()
    stack = [value]
    count = 0
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return None
        kind = type(item)
        if kind in _SCALARS:
            continue
        if isinstance(item, collections.defaultdict):
            if item.default_factory not in _FACTORIES:
                return None
        elif kind not in _CONTAINERS:
            return None
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            stack.extend(item)
    return count


def shadow_namespace(real: Mapping[str, Any], *, hooks: Mapping[str, Any], builtins_map: dict[str, Any],
                     importer: SafeImporter, definitions: Mapping[str, ast.stmt], define: Definer,
                     copy_limit: int) -> tuple[dict[str, Any], list[str]]:
    """Build the shadow namespace from ``real``; returns it with notes on what was blocked and why."""
    ns: dict[str, Any] = {"__builtins__": builtins_map, "__name__": SHADOW_MODULE_NAME}
    notes: list[str] = []
    to_define: list[tuple[str, ast.stmt]] = []
    budget = copy_limit
    for name, value in list(real.items()):
        if name.startswith("__") or name in hooks:
            continue
        if isinstance(value, types.ModuleType):
            try:
                ns[name] = importer.proxy(value.__name__)
            except ShadowBlocked as exc:
                ns[name] = Blocked(str(exc))
            continue
        if isinstance(value, type | types.FunctionType) or callable(value):
            statement = definitions.get(name)
            if statement is not None:
                to_define.append((name, statement))
            else:
                ns[name] = Blocked(f"{name!r} was defined outside the code the predictor saw")
                notes.append(f"{name}: defined outside the streamed code, blocked in the shadow")
            continue
        size = plain_size(value, budget)
        if size is None:
            ns[name] = Blocked(f"{name!r} ({type(value).__name__}) cannot be copied into the shadow")
            notes.append(f"{name}: {type(value).__name__} value not copied into the shadow")
            continue
        budget -= size
        ns[name] = copy.deepcopy(value)
    ns.update(hooks)
    for name, statement in to_define:
        reason = define(ns, statement)
        if reason is not None:
            ns[name] = Blocked(f"{name!r} could not be re-created in the shadow: {reason}")
            notes.append(f"{name}: not re-created in the shadow ({reason})")
    return ns, notes
