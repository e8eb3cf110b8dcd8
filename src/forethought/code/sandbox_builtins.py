"""The shadow's builtins: pure ones as they are, a few replaced by checked versions, the rest blocked.

Pure builtins (``len``, ``sorted``, ``zip``, the exception classes, ...) are passed through; ``getattr``,
``hasattr``, ``setattr``, ``delattr``, ``type``, ``format``, ``bytes``, ``sum``, ``pow``, ``print``,
``__import__`` and ``__build_class__`` are replaced by checked versions; ``open``, ``eval``, ``exec``,
``compile``, ``input``, ``globals``, ``vars``, ``breakpoint`` and the like raise :class:`ShadowBlocked`, so
a statement using them is skipped (and only the statements depending on it), never run.
"""

from __future__ import annotations

import builtins
from typing import Any

from forethought.code.checker import literal_format_ok
from forethought.code.guard import Guard, attribute_allowed
from forethought.code.sandbox_modules import SafeImporter
from forethought.code.signals import ShadowBlocked, ShadowBudgetExceeded

PURE_BUILTINS = (
    "abs", "all", "any", "ascii", "bin", "bool", "callable", "chr", "complex", "dict", "divmod", "enumerate",
    "filter", "float", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len", "list", "map",
    "max", "min", "next", "object", "oct", "ord", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "str", "tuple", "zip", "classmethod", "staticmethod", "property", "super", "NotImplemented", "Ellipsis")
BLOCKED_BUILTINS = (
    "open", "eval", "exec", "compile", "input", "globals", "locals", "vars", "dir", "id", "breakpoint", "help",
    "exit", "quit", "memoryview", "bytearray", "aiter", "anext", "copyright", "credits", "license")


def _blocked(name: str) -> Any:
    def blocked(*_: Any, **__: Any) -> Any:
        raise ShadowBlocked(f"{name}() is not available in the shadow")

    blocked.__name__ = name
    return blocked


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not attribute_allowed(name):
        raise ShadowBlocked(f"attribute {name!r} is not accessible in the shadow")
    return name


def safe_builtins(guard: Guard, importer: SafeImporter) -> dict[str, Any]:
    """A fresh builtins mapping for one shadow namespace."""
    out: dict[str, Any] = {name: getattr(builtins, name) for name in PURE_BUILTINS}
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, BaseException):
            out[name] = value
    for name in BLOCKED_BUILTINS:
        out[name] = _blocked(name)

    def safe_getattr(obj: Any, name: Any, *default: Any) -> Any:
        return getattr(obj, _check_name(name), *default)

    def safe_hasattr(obj: Any, name: Any) -> bool:
        return hasattr(obj, _check_name(name))

    def safe_setattr(obj: Any, name: Any, value: Any) -> None:
        guard.setattr(obj, _check_name(name), value)

    def safe_delattr(obj: Any, name: Any) -> None:
        guard.delattr(obj, _check_name(name))

    def safe_type(*args: Any) -> Any:
        if len(args) != 1:
            raise ShadowBlocked("type() with three arguments is not available in the shadow")
        return type(args[0])

    def safe_format(value: Any, spec: str = "") -> str:
        if not isinstance(spec, str) or not literal_format_ok("{:" + spec + "}"):
            raise ShadowBudgetExceeded("format spec too wide")
        return format(value, spec)

    def safe_bytes(*args: Any, **kwargs: Any) -> bytes:
        if args and isinstance(args[0], int) and args[0] > guard.limits.max_str:
            raise ShadowBudgetExceeded("bytes() too large")
        return bytes(*args, **kwargs)

    def safe_sum(iterable: Any, /, start: Any = 0) -> Any:
        if not isinstance(start, int | float | complex):
            raise ShadowBlocked("sum() with a non-number start is not available in the shadow")
        return sum(guard.iterate(iterable), start)

    def safe_pow(base: Any, exp: Any, mod: Any = None) -> Any:
        return guard.binop("**", base, exp) if mod is None else pow(base, exp, mod)

    def discard_print(*_: Any, **__: Any) -> None:
        return None

    def build_class(func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
        cls = builtins.__build_class__(func, name, *bases, **kwargs)
        guard.classes.add(cls)
        return cls

    out.update(getattr=safe_getattr, hasattr=safe_hasattr, setattr=safe_setattr, delattr=safe_delattr,
               type=safe_type, format=safe_format, bytes=safe_bytes, sum=safe_sum, pow=safe_pow, print=discard_print,
               __import__=importer, __build_class__=build_class)
    return out
