"""Statement segmentation: turn a code block's lines, as they stream in, into closed top-level statements.

A simple statement closes at the first line end where the :class:`LineLexer` says nothing is open; a
compound statement (``for``, ``if``, ``def``, ``try``, decorators, ...) closes when a later line starts at
column 0 and does not continue it (``elif``/``else``/``except``/``finally``). Only the statement frontier is
kept: each line is lexed once, and each statement is parsed once, when it closes, so the cost of a delta
does not grow with the length of the program.

If a closed statement does not parse, the block is marked broken and emits nothing more: compiling the
whole block will fail in the real run too, so speculating its later statements could only waste work.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from forethought.code.lexer import LineLexer

_COMPOUND = re.compile(r"(?:if|for|while|def|class|with|try|async)\b|@")
_MATCH = re.compile(r"match\b.*:\s*(?:#.*)?$")
_CONTINUATION = re.compile(r"(?:elif|else|except|finally)\b")
_DECORATED = re.compile(r"(?:@|def\b|class\b|async\b)")


@dataclass(frozen=True, slots=True)
class ClosedStatement:
    """One closed top-level statement (several if written on one line with ``;``)."""

    block: int
    index: int
    source: str
    first_line: int
    """1-based line of the statement within its block."""
    tree: ast.Module = field(compare=False, repr=False)


def _is_compound(line: str) -> bool:
    return bool(_COMPOUND.match(line) or _MATCH.match(line))


@dataclass(slots=True)
class StatementSegmenter:
    """Closed statements of one code block, fed one complete line at a time."""

    block: int
    lexer: LineLexer = field(default_factory=LineLexer)
    lines: list[str] = field(default_factory=list)
    """Lines of the statement still open (its first line is a statement start)."""
    first_line: int = 0
    compound: bool = False
    decorators_only: bool = False
    line_count: int = 0
    emitted: int = 0
    broken: str | None = None
    """Why this block stopped emitting (a syntax error), or ``None``."""

    @property
    def open_source(self) -> str:
        """The open statement's complete lines (the tail the peeker looks at, minus the partial line)."""
        return "\n".join(self.lines)

    def push_line(self, line: str) -> list[ClosedStatement]:
        """Take one complete line (no newline); return the statements it closed."""
        self.line_count += 1
        if self.broken is not None:
            return []
        out: list[ClosedStatement] = []
        stripped = line.strip()
        neutral = not stripped or stripped.startswith("#")
        if self.lines and self.compound and not self.lexer.open:
            continues = neutral or line[0] in " \t" or bool(_CONTINUATION.match(line)) or (
                self.decorators_only and bool(_DECORATED.match(line)))
            if not continues:
                out.extend(self._emit())
        if not self.lines:
            if neutral:
                return out
            self.first_line = self.line_count
            self.compound = _is_compound(line)
            self.decorators_only = line.startswith("@")
        elif self.decorators_only and not line.startswith("@") and not neutral:
            self.decorators_only = False
        self.lines.append(line)
        self.lexer.push(line)
        if not self.compound and not self.lexer.open:
            out.extend(self._emit())
        return out

    def finish(self) -> list[ClosedStatement]:
        """The block ended: close whatever statement is open."""
        if self.broken is None and self.lines:
            return self._emit()
        return []

    def _emit(self) -> list[ClosedStatement]:
        source = "\n".join(self.lines)
        self.lines = []
        self.lexer.reset()
        self.compound = False
        self.decorators_only = False
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            self.broken = f"line {self.first_line + (exc.lineno or 1) - 1}: {exc.msg}"
            return []
        if not tree.body:
            return []
        statement = ClosedStatement(self.block, self.emitted, source, self.first_line, tree)
        self.emitted += 1
        return [statement]
