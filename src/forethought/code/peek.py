"""Peeking into the unfinished tail of a block: launch the calls that are already certain enough.

The tail is the statement still streaming. It is repaired (open brackets and strings closed, an empty
block given ``pass``) and parsed; then its straight-line code is walked with the restricted
:class:`PeekEvaluator`:

* a ``for`` loop over a literal or an already known iterable is unrolled before it closes: each item's
  body is evaluated with the loop variable bound, so a map fans out while the model is still writing the
  loop (a value that is pending, e.g. a tool result, stays pending and may feed the item's next call);
* a ``while`` loop whose condition the walk can follow is simulated iteration by iteration;
* an ``if`` whose condition is known descends into the taken branch;
* a call of a function defined in the code is followed into its body;
* a call launches only if its closing parenthesis has streamed and its arguments evaluate.

A name whose value the walk cannot follow (an assignment it cannot evaluate, a variable carried across loop
iterations, a container changed in place) becomes unknown, so a stale value is never used. The same walker
pre-plans a closed loop, or a statement calling a code-defined function, before the shadow runs it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from types import FunctionType
from typing import Any

from forethought._core.calls import dumps_canonical
from forethought.code.analysis import MUTATING_METHODS
from forethought.code.evaluate import UNKNOWN, PeekEvaluator, Unresolvable, bind
from forethought.code.lexer import LineLexer
from forethought.code.shadow import SHADOW_FILENAME

MAX_TAIL_CHARS = 20_000
MAX_UNROLL = 64
MAX_INLINE_DEPTH = 3
_STOP = object()
"""Control flow the walk cannot follow: stop walking this body."""
_BREAK = object()
_CONTINUE = object()

Launch = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]


def repair(tail: str) -> ast.Module | None:
    """Parse an unfinished statement, closing what is open; ``None`` if it cannot be made to parse."""
    if not tail.strip() or len(tail) > MAX_TAIL_CHARS:
        return None
    lines = tail.split("\n")
    for cut in (len(lines), len(lines) - 1):
        if cut <= 0:
            break
        text = "\n".join(lines[:cut])
        lexer = LineLexer()
        for line in lines[:cut]:
            lexer.push(line)
        candidates = [text + lexer.closers()]
        last = next((ln for ln in reversed(lines[:cut]) if ln.strip()), "")
        if candidates[0].rstrip().endswith(":"):
            indent = len(last) - len(last.lstrip())
            candidates.append(candidates[0].rstrip() + "\n" + " " * (indent + 4) + "pass")
        for candidate in candidates:
            try:
                return ast.parse(candidate)
            except SyntaxError:
                continue
    return None


def assigned_names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            out.add(child.id)
    return out


def _assigned_in(body: list[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for statement in body:
        out |= assigned_names(statement)
        for child in ast.walk(statement):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and isinstance(
                    child.func.value, ast.Name) and child.func.attr in MUTATING_METHODS:
                out.add(child.func.value.id)
    return out


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__("return")
        self.value = value


class Planner:
    """Walks straight-line code of one statement, launching the calls it can resolve.

    The environment holds what the walk knows; names it does not hold are read from the namespace (their
    value before the statement). An assignment the walk cannot evaluate makes its names unknown; a loop's
    body sees the names it assigns as unknown (their value depends on earlier iterations), except in a
    ``while`` loop, which is simulated iteration by iteration. Calls of functions defined in the code are
    followed into their bodies (a few levels deep).
    """

    def __init__(self, namespace: Mapping[str, Any], tools: frozenset[str], launch: Launch,
                 closed: Callable[[ast.Call], bool], functions: Mapping[str, ast.FunctionDef] | None = None,
                 max_unroll: int = MAX_UNROLL) -> None:
        self.functions = {name: f for name, f in (functions or {}).items() if _is_shadow_function(namespace, name)}
        self.evaluator = PeekEvaluator(namespace, tools, launch, closed, frozenset(self.functions), self._inline,
                                       self._launch_calls)
        self.tools = tools
        self.max_unroll = max_unroll
        self._depth = 0

    def plan(self, statement: ast.stmt) -> None:
        self._statement(statement, {})

    def _body(self, body: list[ast.stmt], env: dict[str, Any]) -> object:
        for statement in body:
            outcome = self._statement(statement, env)
            if outcome is not None:
                return outcome
        return None

    def _unknown(self, names: set[str], env: dict[str, Any]) -> None:
        for name in names:
            env[name] = UNKNOWN

    def _statement(self, node: ast.stmt, env: dict[str, Any]) -> object:
        evaluator = self.evaluator
        if isinstance(node, ast.For):
            try:
                items = evaluator.value(node.iter, env)
            except Exception:
                self._launch_calls(node.iter, env)
                self._unknown(assigned_names(node) | _assigned_in(node.body), env)
                return _STOP
            if not isinstance(items, list | tuple | range | str | dict):
                return _STOP
            carried = _assigned_in(node.body)
            for item in list(items)[: self.max_unroll]:
                item_env = dict(env)
                self._unknown(carried, item_env)
                try:
                    bind(node.target, item, item_env)
                except Unresolvable:
                    break
                if self._body(node.body, item_env) is _BREAK:
                    break
            self._unknown(assigned_names(node.target) | carried, env)
            return None
        if isinstance(node, ast.While):
            for _ in range(self.max_unroll):
                try:
                    if not evaluator.value(node.test, env):
                        return None
                except Exception:
                    break
                outcome = self._body(node.body, env)
                if outcome is _BREAK:
                    return None
                if outcome is _STOP:
                    break
            self._unknown(_assigned_in(node.body), env)
            return _STOP
        if isinstance(node, ast.If):
            try:
                test = evaluator.value(node.test, env)
            except Exception:
                self._launch_calls(node.test, env)
                self._unknown(_assigned_in(node.body) | _assigned_in(node.orelse), env)
                return None
            return self._body(node.body if test else node.orelse, env)
        if isinstance(node, ast.Return):
            value: Any = None
            if node.value is not None:
                try:
                    value = evaluator.eval(node.value, env)
                except Exception:
                    self._launch_calls(node.value, env)
                    value = UNKNOWN
            raise _Return(value)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Expr):
            self._simple(node, env)
            return None
        if isinstance(node, ast.Try):
            self._body(node.body, env)
            return _STOP
        if isinstance(node, ast.Pass | ast.FunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom):
            return None
        if isinstance(node, ast.Break):
            return _BREAK
        if isinstance(node, ast.Continue):
            return _CONTINUE
        return _STOP

    def _simple(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Expr, env: dict[str, Any]) -> None:
        value = node.value
        if value is None:
            return
        expression: ast.expr = value
        if isinstance(node, ast.AugAssign):
            current = ast.Name(id=node.target.id, ctx=ast.Load()) if isinstance(node.target, ast.Name) else None
            if current is None:
                self._launch_calls(value, env)
                self._unknown(assigned_names(node.target) | _assigned_in([node]), env)
                return
            expression = ast.BinOp(left=current, op=node.op, right=value)
        try:
            result = self.evaluator.eval(expression, env)
        except Exception:
            self._launch_calls(value, env)
            result = UNKNOWN
        if isinstance(node, ast.Expr):
            self._unknown(_assigned_in([node]), env)
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if not isinstance(target, ast.Name | ast.Tuple | ast.List):
                self._unknown(_assigned_in([node]), env)
                continue
            try:
                bind(target, result, env)
            except Exception:
                self._unknown(assigned_names(target), env)

    def _inline(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        function = self.functions.get(name)
        spec = function.args if function is not None else None
        if function is None or spec is None or self._depth >= MAX_INLINE_DEPTH or spec.vararg or spec.kwarg or (
                spec.posonlyargs or spec.kwonlyargs):
            raise Unresolvable("cannot follow this call")
        params = [a.arg for a in spec.args]
        if len(args) > len(params) or set(kwargs) - set(params):
            raise Unresolvable("arguments do not fit")
        env: dict[str, Any] = dict(zip(params, args, strict=False))
        env.update(kwargs)
        defaults = dict(zip(params[len(params) - len(spec.defaults):], spec.defaults, strict=True))
        for param in params:
            if param not in env:
                default = defaults.get(param)
                if not isinstance(default, ast.Constant):
                    raise Unresolvable("missing argument")
                env[param] = default.value
        self._unknown(_assigned_in(function.body) - set(params), env)
        self._depth += 1
        closed, self.evaluator.closed = self.evaluator.closed, _always  # a definition is complete text
        try:
            self._body(function.body, env)
        except _Return as returned:
            return returned.value
        finally:
            self._depth -= 1
            self.evaluator.closed = closed
        return None

    def _launch_calls(self, node: ast.AST, env: dict[str, Any]) -> None:
        """Launch the tool calls (following code-defined functions) inside an expression that could not be
        evaluated as a whole; comprehensions inside it are evaluated element by element."""
        self._launch_in(node, env)

    def _launch_in(self, node: ast.AST, env: dict[str, Any]) -> None:
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and (node.func.id in self.tools or node.func.id in self.functions)):
            try:
                self.evaluator.eval(node, env)
                return
            except Exception:
                if not isinstance(node, ast.Call):
                    return
        for child in ast.iter_child_nodes(node):
            self._launch_in(child, env)


def _always(_: ast.Call) -> bool:
    return True


def _is_shadow_function(namespace: Mapping[str, Any], name: str) -> bool:
    value = namespace.get(name)
    return isinstance(value, FunctionType) and value.__code__.co_filename == SHADOW_FILENAME


def wants_preplan(statement: ast.stmt, functions: Mapping[str, ast.FunctionDef]) -> bool:
    """Whether a closed statement may fan out more before it runs: it loops, holds a comprehension, or
    calls code-defined functions."""
    if isinstance(statement, ast.For | ast.While):
        return True
    return any(isinstance(n, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions)
        for n in ast.walk(statement))


class Deduplicating:
    """Wraps a launch so that one turn asks for each distinct call only once."""

    def __init__(self, launch: Launch) -> None:
        self._launch = launch
        self._seen: dict[str, Any] = {}

    def __call__(self, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            key = tool + dumps_canonical([list(args), kwargs])
        except (TypeError, ValueError):
            return self._launch(tool, args, kwargs)
        if key not in self._seen:
            self._seen[key] = self._launch(tool, args, kwargs)
        return self._seen[key]


class TailPeek:
    """A :class:`~forethought.code.shadow.PeekTask` over one block's unfinished statement."""

    def __init__(self, block: int, tail: str, tools: frozenset[str], launch: Launch, max_unroll: int,
                 functions: Mapping[str, ast.FunctionDef] | None = None) -> None:
        self.block = block
        self._tail = tail
        self._tools = tools
        self._launch = launch
        self._max_unroll = max_unroll
        self._functions = functions or {}
        self._tree: ast.Module | None = None
        self._lines = tail.split("\n")

    def reads(self) -> frozenset[str] | None:
        self._tree = repair(self._tail)
        if self._tree is None:
            return None
        return frozenset(n.id for n in ast.walk(self._tree) if isinstance(n, ast.Name)) - self._tools

    def _closed(self, call: ast.Call) -> bool:
        """Whether the call's closing parenthesis is in the streamed text (not added by the repair)."""
        end_line, end_col = call.end_lineno, call.end_col_offset
        if end_line is None or end_col is None or end_line > len(self._lines):
            return False
        return end_line < len(self._lines) or end_col <= len(self._lines[-1])

    def run(self, namespace: Mapping[str, Any]) -> None:
        if self._tree is None:
            return
        planner = Planner(namespace, self._tools, self._launch, self._closed, self._functions, self._max_unroll)
        for statement in self._tree.body:
            try:
                planner.plan(statement)
            except _Return:
                continue


def preplan(statement: ast.stmt, namespace: Mapping[str, Any], tools: frozenset[str], launch: Launch,
            functions: Mapping[str, ast.FunctionDef] | None = None, max_unroll: int = MAX_UNROLL) -> None:
    """Fan out a closed statement's resolvable calls before the shadow runs it item by item."""
    try:
        Planner(namespace, tools, launch, lambda _: True, functions, max_unroll).plan(statement)
    except _Return:
        return
