"""Builtins for executing model code: the real ones, with ``print`` writing into the run's buffer.

Both the plain and the speculative executor use this, so their outputs compare byte for byte.
"""

from __future__ import annotations

import builtins
import io
from typing import Any


class Output:
    """A run's standard output."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def text(self) -> str:
        return self.buffer.getvalue()


def capturing_builtins(output: Output, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The builtins mapping for a namespace, printing into ``output``."""
    real_print = builtins.print

    def captured_print(*args: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None,
                       flush: bool = False) -> None:
        real_print(*args, sep=sep, end=end, file=output.buffer if file is None else file, flush=flush)

    out = dict(vars(builtins))
    out["print"] = captured_print
    if overrides:
        out.update(overrides)
    return out
