"""The shadow worker process: confine itself, then run one turn's statements as the parent streams them.

Started by :mod:`forethought.code.worker.pool` with the channel's file descriptor, a scratch directory and
the limits. It imports what it needs, applies every isolation layer (:func:`~.sandbox.confine`), reports
``ready`` (or ``unavailable`` with the reason) and serves one turn: ``begin`` (the namespace as data, module
names, definitions' source, the tools), ``stmt`` and ``peek`` (source text), ``result`` (answers to its calls),
``stop``. It sends ``call`` (a tool call as data) and ``idle`` (nothing it can run now; new notes, stats).
Model code runs here unmodified: what it may do is what the kernel allows the process.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import socket
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

from forethought.code.evaluate import Unresolvable
from forethought.code.lazy import Blocked
from forethought.code.peek import Deduplicating, TailPeek, preplan, wants_preplan
from forethought.code.shadow import SHADOW_FILENAME, SHADOW_MODULE_NAME, Control, ShadowRunner
from forethought.code.signals import ShadowBlocked, ShadowSignal
from forethought.code.wire import HEADER_SIZE, NotData, decode, frame, frame_length, parse
from forethought.code.worker.hooks import ChannelLauncher, ToolHook, rebuild_error
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.sandbox import IsolationUnavailable, confine

SOURCE_SHADOW = "code-shadow"
SOURCE_PEEK = "code-peek"
PRELOADED = ("json", "math", "re", "collections", "itertools", "functools", "statistics", "datetime", "string",
             "operator", "heapq", "bisect", "textwrap", "copy", "dataclasses", "enum", "decimal", "fractions",
             "random", "typing", "abc", "base64", "hashlib", "calendar", "unicodedata", "difflib", "pprint")
"""Imported before confinement (cheap to import again in model code)."""
MAX_PARENT_MESSAGE = 64 << 20
NOTE_CHARS = 500
"""A note is cut to this length before it is sent (an error's message can be as long as a program likes)."""


@dataclass(frozen=True, slots=True)
class _Statement:
    block: int
    index: int
    tree: ast.Module


class Channel:
    """The worker's end of the socket: blocking reads on the main thread, locked writes from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        self.send_frame(frame(message))

    def send_frame(self, data: bytes) -> None:
        with self._lock:
            self._sock.sendall(data)

    def send_soon(self, message: dict[str, Any], wait_s: float = 0.2) -> None:
        """Send unless another thread holds the channel for ``wait_s`` (the process is about to end)."""
        data = frame(message)
        if self._lock.acquire(timeout=wait_s):
            try:
                self._sock.sendall(data)
            finally:
                self._lock.release()

    def _read(self, n: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self._sock.recv(n - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def recv(self) -> dict[str, Any] | None:
        header = self._read(HEADER_SIZE)
        if header is None:
            return None
        body = self._read(frame_length(header, MAX_PARENT_MESSAGE))
        return None if body is None else parse(body)


class Turn:
    """One turn in the worker: the runner, its hooks, and the bookkeeping the parent sees."""

    def __init__(self, channel: Channel, begin: dict[str, Any], limits: ShadowLimits) -> None:
        self.channel = channel
        self.begin = begin
        self.limits = limits
        self.control = Control(limits.statement_cpu_s)
        self.launcher = ChannelLauncher(channel, limits.max_frame_tokens)
        tools: dict[str, bool] = {str(k): bool(v) for k, v in begin["tools"].items()}
        self.tool_flags = tools
        self.tools = frozenset(tools)
        self.reads = frozenset(str(name) for name in begin.get("reads", ()))
        """The ``READ_ONLY`` tools: their calls stop after an effect the shadow cannot model."""
        self.functions: dict[str, ast.FunctionDef] = {}
        self.seq = 0
        self._sent_notes = 0
        peek = bool(begin.get("peek", True))
        self._peek_hooks = {name: ToolHook(name, flag, self.launcher, self.control, SOURCE_PEEK,
                                           reads_allowed=self._reads_allowed if name in self.reads else None)
                            for name, flag in tools.items()}
        self._peek_launch = Deduplicating(self._launch_peek)
        self.runner = ShadowRunner(build_namespace=self._namespace, tools=self.tools, control=self.control,
                                   preplan=self._preplan if peek else None, on_idle=self._idle,
                                   on_fatal=self._fatal)
        self.runner.is_tool = lambda value: type(value) is ToolHook
        self._definitions = [str(s) for s in begin.get("definitions", [])]
        for source in self._definitions:
            self._remember(source)

    def _reads_allowed(self) -> bool:
        return self.runner.reads_allowed()

    def _remember(self, source: str) -> ast.Module | None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
        return tree

    def _namespace(self) -> dict[str, Any]:
        ns: dict[str, Any] = {"__name__": SHADOW_MODULE_NAME, "__builtins__": builtins}
        notes = self.runner.notes
        for name, data in self.begin.get("values", {}).items():
            try:
                ns[name] = decode(data)
            except NotData as exc:
                ns[name] = Blocked(f"{name!r} did not arrive as data: {exc}")
        for name, module in self.begin.get("modules", {}).items():
            try:
                ns[name] = importlib.import_module(str(module))
            except Exception as exc:
                ns[name] = Blocked(f"module {module!r} is not importable in the shadow: {type(exc).__name__}")
        for name, reason in self.begin.get("blocked", {}).items():
            ns[name] = Blocked(str(reason))
        for name, flag in self.tool_flags.items():
            ns[name] = ToolHook(name, flag, self.launcher, self.control, SOURCE_SHADOW,
                                observe=self.runner.on_launch,
                                reads_allowed=self._reads_allowed if name in self.reads else None)
        for source in self._definitions:
            try:
                self.control.start_statement()
                exec(compile(source, SHADOW_FILENAME, "exec", dont_inherit=True), ns)
            except (Exception, ShadowSignal) as exc:
                defined = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
                for name in defined:
                    ns[name] = Blocked(f"{name!r} could not be re-created in the shadow")
                notes.append(f"{', '.join(defined)}: not re-created in the shadow ({type(exc).__name__}: {exc})")
        return ns

    def _launch_peek(self, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return self._peek_hooks[tool](*args, **kwargs)
        except ShadowSignal as exc:
            raise Unresolvable(str(exc)) from None

    def _preplan(self, statement: ast.stmt, namespace: Any) -> None:
        functions = dict(self.functions)
        if wants_preplan(statement, functions):
            preplan(statement, namespace, self.tools, self._peek_launch, functions, self.limits.max_unroll)

    def _fatal(self, why: str) -> None:
        self.channel.send_soon({"op": "ending", "why": why})

    def _idle(self) -> None:  # called by the runner with its lock held
        notes = self.runner.notes[self._sent_notes:]
        self._sent_notes += len(notes)
        self.channel.send({"op": "idle", "seq": self.seq, "notes": [note[:NOTE_CHARS] for note in notes],
                           "stats": asdict(self.runner.stats)})

    def statement(self, message: dict[str, Any]) -> None:
        tree = self._remember(str(message["source"]))
        with self.runner.lock:
            self.seq = int(message["seq"])
            if tree is None:
                self.runner.notes.append(f"block {message['block']}: a statement did not parse in the shadow")
                self._idle()
                return
            self.runner.submit(_Statement(int(message["block"]), int(message["index"]), tree))

    def peek(self, message: dict[str, Any]) -> None:
        with self.runner.lock:
            self.seq = int(message["seq"])
            self.runner.submit_peek(TailPeek(int(message["block"]), str(message["tail"]), self.tools,
                                             self._peek_launch, self.limits.max_unroll, dict(self.functions)))

    def result(self, message: dict[str, Any]) -> None:
        if "value" in message:
            value = decode(message["value"])
            self.launcher.answer(int(message["id"]), lambda cell: cell.set_result(value))
        elif "error" in message:
            kind, text = message["error"]
            self.launcher.answer(int(message["id"]), lambda cell: cell.set_exception(rebuild_error(kind, text)))
        else:
            reason = str(message.get("blocked", "not speculated"))
            self.launcher.answer(int(message["id"]), lambda cell: cell.set_exception(ShadowBlocked(reason)))
        seq = message.get("seq")
        if type(seq) is int:
            with self.runner.lock:  # the idle report after this one covers what the answer let run
                self.seq = max(self.seq, seq)
                self.runner.recheck()


def prepare() -> None:
    """Import, before confinement, what turns commonly need (in the zygote: once, shared by every fork)."""
    for name in PRELOADED:
        importlib.import_module(name)


def serve(fd: int, scratch: str, limits: ShadowLimits, namespaces: tuple[str, ...]) -> None:
    """The worker's life (in its namespaces): confine, report, serve one turn, exit."""
    sock = socket.socket(fileno=fd)
    channel = Channel(sock)
    sink = open(os.devnull, "w")  # noqa: SIM115 - print() in model code goes nowhere, for the process's life
    try:
        confinement = confine(scratch, limits, namespaces)
    except (IsolationUnavailable, OSError) as exc:
        channel.send({"op": "unavailable", "reason": str(exc)})
        return
    os.chdir(scratch)
    sys.stdout = sys.stderr = sink
    channel.send({"op": "ready", "confinement": asdict(confinement)})
    turn: Turn | None = None
    while True:
        message = channel.recv()
        if message is None or message["op"] == "stop":
            return
        op = message["op"]
        if op == "begin" and turn is None:
            turn = Turn(channel, message, limits)
            turn.runner.start()
        elif turn is None:
            continue
        elif op == "stmt":
            turn.statement(message)
        elif op == "peek":
            turn.peek(message)
        elif op == "result":
            turn.result(message)
