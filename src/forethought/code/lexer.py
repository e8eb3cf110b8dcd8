"""Line lexer: whether Python source is physically complete at the end of a line, one line at a time.

A statement can only close at a line end that is outside every bracket and string and not continued by a
backslash. :class:`LineLexer` carries that state (open brackets, an open triple-quoted string, a pending
backslash continuation) from line to line, so each new line costs only its own length: the segmenter
never rescans what it has already seen. The lexer also knows the closing sequence of the open brackets,
which the tail peeker uses to repair an unfinished statement.

String prefixes (``r``, ``b``, ``f``) need no special case: in every kind of string a backslash keeps the
next quote from closing it, exactly as Python's tokenizer reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

_CLOSERS = {"(": ")", "[": "]", "{": "}"}


@dataclass(slots=True)
class LineLexer:
    """Bracket, string and continuation state after the lines pushed so far."""

    brackets: str = ""
    """Open brackets, innermost last."""
    string: str | None = None
    """The delimiter of a string left open at the last line end (only triple quotes or continued singles)."""
    continued: bool = False
    """The last line ended with a backslash continuation outside any string."""

    @property
    def open(self) -> bool:
        """Whether the source so far cannot end a statement here."""
        return bool(self.brackets) or self.string is not None or self.continued

    def closers(self) -> str:
        """The text that would close the open string and brackets (for repairing a tail)."""
        out = self.string or ""
        return out + "".join(_CLOSERS[b] for b in reversed(self.brackets))

    def reset(self) -> None:
        self.brackets = ""
        self.string = None
        self.continued = False

    def push(self, line: str) -> None:
        """Advance over one physical line (without its newline)."""
        self.continued = False
        stack = list(self.brackets)
        quote = self.string
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if quote is not None:
                if c == "\\":
                    if i + 1 == n and len(quote) == 1:
                        break  # a backslash-newline continues a single-quoted string
                    i += 2
                    continue
                if line.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    continue
                i += 1
                continue
            if c == "#":
                break
            if c in "\"'":
                quote = c * 3 if line.startswith(c * 3, i) else c
                i += len(quote)
                continue
            if c in "([{":
                stack.append(c)
            elif c in ")]}":
                if stack:
                    stack.pop()
            elif c == "\\" and i + 1 == n:
                self.continued = True
            i += 1
        if quote is not None and len(quote) == 1 and not line.endswith("\\"):
            quote = None  # an unterminated single-quoted string: a syntax error the parser will report
        self.brackets = "".join(stack)
        self.string = quote

