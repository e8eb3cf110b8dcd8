"""Which statements of a real run may run while earlier tool calls are still pending.

A statement may run ahead only if everything it does can be undone by the :class:`Journal` or has no effect
outside the namespace: it rebinds names and changes lists, dicts and sets held by names; it calls only tool
functions, a list of pure builtins, pure functions of ``math``/``statistics``/``json`` and methods of
built-in values (mutating ones only on a journaled container); and the values it inspects are plain data.
Definitions, imports, ``try``/``with``, attribute access, lambdas and calls of anything else make the
statement *eager*: every pending call is claimed before it runs. This is checked twice: statically from the
:class:`StatementInfo`, and against the namespace (and the block's builtins) right before the statement runs.

It must also be *bounded* (:func:`bounded`): no single operation whose cost is not linear in data that
already exists (``*`` but by a small constant, ``**``, ``<<``, ``%`` but a remainder or a narrow constant
format, wide or computed format specs, padding and ``replace`` methods, regular expressions, big-integer
``math``, ``range`` consumed in C, a generator kept past the statement). Python-level loops stay bounded by
the executor's CPU allowance for running ahead.

:func:`writes_outside` says which statements change state no audit event reports (a module's attributes or
contents): the real run counts those as writes from their start.
"""

from __future__ import annotations

import ast
import builtins
import datetime
import re
import types
from collections.abc import Mapping
from typing import Any

from forethought.code.analysis import StatementInfo

UNSAFE_KINDS = frozenset({"def", "class", "import", "try", "with", "delete", "attr_store", "attr_load", "lambda",
                          "await", "match", "annotation", "return", "global"})
SAFE_BUILTINS = frozenset(id(getattr(builtins, name)) for name in (
    "len", "str", "int", "float", "bool", "list", "dict", "tuple", "set", "frozenset", "range", "enumerate", "zip",
    "sorted", "reversed", "min", "max", "sum", "abs", "round", "any", "all", "repr", "divmod", "chr", "ord", "hex",
    "bin", "oct", "isinstance", "map", "filter"))
PURE_MODULE_FUNCTIONS: dict[str, frozenset[str] | None] = {
    "math": frozenset({"sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos",
                       "atan", "atan2", "sinh", "cosh", "tanh", "floor", "ceil", "trunc", "fabs", "fsum", "hypot",
                       "dist", "isclose", "isfinite", "isinf", "isnan", "copysign", "degrees", "radians", "fmod",
                       "modf", "frexp", "ldexp", "gcd", "pi", "e", "tau", "inf", "nan"}),
    "statistics": None, "json": frozenset({"dumps", "loads"})}
"""Module functions a statement running ahead may call: their cost is linear in their input (no ``re``:
backtracking; no big-integer ``math``: ``factorial``, ``comb``, ``perm``, ``prod``, ``pow``...)."""
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


def _lookup(name: str, namespace: Mapping[str, Any], builtins_table: Mapping[str, Any]) -> Any:
    if name in namespace:
        return namespace[name]
    return builtins_table.get(name, None)


def _pure_module(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ in PURE_MODULE_FUNCTIONS


def _plain(value: Any) -> bool:
    kind = type(value)
    return kind in IMMUTABLE_TYPES or kind in CONTAINER_TYPES or id(value) in SAFE_BUILTINS or _pure_module(value)


def dynamically_safe(info: StatementInfo, namespace: Mapping[str, Any], builtins_table: Mapping[str, Any],
                     is_tool: Any) -> bool:
    """Whether, with the namespace as it is now, the statement touches only what :func:`statically_safe`
    promised (names not in the namespace resolve in ``builtins_table``, the builtins the statement runs with;
    ``is_tool(value)`` recognises the real run's tool functions)."""
    for name in info.calls:
        if id(_lookup(name, namespace, builtins_table)) not in SAFE_BUILTINS:
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


_COSTLY_OPERATORS = (ast.Mult, ast.Pow, ast.LShift, ast.Mod, ast.MatMult)
_COSTLY_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "format", "format_map",
                             "translate"})
_RANGE_CAP = 100_000
_FACTOR_CAP = 64
_WIDTH_DIGITS = 4
"""A constant format spec (``f'{n:03d}'``, ``'%5s' % x``) is bounded when none of its numbers has more digits."""


def _small_number(node: ast.expr, cap: int = _RANGE_CAP) -> bool:
    value = node.value if isinstance(node, ast.Constant) else None
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= cap


def _narrow_format(text: str) -> bool:
    return "*" not in text and all(len(run) <= _WIDTH_DIGITS for run in re.findall(r"\d+", text))


def _bounded_operation(op: ast.operator, left: ast.expr, right: ast.expr) -> bool:
    if not isinstance(op, _COSTLY_OPERATORS) or (_small_number(left) and _small_number(right)):
        return True
    if isinstance(op, ast.Mult):  # at most a small multiple of data that exists
        return _small_number(left, _FACTOR_CAP) or _small_number(right, _FACTOR_CAP)
    if isinstance(op, ast.Mod):  # numeric remainder, or formatting with a constant, narrow format
        if isinstance(left, ast.Constant) and isinstance(left.value, str | bytes):
            text = left.value if isinstance(left.value, str) else left.value.decode("latin-1")
            return _narrow_format(text)
        return _small_number(right)
    return False


class _Bounded(ast.NodeVisitor):
    def __init__(self) -> None:
        self.bounded = True
        self.iterated: set[int] = set()
        self.consumed: set[int] = set()

    def visit_For(self, node: ast.For) -> None:
        self.iterated.add(id(node.iter))
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.iterated.add(id(node.iter))
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not _bounded_operation(node.op, node.left, node.right):
            self.bounded = False
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not _bounded_operation(node.op, node.target, node.value):
            self.bounded = False
        self.generic_visit(node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        spec = node.format_spec
        if spec is not None and not (isinstance(spec, ast.JoinedStr) and all(
                isinstance(part, ast.Constant) and isinstance(part.value, str) and _narrow_format(part.value)
                for part in spec.values)):
            self.bounded = False
        self.generic_visit(node)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        if id(node) not in self.consumed:  # a generator kept past the statement would hold what it saw
            self.bounded = False
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for arg in node.args:
            self.consumed.add(id(arg))
        func = node.func
        if isinstance(func, ast.Name) and func.id == "range" and id(node) not in self.iterated and not all(
                _small_number(a) for a in node.args):
            self.bounded = False
        if isinstance(func, ast.Attribute) and func.attr in _COSTLY_METHODS:
            self.bounded = False
        self.generic_visit(node)


def bounded(statement: ast.stmt) -> bool:
    """Whether no single operation of the statement costs more than linear time and memory in data that
    already exists (see the module docstring); Python-level loops are bounded by the CPU allowance."""
    checker = _Bounded()
    checker.visit(statement)
    return checker.bounded


READING_MODULES: dict[str, frozenset[str] | None] = {
    **dict.fromkeys(("math", "cmath", "statistics", "json", "re", "itertools", "functools", "operator", "collections",
                     "string", "textwrap", "heapq", "bisect", "copy", "base64", "binascii", "hashlib", "hmac", "zlib",
                     "calendar", "unicodedata", "difflib", "pprint", "datetime", "fractions", "decimal", "struct",
                     "html", "keyword", "numbers", "dataclasses", "enum", "typing", "uuid", "ast", "shlex", "fnmatch",
                     "posixpath", "os.path", "urllib.parse", "ipaddress"), None),
    "os": frozenset({"getcwd", "getenv", "getpid", "getppid", "getuid", "listdir", "scandir", "stat", "lstat",
                     "fspath", "fsencode", "fsdecode", "cpu_count", "urandom", "get_terminal_size", "walk"}),
    "time": frozenset({"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                       "process_time", "thread_time", "sleep", "strftime", "strptime", "gmtime", "localtime", "mktime",
                       "asctime", "ctime"}),
    "sys": frozenset({"getrecursionlimit", "getsizeof", "getdefaultencoding", "getfilesystemencoding", "intern"}),
}
"""Modules whose functions (all, or those listed) change no state of the process or the machine that an
audit event would not report."""


def _foreign(value: Any) -> bool:
    return type(value).__module__ in ("ctypes", "_ctypes")


def writes_outside(info: StatementInfo, namespace: Mapping[str, Any]) -> bool:
    """Whether the statement may change state outside the namespace that no audit event reports: it stores
    into or deletes from a module, calls a module's function not known to only read, or calls C through a
    ``ctypes`` library or function it holds (such calls raise no audit event)."""
    if any(_foreign(namespace.get(name)) for name in info.calls) or any(
            receiver and _foreign(namespace.get(receiver)) for receiver, _ in info.methods):
        return True
    for name in info.mutated | info.writes:
        if isinstance(namespace.get(name), types.ModuleType) and ("attr_store" in info.kinds or name in info.mutated):
            return True
    for receiver, method in info.methods:
        value = namespace.get(receiver) if receiver else None
        if isinstance(value, types.ModuleType):
            allowed = READING_MODULES.get(value.__name__, frozenset())
            if not (allowed is None or method in allowed):
                return True
    return False
