"""Plain execution: the baseline a code-mode agent has without forethought.

The code runs in one go (``exec``), and each tool function is the tool's own function, called directly, one
call after another. Its :class:`ExecResult` is what speculative execution must reproduce: same printed
output, same error, same tool calls in the same order. Both executors put a tool into the namespace as the
same :class:`ToolFunction`, so nothing a program can observe of a tool (its type, its repr, the messages of
errors naming it) differs between them.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.tools import Tool
from forethought.code.capture import Output, capturing_builtins
from forethought.code.results import CallRecord, ExecResult, as_made

CODE_FILENAME = "<code>"


def call_directly(tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any],
                  loop: asyncio.AbstractEventLoop) -> Any:
    """Call a tool's function as plain Python would (from a worker thread; async tools run on ``loop``)."""
    prefix = (tool.state.live,) if tool.state is not None else ()
    try:
        value = tool.fn(*prefix, *args, **kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run_coroutine_threadsafe(_await(value), loop).result()
        return value
    finally:
        if tool.state is not None:
            tool.state.mark_changed()


async def _await(awaitable: Any) -> Any:
    return await awaitable


Invoke = Callable[[Tool, tuple[Any, ...], dict[str, Any], FrameType], Any]
"""How an executor makes a call: the tool, the arguments, and the frame that called (its call site)."""


class ToolFunction:
    """A tool as a function of the code's namespace: calling it hands the call to the executor."""

    __slots__ = ("_invoke", "tool")

    def __init__(self, tool: Tool, invoke: Invoke) -> None:
        self.tool = tool
        self._invoke = invoke

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._invoke(self.tool, args, kwargs, sys._getframe(1))

    def __repr__(self) -> str:
        return f"<tool {self.tool.name}>"

    def invoked_by(self, invoke: Invoke) -> bool:
        """Whether calls of this function go to ``invoke`` (an executor recognising its own tools)."""
        return self._invoke == invoke


def _caller_line(frame: FrameType | None) -> int:
    """The line of the innermost frame running the block's own code."""
    while frame is not None:
        if frame.f_code.co_filename == CODE_FILENAME:
            return frame.f_lineno
        frame = frame.f_back
    return 0


class PlainExecutor:
    """Runs code blocks serially against a persistent namespace, calling tools directly."""

    def __init__(self, tools: Iterable[Tool], namespace: dict[str, Any] | None = None) -> None:
        self.namespace: dict[str, Any] = namespace if namespace is not None else {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.calls: list[CallRecord] = []
        for t in tools:
            self.namespace[t.name] = ToolFunction(t, self._invoke)

    def _invoke(self, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any], frame: FrameType) -> Any:
        """A tool call of the program: recorded, then the tool's own function called as is."""
        assert self.loop is not None
        call = as_made(ToolCall(tool.name, dict(kwargs), tuple(args)))
        line = _caller_line(frame)
        try:
            value = call_directly(tool, args, kwargs, self.loop)
        except BaseException:
            self.calls.append(CallRecord(call, "miss", ok=False, line=line))
            raise
        self.calls.append(CallRecord(call, "miss", line=line))
        return value

    async def run(self, code: str) -> ExecResult:
        """Execute one block; errors are returned in the result, never raised."""
        self.loop = asyncio.get_running_loop()
        self.calls = []
        output = Output()
        self.namespace["__builtins__"] = capturing_builtins(output)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            compiled = compile(code, CODE_FILENAME, "exec", dont_inherit=True)
            await asyncio.to_thread(exec, compiled, self.namespace)
        except BaseException as exc:  # the program's own error is a result, not a failure of the executor
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
            error = exc
        return ExecResult(output.text(), error, tuple(self.calls), time.monotonic() - started)
