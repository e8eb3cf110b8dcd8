"""Code speculation for a tool-calling agent: the ``python`` tool, speculated while its arguments stream.

A code-mode harness gives the model one tool, ``python(code)``, whose calls run in a persistent REPL. The
code's own tool calls are what is worth speculating, and they stream inside the tool call's argument JSON.
:class:`PythonTool` is that tool plus its speculation: feed it the argument deltas of each ``python`` call
(:meth:`feed_arguments`, any chunking; the ``code`` string is decoded incrementally), and the code's
statements reach a :class:`~forethought.code.predictor.CodeTurn` as they close; when the agent executes the
call, :meth:`run` executes the code with a :class:`~forethought.code.executor.CodeExecutor` that claims
those speculations. The REPL's tools run through their own session (``inner``, its policy's caps raised for
code by :func:`~forethought.code.defaults.code_policy`), so a code call never waits behind the ``python``
call that contains it. The ``python`` tool itself is ``DESTRUCTIVE``: running arbitrary code never happens
early.

Everything runs on the event loop: ``feed_arguments`` and ``on_tool_event`` are plain functions (call
them from the stream loop), ``run`` a coroutine (the tool's function). With the :class:`~forethought.Agent`,
pass ``on_tool_event=python.on_tool_event`` and ``tools=[python.tool()]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._core.tools import Effect, Tool, tool
from forethought.code.defaults import code_policy
from forethought.code.executor import CodeExecutor
from forethought.code.fence import CodeMode
from forethought.code.predictor import CodePredictor, CodeTurn
from forethought.llm.events import ToolCallArgumentsDelta, ToolCallStarted

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class StringField:
    """Decodes one string field of a JSON object as its text streams (``{"code": "..."}``), any chunking."""

    def __init__(self, field: str) -> None:
        self._key = json.dumps(field)
        self._seen = ""
        self._state = "key"  # key -> colon -> open -> body -> done
        self._escape: str | None = None
        self._high: int | None = None

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, text: str) -> str:
        """The field's decoded characters that ``text`` completes."""
        out: list[str] = []
        for ch in text:
            state = self._state
            if state == "key":
                self._seen = (self._seen + ch)[-len(self._key):]
                if self._seen == self._key:
                    self._state = "colon"
            elif state == "colon":
                if ch == ":":
                    self._state = "open"
                elif not ch.isspace():
                    self._state, self._seen = "key", ""
            elif state == "open":
                if ch == '"':
                    self._state = "body"
                elif not ch.isspace():
                    self._state, self._seen = "key", ""
            elif state == "body":
                self._body(ch, out)
        return "".join(out)

    def _body(self, ch: str, out: list[str]) -> None:
        escape = self._escape
        if escape is None:
            if self._high is not None and ch != "\\":
                out.append(chr(self._high))
                self._high = None
            if ch == "\\":
                self._escape = ""
            elif ch == '"':
                self._state = "done"
            else:
                out.append(ch)
            return
        escape += ch
        if escape[0] == "u":
            if len(escape) < 5:
                self._escape = escape
                return
            code = int(escape[1:], 16) if all(c in "0123456789abcdefABCDEF" for c in escape[1:]) else 0xFFFD
            high = self._high
            self._high = None
            if high is not None and 0xDC00 <= code <= 0xDFFF:  # the second half of a surrogate pair
                out.append(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
            elif 0xD800 <= code <= 0xDBFF:
                if high is not None:
                    out.append(chr(high))
                self._high = code
            else:
                if high is not None:
                    out.append(chr(high))
                out.append(chr(code))
        else:
            if self._high is not None:
                out.append(chr(self._high))
                self._high = None
            out.append(_ESCAPES.get(escape, escape))
        self._escape = None


class PythonTool:
    """A ``python`` REPL tool whose code is speculated while the call's arguments stream."""

    def __init__(self, tools: Sequence[Tool], *, policy: Policy | None = None, name: str = "python",
                 argument: str = "code", predictor: CodePredictor | None = None) -> None:
        self.name = name
        self.argument = argument
        self.inner = Runtime(tools, code_policy(policy))
        self.session = self.inner.session()
        self.namespace: dict[str, Any] = {}
        self.predictor = predictor or CodePredictor(mode=CodeMode.WHOLE)
        self.executor = CodeExecutor(self.session, self.namespace)
        self._streams: dict[int, tuple[StringField, CodeTurn, list[str]]] = {}
        self._python: set[int] = set()
        self._stale: list[CodeTurn] = []
        self.notes: list[str] = []

    def tool(self) -> Tool:
        """The tool to offer the model (``DESTRUCTIVE``: it runs only as the agent's real call)."""
        async def python(code: str) -> str:
            return await self.run(code)

        python.__name__ = self.name
        python.__doc__ = "Run Python code in a persistent REPL; its tools are functions. Returns what it printed."
        return tool(python, name=self.name, effect=Effect.DESTRUCTIVE)

    def on_tool_event(self, event: ToolCallStarted | ToolCallArgumentsDelta) -> None:
        """The agent's stream hook (``Agent(on_tool_event=...)``): follow the ``python`` calls' arguments."""
        if isinstance(event, ToolCallStarted):
            old = self._streams.pop(event.index, None)
            if old is not None:  # an earlier step's call under this index was never run
                self._stale.append(old[1])
            if event.name == self.name:
                self._python.add(event.index)
            else:
                self._python.discard(event.index)
        elif event.index in self._python:
            self.feed_arguments(event.index, event.text)

    def feed_arguments(self, index: int, delta: str) -> None:
        """Take one argument delta of the message's tool call ``index`` (a ``python`` call)."""
        entry = self._streams.get(index)
        if entry is None:
            entry = self._streams[index] = (StringField(self.argument), self.predictor.begin(self.session,
                                                                                              self.namespace), [])
        field, turn, text = entry
        if field.done:
            return
        decoded = field.feed(delta)
        if decoded:
            text.append(decoded)
            turn.feed(decoded)

    async def run(self, code: str) -> str:
        """Execute ``code`` (claiming the speculation of the streamed call that carried it)."""
        turn = None
        for index, (_, candidate, text) in list(self._streams.items()):
            if "".join(text) == code:
                turn = candidate
                del self._streams[index]
                break
        for stale in self._stale:
            await stale.close()
        self._stale.clear()
        if turn is not None:
            turn.finish()
            self.executor.link = turn.link
        try:
            result = await self.executor.run(code)
        finally:
            if turn is not None:
                await turn.close()
                self.notes.extend(turn.notes)
            self.session.end_turn()
        self.predictor.remember(code)
        if result.error is not None:
            return f"{result.stdout}{type(result.error).__name__}: {result.error}"
        return result.stdout

    async def settle(self, within_s: float = 5.0) -> None:
        """Wait until the shadows of the calls streaming now have run what they can (tests, diagnostics)."""
        for _, turn, _ in list(self._streams.values()):
            await turn.settle(within_s)

    async def end_step(self) -> None:
        """Drop the speculation of calls that streamed but were not run (a broken or abandoned step)."""
        for _, turn, _ in self._streams.values():
            await turn.close()
        for stale in self._stale:
            await stale.close()
        self._streams.clear()
        self._stale.clear()

    async def close(self) -> None:
        await self.end_step()
        await self.session.close()
        self.inner.close()
