"""Static analysis of one top-level statement: what it reads, writes and inspects, and which tool calls in
it may stay lazy.

Both executors schedule statements by this: the shadow runs a statement out of order when it touches no
name an earlier waiting statement touches, and resolves the values the statement *inspects* before running
it; the real executor resolves inspected names and keeps tool calls lazy only where their result merely
flows somewhere (a name, a container, another tool's argument) within the statement.

How much of a name's value a statement needs is its *demand*: ``NONE`` (it is only passed along),
``SHALLOW`` (its own value must be concrete, e.g. it is iterated or indexed; elements may stay lazy) or
``DEEP`` (everything inside must be concrete). Names bound inside the statement pass their demand on to
the names they were computed from. The analysis is conservative: when unsure it says ``DEEP``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

NONE, SHALLOW, DEEP = 0, 1, 2

SiteId = tuple[int, int, int, int]
"""A call site: ``(lineno, col_offset, end_lineno, end_col_offset)``."""

APPEND_METHODS = frozenset({"append"})
MUTATING_METHODS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem",
                              "remove", "discard", "clear", "sort", "reverse", "appendleft", "extendleft",
                              "popleft", "difference_update", "intersection_update", "symmetric_difference_update"})
SHALLOW_BUILTINS = frozenset({"len"})


def site_of(node: ast.expr) -> SiteId:
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0)


def root_name(node: ast.expr) -> str | None:
    """The name at the root of ``a.b[c].d``, if it is a plain name."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@dataclass(frozen=True, slots=True)
class StatementInfo:
    """What one statement touches (names at module level)."""

    reads: frozenset[str]
    writes: frozenset[str]
    demand: tuple[tuple[str, int], ...]
    """``(name, level)`` for every name whose value the statement needs (levels above ``NONE``)."""
    calls: frozenset[str]
    """Names called that are not tools."""
    tool_calls: frozenset[str]
    methods: tuple[tuple[str | None, str], ...]
    """``(receiver, method)`` of every method call: the receiver's name, ``""`` for a string literal, or
    ``None`` for any other expression."""
    mutated: frozenset[str]
    """Names whose value is changed in place (mutating methods, item stores)."""
    lazy_sites: frozenset[SiteId]
    """Tool call sites whose result only flows along within the statement."""
    kinds: frozenset[str]
    """Statement and expression kinds that matter for safety (``def``, ``import``, ``attr_store``, ...)."""
    barrier: str | None
    """Why the statement must not move past (or be passed by) other statements, or ``None``."""

    def demand_of(self, name: str) -> int:
        for n, level in self.demand:
            if n == name:
                return level
        return NONE


@dataclass(slots=True)
class _Site:
    site: SiteId
    context: int
    targets: set[str] = field(default_factory=set)
    direct: bool = False


@dataclass(slots=True)
class _Sink:
    """Where an expression's value goes: the names it ends up bound to, and whether directly."""

    names: frozenset[str]
    direct: bool


class _Analyzer:
    def __init__(self, tools: frozenset[str]) -> None:
        self.tools = tools
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.demand: dict[str, int] = {}
        self.calls: set[str] = set()
        self.tool_calls: set[str] = set()
        self.methods: list[tuple[str | None, str]] = []
        self.mutated: set[str] = set()
        self.sources: dict[str, set[str]] = {}
        """Name -> names its new value was computed from (rebinding)."""
        self.contents: dict[str, set[str]] = {}
        """Name -> names of values stored into it in place (appends, item stores)."""
        self.sites: list[_Site] = []
        self.kinds: set[str] = set()
        self.barrier: str | None = None
        self.scopes: list[dict[str, set[str]]] = []
        """Comprehension and lambda scopes: local name -> names its values come from."""
        self.local_demand: dict[str, int] = {}

    # --- helpers ----------------------------------------------------------------------------------

    def _local(self, name: str) -> dict[str, set[str]] | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope
        return None

    def _need(self, name: str, level: int) -> None:
        scope = self._local(name)
        if scope is not None:
            if level > NONE:
                for source in scope[name]:
                    self._need(source, DEEP)
            return
        self.reads.add(name)
        if level > self.demand.get(name, NONE):
            self.demand[name] = level

    def _block(self, reason: str) -> None:
        if self.barrier is None:
            self.barrier = reason

    def _bind(self, target: ast.expr, sources: set[str]) -> None:
        """A store into ``target`` of a value computed from ``sources``."""
        if isinstance(target, ast.Name):
            self.writes.add(target.id)
            self.sources.setdefault(target.id, set()).update(sources)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind(element, sources)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, sources)
        elif isinstance(target, ast.Subscript):
            self.expr(target.value, SHALLOW)
            self.expr(target.slice, DEEP)
            base = root_name(target.value)
            if base is not None:
                self.writes.add(base)
                self.mutated.add(base)
                self.contents.setdefault(base, set()).update(sources)
            self.kinds.add("item_store")
        elif isinstance(target, ast.Attribute):
            self.expr(target.value, DEEP)
            base = root_name(target.value)
            if base is not None:
                self.writes.add(base)
            self.kinds.add("attr_store")

    @staticmethod
    def _names_in(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    # --- expressions ------------------------------------------------------------------------------

    def expr(self, node: ast.expr | None, level: int, sink: _Sink | None = None) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            self._need(node.id, level)
        elif isinstance(node, ast.Constant):
            return
        elif isinstance(node, ast.Call):
            self._call(node, level, sink)
        elif isinstance(node, ast.Attribute):
            self.kinds.add("attr_load")
            self.expr(node.value, DEEP)
        elif isinstance(node, ast.Subscript):
            self.expr(node.value, SHALLOW if level == NONE else DEEP)
            self.expr(node.slice, DEEP)
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            inner = DEEP if level == DEEP else NONE
            sub = _Sink(sink.names, False) if sink else None
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    self.expr(element.value, SHALLOW if inner == NONE else DEEP)
                else:
                    self.expr(element, inner, sub)
        elif isinstance(node, ast.Dict):
            inner = DEEP if level == DEEP else NONE
            sub = _Sink(sink.names, False) if sink else None
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    self.expr(value, DEEP)
                else:
                    self.expr(key, DEEP)
                    self.expr(value, inner, sub)
        elif isinstance(node, ast.IfExp):
            self.expr(node.test, DEEP)
            self.expr(node.body, level, sink)
            self.expr(node.orelse, level, sink)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            self._comprehension(node, level, sink)
        elif isinstance(node, ast.Lambda):
            self.kinds.add("lambda")
            self.scopes.append({a.arg: set() for a in _all_args(node.args)})
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                self.expr(default, DEEP)
            self.expr(node.body, DEEP)
            self.scopes.pop()
        elif isinstance(node, ast.NamedExpr):
            self.expr(node.value, level, _Sink(frozenset({node.target.id}), True))
            self._bind(node.target, self._names_in(node.value))
        elif isinstance(node, ast.Await | ast.Yield | ast.YieldFrom):
            self.kinds.add("await")
            self._block("await or yield at module level")
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, DEEP)
        elif isinstance(node, ast.Starred):
            self.expr(node.value, DEEP)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, DEEP)
                elif isinstance(child, ast.comprehension | ast.keyword):
                    self.expr(child.value if isinstance(child, ast.keyword) else child.iter, DEEP)

    def _call(self, node: ast.Call, level: int, sink: _Sink | None) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.tools and self._local(func.id) is None:
            self.reads.add(func.id)
            self.tool_calls.add(func.id)
            site = _Site(site_of(node), level)
            if sink is not None:
                site.targets, site.direct = set(sink.names), sink.direct
            self.sites.append(site)
            for arg in node.args:
                if isinstance(arg, ast.Starred):
                    self.expr(arg.value, SHALLOW)
                else:
                    self.expr(arg, NONE)
            for kw in node.keywords:
                self.expr(kw.value, NONE if kw.arg is not None else DEEP)
            return
        arg_level = DEEP
        if isinstance(func, ast.Name):
            if self._local(func.id) is None:
                self.calls.add(func.id)
            self._need(func.id, DEEP)
            if func.id in SHALLOW_BUILTINS:
                arg_level = SHALLOW
        elif isinstance(func, ast.Attribute):
            base = root_name(func.value)
            receiver = func.value
            if isinstance(receiver, ast.Name):
                self.methods.append((receiver.id, func.attr))
            elif isinstance(receiver, ast.Constant) and isinstance(receiver.value, str | bytes):
                self.methods.append(("", func.attr))
            else:
                self.methods.append((None, func.attr))
            if func.attr in APPEND_METHODS and len(node.args) == 1 and not node.keywords:
                self.expr(func.value, SHALLOW)
                if base is not None and self._local(base) is None:
                    self.writes.add(base)
                    self.mutated.add(base)
                    self.contents.setdefault(base, set()).update(self._names_in(node.args[0]))
                targets = frozenset({base}) if base else frozenset()
                self.expr(node.args[0], NONE, _Sink(targets, False))
                return
            self.expr(func.value, DEEP)
            if func.attr in MUTATING_METHODS and base is not None and self._local(base) is None:
                self.writes.add(base)
                self.mutated.add(base)
        else:
            self._block("calls a computed callable")
            self.expr(func, DEEP)
        for arg in node.args:
            self.expr(arg.value if isinstance(arg, ast.Starred) else arg, arg_level)
        for kw in node.keywords:
            self.expr(kw.value, DEEP)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
                       level: int, sink: _Sink | None) -> None:
        scope: dict[str, set[str]] = {}
        self.scopes.append(scope)
        for generator in node.generators:
            self.expr(generator.iter, SHALLOW)
            iter_names = self._names_in(generator.iter)
            for name in self._names_in(generator.target):
                scope[name] = set(iter_names)
            for condition in generator.ifs:
                self.expr(condition, DEEP)
        inner = DEEP if level == DEEP else NONE
        sub = _Sink(sink.names, False) if sink else None
        if isinstance(node, ast.DictComp):
            self.expr(node.key, DEEP)
            self.expr(node.value, inner, sub)
        else:
            self.expr(node.elt, inner, sub)
        self.scopes.pop()

    # --- statements -------------------------------------------------------------------------------

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr):
            self.expr(node.value, NONE)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AnnAssign):
                self.kinds.add("annotation")
                self.expr(node.annotation, DEEP)
                if node.value is None:
                    return
            plain = all(isinstance(t, ast.Name | ast.Subscript | ast.Attribute) for t in targets)
            names = frozenset(n for t in targets if (n := root_name(t)) is not None)
            direct = all(isinstance(t, ast.Name) for t in targets)
            self.expr(node.value, NONE if plain else SHALLOW, _Sink(names, direct))
            sources = self._names_in(node.value) if node.value is not None else set()
            for target in targets:
                self._bind(target, sources)
        elif isinstance(node, ast.AugAssign):
            self.expr(node.value, DEEP)
            if isinstance(node.target, ast.Name):
                self._need(node.target.id, DEEP)
            else:
                self.expr(node.target.value, DEEP)
                if isinstance(node.target, ast.Subscript):
                    self.expr(node.target.slice, DEEP)
            self._bind(node.target, self._names_in(node.value))
        elif isinstance(node, ast.For | ast.AsyncFor):
            if isinstance(node, ast.AsyncFor):
                self._block("async for at module level")
            self.kinds.add("loop")
            self.expr(node.iter, SHALLOW)
            self._bind(node.target, self._names_in(node.iter))
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.While):
            self.kinds.add("loop")
            self.expr(node.test, DEEP)
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.If):
            self.expr(node.test, DEEP)
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            self.kinds.add("with")
            for item in node.items:
                self.expr(item.context_expr, DEEP)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, self._names_in(item.context_expr))
            self.body(node.body)
        elif isinstance(node, ast.Try | ast.TryStar):
            self.kinds.add("try")
            self.body(node.body)
            for handler in node.handlers:
                self.expr(handler.type, DEEP)
                if handler.name:
                    self.writes.add(handler.name)
                self.body(handler.body)
            self.body(node.orelse)
            self.body(node.finalbody)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self._definition(node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            self.kinds.add("import")
            for alias in node.names:
                if alias.name == "*":
                    self._block("star import")
                    continue
                self.writes.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Delete):
            self.kinds.add("delete")
            for target in node.targets:
                self._bind(target, set())
        elif isinstance(node, ast.Global | ast.Nonlocal):
            self._block("global declaration")
        elif isinstance(node, ast.Match):
            self.kinds.add("match")
            self.expr(node.subject, DEEP)
            for case in node.cases:
                for name in _pattern_names(case.pattern):
                    self.writes.add(name)
                self.expr(case.guard, DEEP)
                self.body(case.body)
        elif isinstance(node, ast.Raise | ast.Assert | ast.Return):
            self.kinds.add(type(node).__name__.lower())
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, DEEP)
        elif not isinstance(node, ast.Pass | ast.Break | ast.Continue):
            self._block(f"{type(node).__name__} statement")

    def body(self, nodes: Iterable[ast.stmt]) -> None:
        for node in nodes:
            self.stmt(node)

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.kinds.add("class" if isinstance(node, ast.ClassDef) else "def")
        self.writes.add(node.name)
        for decorator in node.decorator_list:
            self.expr(decorator, DEEP)
        if isinstance(node, ast.ClassDef):
            for base in [*node.bases, *(k.value for k in node.keywords)]:
                self.expr(base, DEEP)
            inner = _Analyzer(self.tools)
            inner.body(node.body)
            for name in inner.reads - inner.writes:
                self._need(name, DEEP)
            self.calls.update(inner.calls)
            if inner.barrier:
                self._block(inner.barrier)
            return
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.expr(default, DEEP)
        if any(isinstance(n, ast.Global | ast.Nonlocal) for n in ast.walk(node)):
            self.kinds.add("global")


def _all_args(args: ast.arguments) -> list[ast.arg]:
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg:
        out.append(args.vararg)
    if args.kwarg:
        out.append(args.kwarg)
    return out


def _pattern_names(pattern: ast.pattern) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(pattern):
        if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def analyze(statement: ast.stmt, tools: frozenset[str]) -> StatementInfo:
    """Analyse one top-level statement given the names of the tools in scope."""
    analyzer = _Analyzer(tools)
    analyzer.stmt(statement)
    demand = analyzer.demand
    # a name bound here and needed here passes its need on to what it was computed from; a container
    # filled here and needed deeply passes it on to what was put into it
    changed = True
    while changed:
        changed = False
        for name in list(demand):
            level = demand[name]
            if level == NONE or name not in analyzer.writes:
                continue
            sources = set(analyzer.sources.get(name, ()))
            if level == DEEP:
                sources |= analyzer.contents.get(name, set())
            for source in sources:
                if demand.get(source, NONE) < DEEP:
                    demand[source] = DEEP
                    analyzer.reads.add(source)
                    changed = True
    lazy_sites = set()
    for site in analyzer.sites:
        if site.context != NONE:
            continue
        levels = [demand.get(t, NONE) for t in site.targets]
        if any(level == DEEP for level in levels) or (site.direct and any(levels)):
            continue
        lazy_sites.add(site.site)
    return StatementInfo(
        reads=frozenset(analyzer.reads), writes=frozenset(analyzer.writes),
        demand=tuple(sorted((n, lv) for n, lv in demand.items() if lv > NONE)),
        calls=frozenset(analyzer.calls), tool_calls=frozenset(analyzer.tool_calls),
        methods=tuple(analyzer.methods), mutated=frozenset(analyzer.mutated),
        lazy_sites=frozenset(lazy_sites), kinds=frozenset(analyzer.kinds), barrier=analyzer.barrier)


def analyze_module(tree: ast.Module, tools: frozenset[str]) -> list[StatementInfo]:
    return [analyze(statement, tools) for statement in tree.body]
