"""Knowing the moment a streamed tool call's arguments JSON object is closed.

A model streams a call's arguments as text fragments. Dispatching the call early needs to know, at the
fragment that completes it, that the top-level JSON object is closed — not at message end, and without
re-scanning the buffer (jiter's partial mode parses prefixes, but cannot tell a closed value from a
prefix of a longer one).

:class:`ObjectCloseScanner` tracks only what decides closure: whether the scanner is inside a string,
whether the previous character was a backslash escape, and the stack of open ``{``/``[``. Each fragment
is scanned once, jumping between the few significant characters with compiled regular expressions, so the
cost is O(len(fragment)) per fragment. Closure is then confirmed by the project's strict parser
(:func:`forethought._core.calls.parse_arguments_json`): balanced text can still be invalid JSON (``{"a":1,}``),
which gives an error for that call.
"""

from __future__ import annotations

import re
from typing import Any

from forethought._core.calls import parse_arguments_json
from forethought.errors import MalformedArgumentsJSONError

_IN_STRING_STOP = re.compile(r'["\\]')
_STRUCTURAL = re.compile(r'["{}\[\]]')
_WHITESPACE = " \t\r\n"
_MATCHING = {"}": "{", "]": "["}


class ObjectCloseScanner:
    """Incremental scanner reporting where the top-level JSON object of a text stream closes.

    ``feed`` returns the offset just past the closing ``}`` inside the fragment that closed the object,
    else ``None``. ``invalid`` is set (and nothing closes any more) when the text does not start with
    ``{`` or a bracket does not match its opener; the strict parse then explains the problem.
    """

    __slots__ = ("_escape", "_in_string", "_stack", "_started", "closed", "invalid")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False
        self._started = False
        self.closed = False
        self.invalid = False

    def feed(self, fragment: str) -> int | None:
        """Consume the next fragment; return the end offset of the object if it closed within it."""
        if self.closed or self.invalid:
            return None
        i, n = 0, len(fragment)
        if not self._started:
            while i < n and fragment[i] in _WHITESPACE:
                i += 1
            if i == n:
                return None
            if fragment[i] != "{":
                self.invalid = True
                return None
            self._started = True
            self._stack.append("{")
            i += 1
        stack = self._stack
        while i < n:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    i += 1
                    continue
                match = _IN_STRING_STOP.search(fragment, i)
                if match is None:
                    return None
                i = match.start()
                if fragment[i] == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                i += 1
                continue
            match = _STRUCTURAL.search(fragment, i)
            if match is None:
                return None
            i = match.start()
            char = fragment[i]
            i += 1
            if char == '"':
                self._in_string = True
            elif char in "{[":
                stack.append(char)
            elif stack.pop() != _MATCHING[char]:
                self.invalid = True
                return None
            elif not stack:
                self.closed = True
                return i
        return None


class ArgumentStream:
    """One tool call's argument text as it streams: the fragments, closure, and the strict parse.

    ``feed`` returns ``True`` for the fragment that closed the object. Text after the closing brace is
    kept in ``trailing`` and is not part of ``raw`` (the arguments are the first complete object).
    """

    __slots__ = ("_parts", "_scanner", "tool", "trailing")

    def __init__(self, tool: str = "") -> None:
        self.tool = tool
        self._parts: list[str] = []
        self._scanner = ObjectCloseScanner()
        self.trailing = ""

    @property
    def closed(self) -> bool:
        return self._scanner.closed

    @property
    def raw(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def feed(self, fragment: str) -> bool:
        """Add a fragment; ``True`` exactly when this fragment closed the arguments object."""
        if self._scanner.closed:
            self.trailing += fragment
            return False
        end = self._scanner.feed(fragment)
        if end is None:
            self._parts.append(fragment)
            return False
        self._parts.append(fragment[:end])
        self.trailing = fragment[end:]
        return True

    def parse(self) -> dict[str, Any]:
        """Strictly parse the closed object (raises :class:`MalformedArgumentsJSONError`)."""
        return parse_arguments_json(self.raw, self.tool)

    def finish(self, finish_reason: str | None = None) -> dict[str, Any]:
        """Parse at message end: blank text means ``{}``; text that never closed is an error (cut off)."""
        raw = self.raw
        if self.closed or not raw.strip():
            return parse_arguments_json(raw.strip(), self.tool)
        if not self._scanner.invalid:
            where = f"{self.tool}: " if self.tool else ""
            reason = f" (finish_reason={finish_reason!r})" if finish_reason else ""
            raise MalformedArgumentsJSONError(
                f"{where}arguments JSON was cut off before the object closed{reason}: {raw[:200]!r}")
        parse_arguments_json(raw, self.tool)
        raise MalformedArgumentsJSONError(f"{self.tool}: arguments are not a single JSON object: {raw[:200]!r}")
