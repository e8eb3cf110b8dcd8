"""What one execution of a code block produced: its output, its error, and its tool calls in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall, dumps_canonical

_SCALARS = (str, bytes, int, float, bool, complex, type(None))


def as_made(call: ToolCall) -> ToolCall:
    """The call as it was made: its built-in containers copied (a program may change its lists after the call),
    other objects as they are (copying them could run the program's code)."""
    return ToolCall(call.name, _snapshot(dict(call.arguments)), tuple(_snapshot(list(call.positional))))


def _snapshot(value: Any, depth: int = 0) -> Any:
    kind = type(value)
    if depth > 50 or kind in _SCALARS:
        return value
    if kind is list:
        return [_snapshot(v, depth + 1) for v in value]
    if kind is tuple:
        return tuple(_snapshot(v, depth + 1) for v in value)
    if kind is dict:
        return {k: _snapshot(v, depth + 1) for k, v in value.items()}
    if kind in (set, frozenset) and all(type(v) in _SCALARS for v in value):
        return kind(value)
    return value


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One authoritative tool call of a run, in the order the program made it.

    ``kind`` is ``hit`` or ``partial_hit`` (served by a prediction), ``miss`` (run by the real call), or
    ``direct`` (arguments that are not JSON values: the function was called as is, never speculated).
    ``parallel`` marks a miss that ran early, concurrently with the program, because its result was not
    needed yet.
    """

    call: ToolCall
    kind: str
    source: str = ""
    parallel: bool = False
    ok: bool = True
    line: int = 0
    """Line of the call site in the block (recorded by the plain executor; 0 when unknown)."""

    @property
    def hit(self) -> bool:
        return self.kind in ("hit", "partial_hit")


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Output of one code block: printed text, the error that ended it (if any), and its tool calls."""

    stdout: str
    error: BaseException | None
    calls: tuple[CallRecord, ...]
    seconds: float = 0.0

    @property
    def error_text(self) -> str:
        """``Type: message`` of the error, or ``""``."""
        if self.error is None:
            return ""
        return f"{type(self.error).__name__}: {self.error}"

    def signature(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        """What must be equal to plain execution: output, error and the call sequence (name, arguments)."""
        calls = tuple((r.call.name, _render([list(r.call.positional), dict(r.call.arguments)])) for r in self.calls)
        return self.stdout, self.error_text, calls


def _render(value: object) -> str:
    try:
        return dumps_canonical(value)
    except (TypeError, ValueError):
        return repr(value)
