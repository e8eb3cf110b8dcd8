"""A restricted evaluator for peeking: pure expressions over plain values, where tool calls launch.

The peek planner evaluates the unfinished tail's expressions with it, against the shadow namespace (read
only) and a small environment of loop variables. Only a closed set of operations runs: literals, names,
containers, f-strings, arithmetic and comparisons on plain values, indexing, comprehensions, a list of pure
builtins and non-mutating ``str``/``dict``/``list`` methods, each bounded in size. No model-written code
runs and nothing is mutated. A call of a tool launches (through ``launch``) once its closing parenthesis has
streamed and its arguments are known, and evaluates to the pending result, which may be passed on to
another tool. Anything else raises :class:`Unresolvable`.
"""

from __future__ import annotations

import ast
import operator
import string
from collections.abc import Callable, Mapping
from typing import Any

from forethought.code.lazy import Blocked, ShadowLazy

_MAX_SPEC_DIGITS = 6
MAX_SIZE = 100_000
MAX_ITEMS = 1_000
_UNKNOWN: Any = object()


def _spec_ok(spec: str) -> bool:
    digits = 0
    for ch in spec:
        digits = digits + 1 if ch.isdigit() else 0
        if digits > _MAX_SPEC_DIGITS:
            return False
    return "{" not in spec


def literal_format_ok(text: str) -> bool:
    """Whether ``text.format(...)`` can only substitute plain positional or named fields of bounded width."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return False
    for _, name, spec, _ in fields:
        if name is not None and ("." in name or "[" in name):
            return False
        if spec and not _spec_ok(spec):
            return False
    return True


class Unresolvable(Exception):
    """The expression needs something the peek does not know or may not do."""


UNKNOWN = _UNKNOWN
"""Environment value of a name assigned in the tail whose value is not known."""

_PURE: dict[str, Callable[..., Any]] = {
    "len": len, "str": str, "int": int, "float": float, "bool": bool, "abs": abs, "min": min, "max": max,
    "sum": sum, "sorted": sorted, "list": list, "tuple": tuple, "dict": dict, "set": set, "range": range,
    "enumerate": enumerate, "zip": zip, "round": round, "repr": repr, "reversed": reversed, "any": any, "all": all}
_METHODS: dict[type, frozenset[str]] = {
    str: frozenset({"upper", "lower", "strip", "lstrip", "rstrip", "split", "rsplit", "join", "replace",
                    "startswith", "endswith", "title", "capitalize", "casefold", "count", "find", "format",
                    "removeprefix", "removesuffix", "splitlines", "isdigit", "isalpha", "isalnum"}),
    dict: frozenset({"get", "keys", "values", "items", "copy"}),
    list: frozenset({"index", "count", "copy"}),
    tuple: frozenset({"index", "count"}),
}
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not}

Launch = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
Inline = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
"""Evaluates a call of a function defined in the code (the planner walks its body)."""


def _sized(value: Any) -> Any:
    if isinstance(value, str | bytes | list | tuple | dict | set) and len(value) > MAX_SIZE:
        raise Unresolvable("value too large")
    return value


class PeekEvaluator:
    """Evaluates tail expressions; tool calls launch through ``launch`` when ``closed(call)``."""

    def __init__(self, namespace: Mapping[str, Any], tools: frozenset[str], launch: Launch,
                 closed: Callable[[ast.Call], bool], functions: frozenset[str] = frozenset(),
                 inline: Inline | None = None,
                 unresolved: Callable[[ast.AST, dict[str, Any]], None] | None = None) -> None:
        self.namespace = namespace
        self.tools = tools
        self.launch = launch
        self.closed = closed
        self.functions = functions
        self.inline = inline
        self.unresolved = unresolved
        """Called with an element of a comprehension that could not be evaluated (to launch its calls)."""

    # --- values -----------------------------------------------------------------------------------

    @staticmethod
    def concrete(value: Any) -> Any:
        """``value`` if it is known now (a resolved shadow value counts), else :class:`Unresolvable`."""
        if type(value) is ShadowLazy:
            cell = value.cell
            if cell.done() and not cell.failed():
                return cell.result()
            raise Unresolvable("pending result")
        if value is _UNKNOWN or type(value) is Blocked:
            raise Unresolvable("unknown value")
        return value

    def lookup(self, name: str, env: Mapping[str, Any]) -> Any:
        if name in env:
            value = env[name]
        elif name in self.namespace:
            value = self.namespace[name]
        else:
            raise Unresolvable(name)
        if value is _UNKNOWN or type(value) is Blocked:
            raise Unresolvable(name)
        return value

    # --- expressions ------------------------------------------------------------------------------

    def value(self, node: ast.expr, env: Mapping[str, Any]) -> Any:
        """The concrete value of ``node``."""
        return self.concrete(self.eval(node, env))

    def eval(self, node: ast.expr, env: Mapping[str, Any]) -> Any:
        """The value of ``node``; a pending tool result may come back as is."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, env)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.eval(e, env) for e in node.elts if not isinstance(e, ast.Starred)]
            if len(items) != len(node.elts):
                raise Unresolvable("starred element")
            return _sized(items if isinstance(node, ast.List) else tuple(items))
        if isinstance(node, ast.Set):
            return _sized({self.value(e, env) for e in node.elts})
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise Unresolvable("dict unpacking")
            return _sized({self.value(k, env): self.eval(v, env)
                           for k, v in zip(node.keys, node.values, strict=True) if k is not None})
        if isinstance(node, ast.JoinedStr):
            return _sized("".join(self._format(part, env) for part in node.values))
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise Unresolvable("operator")
            left, right = self.value(node.left, env), self.value(node.right, env)
            repeated = isinstance(left, str | list | tuple) or isinstance(right, str | list | tuple)
            if isinstance(node.op, ast.Mult) and repeated:
                count = right if isinstance(right, int) else left
                if not isinstance(count, int) or count > MAX_SIZE:
                    raise Unresolvable("repetition too large")
            return _sized(op(left, right))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand, env)
            if isinstance(node.op, ast.Not):
                return not operand
            if isinstance(node.op, ast.USub):
                return -operand
            if isinstance(node.op, ast.UAdd):
                return +operand
            raise Unresolvable("operator")
        if isinstance(node, ast.BoolOp):
            result: Any = None
            for operand in node.values:
                result = self.value(operand, env)
                if isinstance(node.op, ast.And) != bool(result):
                    return result
            return result
        if isinstance(node, ast.Compare):
            left = self.value(node.left, env)
            for op_node, comparator in zip(node.ops, node.comparators, strict=True):
                right = self.value(comparator, env)
                if not _COMPARE[type(op_node)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self.eval(node.body if self.value(node.test, env) else node.orelse, env)
        if isinstance(node, ast.Subscript):
            container = self.value(node.value, env)
            if not isinstance(container, list | tuple | dict | str | range):
                raise Unresolvable("subscript")
            return container[self._slice(node.slice, env)]
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            out = [self._element(node.elt, e) for e in self._bindings(node.generators, env)]
            if isinstance(node, ast.SetComp):
                return set(self.concrete(v) for v in out)
            return out
        if isinstance(node, ast.DictComp):
            return {self.value(node.key, e): self._element(node.value, e)
                    for e in self._bindings(node.generators, env)}
        raise Unresolvable(type(node).__name__)

    def _element(self, node: ast.expr, env: dict[str, Any]) -> Any:
        """One element of a comprehension; an element it cannot evaluate is unknown (its calls still launch)."""
        try:
            return self.eval(node, env)
        except Exception:  # Unresolvable, or the pure operation itself failed on this element
            if self.unresolved is not None:
                self.unresolved(node, env)
            return UNKNOWN

    def _slice(self, node: ast.expr, env: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Slice):
            parts = [self.value(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        return self.value(node, env)

    def _format(self, part: ast.expr, env: Mapping[str, Any]) -> str:
        if isinstance(part, ast.Constant):
            return str(part.value)
        assert isinstance(part, ast.FormattedValue)
        value = self.value(part.value, env)
        if part.conversion == ord("r"):
            value = repr(value)
        elif part.conversion == ord("s"):
            value = str(value)
        elif part.conversion == ord("a"):
            value = ascii(value)
        spec = ""
        if part.format_spec is not None:
            assert isinstance(part.format_spec, ast.JoinedStr)
            spec = "".join(self._format(p, env) for p in part.format_spec.values)
            if not literal_format_ok("{:" + spec + "}"):
                raise Unresolvable("format spec")
        return format(value, spec)

    def _bindings(self, generators: list[ast.comprehension], env: Mapping[str, Any]) -> list[dict[str, Any]]:
        envs = [dict(env)]
        for generator in generators:
            nxt = []
            for current in envs:
                iterable = self.value(generator.iter, current)
                if not isinstance(iterable, list | tuple | range | str | dict | set):
                    raise Unresolvable("iterable")
                for count, item in enumerate(iterable):
                    if count >= MAX_ITEMS:
                        raise Unresolvable("too many items")
                    bound = dict(current)
                    bind(generator.target, item, bound)
                    if all(self.value(c, bound) for c in generator.ifs):
                        nxt.append(bound)
            envs = nxt
        return envs

    def _call(self, node: ast.Call, env: Mapping[str, Any]) -> Any:
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.tools and func.id not in env:
            if not self.closed(node):
                raise Unresolvable("call not closed yet")
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise Unresolvable("unpacked arguments")
            args = tuple(self.eval(a, env) for a in node.args)
            kwargs = {k.arg: self.eval(k.value, env) for k in node.keywords if k.arg is not None}
            return self.launch(func.id, args, kwargs)
        if (isinstance(func, ast.Name) and func.id in self.functions and func.id not in env
                and self.inline is not None and self.closed(node)):
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise Unresolvable("unpacked arguments")
            args = tuple(self.eval(a, env) for a in node.args)
            kwargs = {k.arg: self.eval(k.value, env) for k in node.keywords if k.arg is not None}
            return self.inline(func.id, args, kwargs)
        if isinstance(func, ast.Name) and func.id in _PURE and func.id not in env and func.id not in self.namespace:
            args = tuple(self.value(a, env) for a in node.args if not isinstance(a, ast.Starred))
            if len(args) != len(node.args) or (node.keywords and func.id not in ("sorted", "max", "min")):
                raise Unresolvable("call form")
            kwargs = {k.arg: self.value(k.value, env) for k in node.keywords if k.arg in ("reverse", "default")}
            if len(kwargs) != len(node.keywords):
                raise Unresolvable("keyword")
            result = _PURE[func.id](*args, **kwargs)
            if isinstance(result, enumerate | zip | reversed):
                result = list(result)
            return _sized(result)
        if isinstance(func, ast.Attribute) and not node.keywords:
            receiver = self.value(func.value, env)
            allowed = _METHODS.get(type(receiver), frozenset())
            if func.attr in allowed and (func.attr != "format" or literal_format_ok(receiver)):
                args = tuple(self.value(a, env) for a in node.args if not isinstance(a, ast.Starred))
                if len(args) != len(node.args):
                    raise Unresolvable("starred argument")
                result = getattr(receiver, func.attr)(*args)
                return _sized(list(result) if type(result).__name__.startswith("dict_") else result)
        raise Unresolvable("call")


def bind(target: ast.expr, value: Any, env: dict[str, Any]) -> None:
    """Bind a loop or comprehension target (names and nested tuples of names)."""
    if isinstance(target, ast.Name):
        env[target.id] = value
        return
    if isinstance(target, ast.Tuple | ast.List):
        items = list(PeekEvaluator.concrete(value)) if not isinstance(value, list | tuple) else list(value)
        if len(items) != len(target.elts):
            raise Unresolvable("unpacking")
        for element, item in zip(target.elts, items, strict=True):
            bind(element, item, env)
        return
    raise Unresolvable("target")
