"""Static refusal of shadow code that could escape the sandbox, before it is instrumented or run.

Refused: names starting with ``__`` (``__builtins__``, ``__import__``, ``__class__`` ...); attributes starting
with ``_`` or naming frames, code objects and tracebacks (``gi_frame``, ``f_globals``, ``tb_frame``,
``mro``, ...); ``str.format`` except on a literal whose fields are plain (no ``{0.attr}`` or ``{0[key]}``,
which read attributes at run time); dynamic or huge f-string format specs; async code; relative imports.
A refused statement is treated like a blocked one: only the statements depending on it are skipped.
"""

from __future__ import annotations

import ast
import string

from forethought.code.guard import attribute_allowed

_MAX_SPEC_DIGITS = 6


def _spec_ok(spec: str) -> bool:
    digits = 0
    for ch in spec:
        digits = digits + 1 if ch.isdigit() else 0
        if digits > _MAX_SPEC_DIGITS:
            return False
    return "{" not in spec


def literal_format_ok(text: str) -> bool:
    """Whether ``text.format(...)`` can only substitute plain positional or named fields."""
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


def refusal(tree: ast.AST) -> str | None:
    """Why shadow code must not run, or ``None`` when it passes the static checks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            return f"name {node.id!r} is not accessible in the shadow"
        if isinstance(node, ast.Attribute):
            if node.attr == "format":
                base = node.value
                if not (isinstance(base, ast.Constant) and isinstance(base.value, str)
                        and literal_format_ok(base.value)):
                    return "str.format on a non-literal or field-reading format string"
            elif not attribute_allowed(node.attr):
                return f"attribute {node.attr!r} is not accessible in the shadow"
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            parts = node.format_spec.values if isinstance(node.format_spec, ast.JoinedStr) else []
            for part in parts:
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str) and _spec_ok(part.value)):
                    return "dynamic or huge f-string format spec"
        elif isinstance(node, ast.Await | ast.AsyncFunctionDef | ast.AsyncFor | ast.AsyncWith):
            return "async code does not run in the shadow"
        elif isinstance(node, ast.ImportFrom) and node.level:
            return "relative import"
        elif isinstance(node, ast.Global | ast.Nonlocal) and any(n.startswith("__") for n in node.names):
            return "global declaration of a private name"
        elif isinstance(node, ast.MatchClass) and any(a.startswith("_") for a in node.kwd_attrs):
            return "match pattern reads a private attribute"
    return None
