"""Instrumentation of checked shadow code: the AST rewrite that routes work through the :class:`Guard`.

Every loop body and function body ticks (``__ft_tick__()``); every call becomes ``__ft_call__(f, ...)``
(except zero-argument ``super()``, which needs its own frame); comprehension iterables, star-unpacking and
``in`` over iterators go through ``__ft_iter__``/``__ft_wrap__``; ``*``, ``**``, ``<<``, ``+`` and ``%``
become ``__ft_binop__`` (``__ft_iop__`` when augmented); attribute stores and deletes become
``__ft_setattr__``/``__ft_delattr__``; f-strings are size-checked (``__ft_sized__``); every ``except``
handler first re-raises shadow signals. Helper names
end in ``__`` so class bodies do not mangle them, and model code cannot name them (the checker refuses
names starting with ``__``).
"""

from __future__ import annotations

import ast
import copy
from typing import Any

_OPS: dict[type[ast.operator], str] = {ast.Mult: "*", ast.Pow: "**", ast.LShift: "<<", ast.Add: "+", ast.Mod: "%"}


def _helper(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _tick() -> ast.stmt:
    return ast.Expr(value=_helper("__ft_tick__"))


def _with_tick(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return [first, _tick(), *body[1:]]
    return [_tick(), *body]


class InstrumentError(Exception):
    """The code uses a form the instrumenter does not support (it is then refused, not run)."""


class _Instrumenter(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            return node
        return ast.copy_location(
            ast.Call(func=ast.Name(id="__ft_call__", ctx=ast.Load()), args=[node.func, *node.args],
                     keywords=node.keywords), node)

    def visit_For(self, node: ast.For) -> Any:
        self.generic_visit(node)
        node.body = _with_tick(node.body)
        return node

    def visit_While(self, node: ast.While) -> Any:
        self.generic_visit(node)
        node.body = _with_tick(node.body)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        self.generic_visit(node)
        node.body = _with_tick(node.body)
        return node

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        self.generic_visit(node)
        node.body = ast.Subscript(value=ast.Tuple(elts=[_helper("__ft_tick__"), node.body], ctx=ast.Load()),
                                  slice=ast.Constant(value=1), ctx=ast.Load())
        return node

    def visit_comprehension(self, node: ast.comprehension) -> Any:
        self.generic_visit(node)
        node.iter = _helper("__ft_iter__", node.iter)
        return node

    def visit_Starred(self, node: ast.Starred) -> Any:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):
            node.value = _helper("__ft_iter__", node.value)
        return node

    def visit_YieldFrom(self, node: ast.YieldFrom) -> Any:
        self.generic_visit(node)
        node.value = _helper("__ft_iter__", node.value)
        return node

    def visit_Compare(self, node: ast.Compare) -> Any:
        self.generic_visit(node)
        node.comparators = [_helper("__ft_wrap__", c) if isinstance(op, ast.In | ast.NotIn) else c
                            for op, c in zip(node.ops, node.comparators, strict=True)]
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> Any:
        self.generic_visit(node)
        return ast.copy_location(_helper("__ft_sized__", node), node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> Any:
        node.value = self.visit(node.value)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        self.generic_visit(node)
        symbol = _OPS.get(type(node.op))
        if symbol is None:
            return node
        return ast.copy_location(_helper("__ft_binop__", ast.Constant(value=symbol), node.left, node.right), node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> Any:
        self.generic_visit(node)
        node.body = [ast.Expr(value=_helper("__ft_reraise__")), *node.body]
        return node

    def visit_Assign(self, node: ast.Assign) -> Any:
        self.generic_visit(node)
        for target in node.targets:
            if isinstance(target, ast.Tuple | ast.List):
                if any(isinstance(e, ast.Attribute) for e in ast.walk(target)):
                    raise InstrumentError("unpacking into attributes")
                if any(isinstance(e, ast.Starred) for e in target.elts):
                    node.value = _helper("__ft_iter__", node.value)
        if not any(isinstance(t, ast.Attribute) for t in node.targets):
            return node
        out: list[ast.stmt] = [ast.Assign(targets=[ast.Name(id="__ft_v__", ctx=ast.Store())], value=node.value)]
        value = ast.Name(id="__ft_v__", ctx=ast.Load())
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                out.append(ast.Expr(value=_helper("__ft_setattr__", target.value, ast.Constant(value=target.attr),
                                                  value)))
            else:
                out.append(ast.Assign(targets=[target], value=value))
        return [ast.copy_location(s, node) for s in out]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        self.generic_visit(node)
        if not isinstance(node.target, ast.Attribute):
            return node
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        call = _helper("__ft_setattr__", node.target.value, ast.Constant(value=node.target.attr), node.value)
        return ast.copy_location(ast.Expr(value=call), node)

    def visit_Delete(self, node: ast.Delete) -> Any:
        self.generic_visit(node)
        if not any(isinstance(t, ast.Attribute) for t in node.targets):
            return node
        out: list[ast.stmt] = []
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                out.append(ast.Expr(value=_helper("__ft_delattr__", target.value, ast.Constant(value=target.attr))))
            else:
                out.append(ast.Delete(targets=[target]))
        return [ast.copy_location(s, node) for s in out]

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        self.generic_visit(node)
        symbol = _OPS.get(type(node.op))
        target = node.target
        if symbol is None and not isinstance(target, ast.Attribute):
            return node

        def combine(current: ast.expr) -> ast.expr:
            if symbol is None:
                return ast.BinOp(left=current, op=node.op, right=node.value)
            return _helper("__ft_iop__", ast.Constant(value=symbol), current, node.value)

        out: list[ast.stmt]
        if isinstance(target, ast.Name):
            out = [ast.Assign(targets=[ast.Name(id=target.id, ctx=ast.Store())],
                              value=combine(ast.Name(id=target.id, ctx=ast.Load())))]
        elif isinstance(target, ast.Subscript):
            base, key = ast.Name(id="__ft_a__", ctx=ast.Load()), ast.Name(id="__ft_b__", ctx=ast.Load())
            out = [ast.Assign(targets=[ast.Name(id="__ft_a__", ctx=ast.Store())], value=target.value),
                   ast.Assign(targets=[ast.Name(id="__ft_b__", ctx=ast.Store())], value=target.slice),
                   ast.Assign(targets=[ast.Subscript(value=base, slice=key, ctx=ast.Store())],
                              value=combine(ast.Subscript(value=base, slice=key, ctx=ast.Load())))]
        else:
            assert isinstance(target, ast.Attribute)
            base = ast.Name(id="__ft_a__", ctx=ast.Load())
            current = ast.Attribute(value=base, attr=target.attr, ctx=ast.Load())
            out = [ast.Assign(targets=[ast.Name(id="__ft_a__", ctx=ast.Store())], value=target.value),
                   ast.Expr(value=_helper("__ft_setattr__", base, ast.Constant(value=target.attr),
                                          combine(current)))]
        return [ast.copy_location(s, node) for s in out]


def instrument(tree: ast.Module) -> ast.Module:
    """A guarded copy of a checked module (raises :class:`InstrumentError` for unsupported forms)."""
    out = _Instrumenter().visit(copy.deepcopy(tree))
    assert isinstance(out, ast.Module)
    return ast.fix_missing_locations(out)
