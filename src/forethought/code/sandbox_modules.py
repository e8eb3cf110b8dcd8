"""The modules shadow code may import: an allowlist of pure standard-library modules, seen through proxies.

``import x`` in the shadow resolves through :class:`SafeImporter`. An allowed module is handed out as a
proxy module holding only its public functions, classes and immutable constants: no submodules that are
not allowed themselves (``statistics.sys`` is gone), no mutable module-level containers, no helpers that
reach attributes by name (``operator.attrgetter``, ``string.Formatter``). Functions that can do unbounded
C-level work are wrapped with size checks (``math.factorial``, ``operator.pow``, ``itertools.product``,
``json.dumps(indent=...)``) and regular expressions are admitted only when their backtracking is bounded
for the subject's length. Anything else raises :class:`ShadowBlocked` at the import, which skips only the
statements that depend on the imported name.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import math
import re
import types
from collections.abc import Callable, Iterable
from typing import Any

from forethought.code.guard import Guard
from forethought.code.signals import ShadowBlocked, ShadowBudgetExceeded

ALLOWED_MODULES = frozenset({
    "math", "cmath", "json", "re", "itertools", "functools", "collections", "collections.abc", "string",
    "datetime", "statistics", "operator", "heapq", "bisect", "textwrap", "difflib", "copy", "unicodedata",
    "base64", "hashlib", "calendar", "enum", "dataclasses", "pprint"})
_HIDDEN: dict[str, frozenset[str]] = {
    "operator": frozenset({"attrgetter", "methodcaller"}),
    "string": frozenset({"Formatter"}),
    "hashlib": frozenset({"pbkdf2_hmac", "scrypt", "file_digest"}),
    "functools": frozenset({"RLock", "GenericAlias"}),
    "dataclasses": frozenset({"FunctionType", "GenericAlias"}),
    "enum": frozenset({"DynamicClassAttribute", "MappingProxyType"}),
    "difflib": frozenset({"GenericAlias"}),
    "statistics": frozenset({"Decimal", "Fraction"}),
    "calendar": frozenset({"setfirstweekday", "prmonth", "prcal"}),
    "pprint": frozenset({"pprint", "pp", "PrettyPrinter"}),
}
_IMMUTABLE = (int, float, complex, str, bytes, bool, tuple, frozenset, type(None))
_MAX_ITER_COPIES = 64
_MAX_JSON_INDENT = 64
_MAX_FACTORIAL = 20_000
_MAX_COMB = 100_000
_REGEX_WORK = 10 ** 8
_REGEX_SUBJECT = 1_000_000


def _regex_repeats(pattern: str | bytes) -> int:
    """How many unbounded repeats the pattern chains (its backtracking is polynomial of that degree).

    Raises :class:`ShadowBlocked` for nested repeats and back-references under a repeat, whose
    backtracking can be exponential.
    """
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    try:
        parsed = _parser.parse(pattern)
    except re.error as exc:
        raise ShadowBlocked(f"bad regular expression: {exc}") from None
    repeats = 0

    def walk(items: Iterable[Any], under_repeat: bool) -> None:
        nonlocal repeats
        for op, av in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                _, high, sub = av
                if under_repeat and high > 1:
                    raise ShadowBlocked("nested repeats in a regular expression")
                if high == c.MAXREPEAT:
                    repeats += 1
                walk(sub, under_repeat or high > 1)
            elif op is c.SUBPATTERN:
                walk(av[-1], under_repeat)
            elif op is c.BRANCH:
                for branch in av[1]:
                    walk(branch, under_repeat)
            elif op in (c.ASSERT, c.ASSERT_NOT):
                walk(av[1], under_repeat)
            elif op is c.GROUPREF and under_repeat:
                raise ShadowBlocked("back-reference under a repeat in a regular expression")

    walk(parsed, False)
    return repeats


def _check_subject(repeats: int, subject: Any) -> None:
    if not isinstance(subject, str | bytes):
        return
    limit = _REGEX_SUBJECT if repeats <= 1 else int(_REGEX_WORK ** (1 / repeats))
    if len(subject) > limit:
        raise ShadowBudgetExceeded(f"regular expression with {repeats} unbounded repeats on {len(subject)} "
                                   f"characters (limit {limit})")


def _matcher(name: str) -> Callable[..., Any]:
    def method(self: SafePattern, subject: Any, *args: Any, **kwargs: Any) -> Any:
        _check_subject(self._repeats, subject)
        return getattr(self._compiled, name)(subject, *args, **kwargs)

    method.__name__ = name
    return method


def _replacer(name: str) -> Callable[..., Any]:
    def method(self: SafePattern, repl: Any, subject: Any, *args: Any, **kwargs: Any) -> Any:
        _check_subject(self._repeats, subject)
        return getattr(self._compiled, name)(repl, subject, *args, **kwargs)

    method.__name__ = name
    return method


class SafePattern:
    """A compiled regular expression whose matching methods check the subject's length first.

    The real pattern sits under a private name, which shadow code cannot spell.
    """

    __slots__ = ("_compiled", "_repeats", "flags", "groupindex", "groups", "pattern")

    def __init__(self, compiled: re.Pattern[Any], repeats: int) -> None:
        self._compiled = compiled
        self._repeats = repeats
        self.pattern = compiled.pattern
        self.flags = compiled.flags
        self.groups = compiled.groups
        self.groupindex = dict(compiled.groupindex)

    search = _matcher("search")
    match = _matcher("match")
    fullmatch = _matcher("fullmatch")
    findall = _matcher("findall")
    finditer = _matcher("finditer")
    split = _matcher("split")
    sub = _replacer("sub")
    subn = _replacer("subn")


def _safe_compile(pattern: Any, flags: int = 0) -> SafePattern:
    if isinstance(pattern, SafePattern):
        return pattern
    return SafePattern(re.compile(pattern, flags), _regex_repeats(pattern))


def _re_module() -> dict[str, Any]:
    def search(pattern: Any, string: Any, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).search(string)

    def match(pattern: Any, string: Any, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).match(string)

    def fullmatch(pattern: Any, string: Any, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).fullmatch(string)

    def findall(pattern: Any, string: Any, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).findall(string)

    def finditer(pattern: Any, string: Any, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).finditer(string)

    def split(pattern: Any, string: Any, maxsplit: int = 0, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).split(string, maxsplit)

    def sub(pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).sub(repl, string, count)

    def subn(pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        return _safe_compile(pattern, flags).subn(repl, string, count)

    out: dict[str, Any] = {f.__name__: f for f in (search, match, fullmatch, findall, finditer, split, sub, subn)}
    out["compile"] = _safe_compile
    out["escape"] = re.escape
    out["error"] = re.error
    for flag in ("IGNORECASE", "I", "MULTILINE", "M", "DOTALL", "S", "VERBOSE", "X", "ASCII", "A", "UNICODE",
                 "U", "NOFLAG"):
        if hasattr(re, flag):
            out[flag] = getattr(re, flag)
    return out


def _wrappers(name: str, guard: Guard) -> dict[str, Any]:
    """Bounded replacements for a module's functions that can do unbounded C-level work."""
    if name == "math":
        def factorial(n: int) -> int:
            if isinstance(n, int) and n > _MAX_FACTORIAL:
                raise ShadowBudgetExceeded(f"factorial of more than {_MAX_FACTORIAL}")
            return math.factorial(n)

        def comb(n: int, k: int) -> int:
            if isinstance(n, int) and n > _MAX_COMB:
                raise ShadowBudgetExceeded(f"comb of more than {_MAX_COMB}")
            return math.comb(n, k)

        def perm(n: int, k: int | None = None) -> int:
            if isinstance(n, int) and n > _MAX_COMB:
                raise ShadowBudgetExceeded(f"perm of more than {_MAX_COMB}")
            return math.perm(n, k)

        def prod(iterable: Iterable[Any], *, start: Any = 1) -> Any:
            return functools.reduce(lambda a, b: guard.binop("*", a, b), guard.iterate(iterable), start)

        return {"factorial": factorial, "comb": comb, "perm": perm, "prod": prod}
    if name == "operator":
        return {op: functools.partial(guard.binop, symbol) for op, symbol in (
            ("pow", "**"), ("mul", "*"), ("lshift", "<<"), ("add", "+"), ("concat", "+"), ("mod", "%"))} | {
            op: functools.partial(guard.iop, symbol) for op, symbol in (
            ("ipow", "**"), ("imul", "*"), ("ilshift", "<<"), ("iadd", "+"), ("iconcat", "+"), ("imod", "%"))}
    if name == "itertools":
        def product(*iterables: Iterable[Any], repeat: int = 1) -> Any:
            if repeat > _MAX_ITER_COPIES:
                raise ShadowBudgetExceeded("itertools.product repeat too large")
            return itertools.product(*iterables, repeat=repeat)

        def tee(iterable: Iterable[Any], n: int = 2) -> Any:
            if n > _MAX_ITER_COPIES:
                raise ShadowBudgetExceeded("itertools.tee with too many copies")
            return itertools.tee(iterable, n)

        return {"product": product, "tee": tee}
    if name == "json":
        def dumps(obj: Any, *args: Any, **kwargs: Any) -> str:
            indent = kwargs.get("indent")
            if (isinstance(indent, int) and indent > _MAX_JSON_INDENT) or (
                    isinstance(indent, str) and len(indent) > _MAX_JSON_INDENT):
                raise ShadowBudgetExceeded("json indent too large")
            text: str = json.dumps(obj, *args, **kwargs)
            return text

        return {"dumps": dumps}
    return {}


def _public(module: types.ModuleType, name: str) -> dict[str, Any]:
    hidden = _HIDDEN.get(name, frozenset())
    out: dict[str, Any] = {}
    for attr, value in vars(module).items():
        if attr.startswith("_") or attr in hidden or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, _IMMUTABLE) or callable(value):
            out[attr] = value
    return out


class ModuleProxy(types.ModuleType):
    """An allowed module as the shadow sees it; a hidden attribute blocks instead of raising AttributeError
    (the real module has it, so the real run would not fail there)."""

    def __getattr__(self, name: str) -> Any:
        raise ShadowBlocked(f"{self.__name__}.{name} is not available in the shadow")


class SafeImporter:
    """The shadow's ``__import__``: allowlisted modules as proxies, anything else blocked."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._proxies: dict[str, types.ModuleType] = {}

    def proxy(self, name: str) -> types.ModuleType:
        """The proxy of an allowed module (raises :class:`ShadowBlocked` for any other)."""
        if name not in ALLOWED_MODULES:
            raise ShadowBlocked(f"import of {name!r} is not allowed in the shadow")
        cached = self._proxies.get(name)
        if cached is not None:
            return cached
        module = importlib.import_module(name)
        proxy = ModuleProxy(name)
        if name == "re":
            proxy.__dict__.update(_re_module())
        else:
            proxy.__dict__.update(_public(module, name))
            proxy.__dict__.update(_wrappers(name, self._guard))
        for child in ALLOWED_MODULES:
            if child.startswith(name + "."):
                proxy.__dict__[child.rsplit(".", 1)[1]] = self.proxy(child)
        self._proxies[name] = proxy
        return proxy

    def __call__(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                 level: int = 0) -> types.ModuleType:
        if level:
            raise ShadowBlocked("relative imports are not allowed in the shadow")
        module = self.proxy(name)
        if fromlist or "." not in name:
            return module
        return self.proxy(name.split(".", 1)[0])
