"""Code extraction from a streamed message: fenced blocks, a whole message of code, or detected bare code.

:class:`FenceExtractor` turns text deltas into block events (opened, one complete line, closed). Three modes:

* ``fenced``: only fenced blocks tagged ``python``, ``py``, ``python3``, ``repl``, ``ipython`` or untagged
  count as code; other fences (``json``, ``bash``, output) are skipped;
* ``whole``: the harness says the whole message is code (one block);
* ``auto`` (default): fences as above, and a line outside any fence that parses as a Python statement
  (not a lone word or a ``Label: text`` line) opens an *unfenced* block that runs until the next fence.

Unfenced code never silently gets zero speculation: in ``auto`` it is speculated and a note says so; in
``fenced`` mode a note at the end says which lines looked like code and were left alone.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field

from forethought.code.lexer import LineLexer

CODE_LANGUAGES = frozenset({"", "python", "py", "python3", "py3", "repl", "ipython"})
_FENCE_CHARS = ("```", "~~~")
_CODE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.For, ast.AsyncFor, ast.While,
                    ast.If, ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                    ast.Try, ast.Delete, ast.Assert, ast.Raise)


class CodeMode(enum.Enum):
    """How a message holds its code."""

    FENCED = "fenced"
    WHOLE = "whole"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class BlockOpened:
    block: int
    kind: str
    """``fenced``, ``unfenced`` or ``whole``."""
    language: str = ""


@dataclass(frozen=True, slots=True)
class BlockLine:
    block: int
    line: str


@dataclass(frozen=True, slots=True)
class BlockClosed:
    block: int


FenceEvent = BlockOpened | BlockLine | BlockClosed


@dataclass(slots=True)
class CodeBlock:
    """One extracted block: its kind and the code lines seen so far."""

    block: int
    kind: str
    language: str = ""
    lines: list[str] = field(default_factory=list)
    closed: bool = False

    @property
    def code(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


def looks_like_code(line: str) -> bool:
    """Whether one line of a message reads as the start of a Python statement rather than prose."""
    text = line.strip()
    if not text or text.startswith("#"):
        return False
    candidates = [text]
    if text.endswith(":"):
        candidates.append(text + "\n    pass")
    lexer = LineLexer()
    lexer.push(text)
    if lexer.brackets or lexer.string:
        candidates.append(text + lexer.closers())
    for candidate in candidates:
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        if not tree.body:
            return False
        first = tree.body[0]
        if isinstance(first, ast.Expr):
            return isinstance(first.value, ast.Call | ast.Await)
        if isinstance(first, ast.AnnAssign):
            return first.value is not None
        return isinstance(first, _CODE_STATEMENTS)
    return False


def _fence(stripped: str) -> tuple[str, str] | None:
    """``(marker, info)`` when ``stripped`` is a fence line."""
    for char in _FENCE_CHARS:
        if stripped.startswith(char):
            run = len(stripped) - len(stripped.lstrip(char[0]))
            return char[0] * run, stripped[run:].strip()
    return None


class FenceExtractor:
    """Incremental extraction of code blocks from message deltas."""

    def __init__(self, mode: CodeMode = CodeMode.AUTO) -> None:
        self.mode = mode
        self.blocks: list[CodeBlock] = []
        self.notes: list[str] = []
        self._partial = ""
        self._line_no = 0
        self._fence: str | None = None
        """The marker of the open fence (code or not), or ``None``."""
        self._indent = 0
        self._skipping = False
        self._current: CodeBlock | None = None
        self._skipped_code_lines: list[int] = []
        self._started = False

    @property
    def current(self) -> CodeBlock | None:
        """The code block now receiving lines, if any."""
        return self._current

    def partial_line(self) -> str | None:
        """The incomplete last line when it belongs to an open code block (for peeking), else ``None``."""
        if self._current is None or _fence(self._partial.strip()) is not None:
            return None
        return self._dedent(self._partial)

    def feed(self, delta: str) -> list[FenceEvent]:
        """Take a text delta; return the block events it completes."""
        events: list[FenceEvent] = []
        if not self._started:
            self._started = True
            if self.mode is CodeMode.WHOLE:
                events.append(self._open("whole"))
        cut = delta.find("\n")
        if cut < 0:
            self._partial += delta
            return events
        start = 0
        while cut >= 0:
            line = self._partial + delta[start:cut]
            self._partial = ""
            events.extend(self._line(line))
            start = cut + 1
            cut = delta.find("\n", start)
        self._partial = delta[start:]
        return events

    def finish(self) -> list[FenceEvent]:
        """The message ended: flush the last line and close any open block."""
        events: list[FenceEvent] = []
        if not self._started:
            self._started = True
            if self.mode is CodeMode.WHOLE:
                events.append(self._open("whole"))
        if self._partial:
            line, self._partial = self._partial, ""
            events.extend(self._line(line))
        if self._current is not None:
            events.append(self._close())
        if self.mode is CodeMode.FENCED and self._skipped_code_lines and not self.blocks:
            shown = ", ".join(str(n) for n in self._skipped_code_lines[:5])
            self.notes.append(f"no fenced code block, but line(s) {shown} look like Python code: nothing was "
                              "speculated (mode 'auto' or 'whole' would treat them as code)")
        return events

    # --- lines ------------------------------------------------------------------------------------

    def _line(self, line: str) -> list[FenceEvent]:
        self._line_no += 1
        if self.mode is CodeMode.WHOLE:
            assert self._current is not None
            return [self._append(line)]
        stripped = line.strip()
        fence = _fence(stripped)
        if self._fence is not None:
            if fence is not None and not fence[1] and fence[0][0] == self._fence[0] and len(fence[0]) >= len(
                    self._fence):
                self._fence = None
                if self._skipping:
                    self._skipping = False
                    return []
                return [self._close()]
            return [] if self._skipping else [self._append(line)]
        if fence is not None:
            events: list[FenceEvent] = []
            if self._current is not None:  # an unfenced block ends at a fence
                events.append(self._close())
            self._fence = fence[0]
            self._indent = len(line) - len(line.lstrip())
            language = fence[1].split()[0].lower() if fence[1] else ""
            if language in CODE_LANGUAGES:
                events.append(self._open("fenced", language))
            else:
                self._skipping = True
            return events
        if self._current is not None:
            return [self._append(line)]
        if looks_like_code(line):
            if self.mode is CodeMode.AUTO:
                self.notes.append(f"unfenced code from line {self._line_no}: treated as code")
                self._indent = len(line) - len(line.lstrip())
                return [self._open("unfenced"), self._append(line)]
            self._skipped_code_lines.append(self._line_no)
        return []

    def _dedent(self, line: str) -> str:
        if self._indent and line[: self._indent].strip() == "":
            return line[self._indent:]
        return line

    def _open(self, kind: str, language: str = "") -> BlockOpened:
        block = CodeBlock(len(self.blocks), kind, language)
        self.blocks.append(block)
        self._current = block
        return BlockOpened(block.block, kind, language)

    def _append(self, line: str) -> BlockLine:
        assert self._current is not None
        text = self._dedent(line)
        self._current.lines.append(text)
        return BlockLine(self._current.block, text)

    def _close(self) -> BlockClosed:
        assert self._current is not None
        block, self._current = self._current, None
        block.closed = True
        return BlockClosed(block.block)
