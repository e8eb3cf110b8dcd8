"""Which statements of a real run may run while earlier tool calls are still pending, and the rewrite of
their lazy call sites.

A statement may run ahead only if everything it does can be undone by the :class:`Journal` or has no effect
outside the namespace: it rebinds names and changes lists, dicts and sets held by names; it calls only tool
functions, a list of pure builtins, pure functions of ``math``/``statistics``/``json``/``re`` and methods
of built-in values (mutating ones only on a journaled container); and the values it inspects are plain data.
Definitions, imports, ``try``/``with``, attribute access, lambdas and calls of anything else make the
statement *eager*: every pending call is claimed before it runs. This is checked twice: statically from the
:class:`StatementInfo`, and against the namespace right before the statement runs.
"""

from __future__ import annotations

import ast
import builtins
import copy
import datetime
import types
from collections.abc import Mapping
from typing import Any

from forethought.code.analysis import SiteId, StatementInfo, site_of

UNSAFE_KINDS = frozenset({"def", "class", "import", "try", "with", "delete", "attr_store", "attr_load", "lambda",
                          "await", "match", "annotation", "return", "global"})
SAFE_BUILTINS = frozenset(id(getattr(builtins, name)) for name in (
    "len", "str", "int", "float", "bool", "list", "dict", "tuple", "set", "frozenset", "range", "enumerate", "zip",
    "sorted", "reversed", "min", "max", "sum", "abs", "round", "any", "all", "repr", "divmod", "chr", "ord", "hex",
    "bin", "oct", "isinstance", "map", "filter"))
PURE_MODULE_FUNCTIONS: dict[str, frozenset[str] | None] = {
    "math": None, "statistics": None, "json": frozenset({"dumps", "loads"}),
    "re": frozenset({"search", "match", "fullmatch", "findall", "sub", "subn", "split", "escape"})}
IMMUTABLE_TYPES = (str, bytes, tuple, frozenset, int, float, bool, complex, type(None), range,
                   datetime.date, datetime.datetime, datetime.time, datetime.timedelta)
CONTAINER_TYPES = (list, dict, set)
READING_METHODS: dict[type, frozenset[str]] = {
    list: frozenset({"index", "count", "copy"}),
    dict: frozenset({"get", "keys", "values", "items", "copy"}),
    set: frozenset({"union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
                    "isdisjoint", "copy"}),
}
MUTATING: dict[type, frozenset[str]] = {
    list: frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}),
    dict: frozenset({"update", "setdefault", "pop", "popitem", "clear"}),
    set: frozenset({"add", "update", "discard", "remove", "pop", "clear", "difference_update",
                    "intersection_update", "symmetric_difference_update"}),
}


def statically_safe(info: StatementInfo) -> bool:
    """Whether the statement's form allows running it ahead of pending calls."""
    return info.barrier is None and not (info.kinds & UNSAFE_KINDS)


def _lookup(name: str, namespace: Mapping[str, Any]) -> Any:
    if name in namespace:
        return namespace[name]
    table = namespace.get("__builtins__", builtins)
    if isinstance(table, types.ModuleType):
        table = vars(table)
    return table.get(name, None) if isinstance(table, dict) else None


def _pure_module(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ in PURE_MODULE_FUNCTIONS


def _plain(value: Any) -> bool:
    kind = type(value)
    return kind in IMMUTABLE_TYPES or kind in CONTAINER_TYPES or id(value) in SAFE_BUILTINS or _pure_module(value)


def dynamically_safe(info: StatementInfo, namespace: Mapping[str, Any], is_tool: Any) -> bool:
    """Whether, with the namespace as it is now, the statement touches only what :func:`statically_safe`
    promised (``is_tool(value)`` recognises the real run's tool functions)."""
    for name in info.calls:
        if id(_lookup(name, namespace)) not in SAFE_BUILTINS:
            return False
    for name in info.tool_calls:
        if not is_tool(namespace.get(name)):
            return False
    for name, _ in info.demand:
        if name in info.tool_calls or name in info.calls:
            continue
        if name in namespace and not _plain(namespace[name]):
            return False
    for name in info.mutated:
        if type(namespace.get(name)) not in CONTAINER_TYPES:
            return False
    return all(_method_safe(receiver, method, info, namespace) for receiver, method in info.methods)


def _method_safe(receiver: str | None, method: str, info: StatementInfo, namespace: Mapping[str, Any]) -> bool:
    if method.startswith("_"):
        return False
    if receiver == "":
        return hasattr(str, method)
    if receiver is None:
        return False
    value = namespace.get(receiver)
    if isinstance(value, types.ModuleType) and value.__name__ in PURE_MODULE_FUNCTIONS:
        allowed = PURE_MODULE_FUNCTIONS[value.__name__]
        return (allowed is None or method in allowed) and callable(getattr(value, method, None))
    kind: type = type(value)
    if kind in IMMUTABLE_TYPES:
        return True
    if kind in READING_METHODS:
        if method in READING_METHODS[kind]:
            return True
        return method in MUTATING[kind] and receiver in info.mutated
    return False


class _LazySites(ast.NodeTransformer):
    def __init__(self, sites: frozenset[SiteId]) -> None:
        self.sites = sites

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        if site_of(node) not in self.sites:
            return node
        return ast.copy_location(ast.Call(func=ast.Name(id="__ft_lazy__", ctx=ast.Load()),
                                          args=[node.func, *node.args], keywords=node.keywords), node)


def with_lazy_sites(statement: ast.stmt, sites: frozenset[SiteId]) -> ast.Module:
    """The statement as a module whose lazy call sites call ``__ft_lazy__(f, ...)``."""
    tree = ast.Module(body=[copy.deepcopy(statement)], type_ignores=[])
    if sites:
        tree = _LazySites(sites).visit(tree)
    return ast.fix_missing_locations(tree)
