"""The parent's end of one turn's shadow worker: statements out, calls in, the session decides.

Everything the worker sends is untrusted input. A ``call`` is checked (a known tool the runtime may
speculate, arguments that decode as data, a call the session can key) and goes through the same path as
any predicted call (``Session.speculate``: effects, policy, budgets, breaker); a call the real run already
made takes the real result. Answers go back as encoded copies, so nothing the worker does can touch the
objects the real run will receive. Reading costs the event loop time linear in what arrives and bounded per
wake-up: a frame's JSON values are bounded before it is parsed (:func:`~forethought.code.wire.token_bound`),
colliding set members are refused before a table is built, frames are handled for at most
:data:`WAKE_BUDGET_S` per wake-up (the rest on the next), and results sent back are bounded in size. A
worker past any bound (a frame too long or with too many values, a malformed one, bytes or calls per turn),
or past the turn's wall-clock limit, is killed, and the turn goes on without its speculation.
All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import time
import warnings
from collections.abc import Mapping
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session, SettledSpeculation
from forethought._core.tools import Effect
from forethought.code import wire
from forethought.code.link import Coordinator
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.pool import WorkerPool, WorkerProcess
from forethought.errors import CallError

SOURCE_SHADOW = "code-shadow"
SOURCE_PEEK = "code-peek"
FRAMES_PER_WAKE = 32
WAKE_BUDGET_S = 0.004
"""Frames are handled until this much time has passed in one wake-up (at least one frame); then the loop
runs its other callbacks first."""
MAX_TURN_BYTES = 64 << 20
MAX_TURN_CALLS = 1_000
_WARNED: set[str] = set()
"""Reasons already warned about: one warning per reason per process."""
_STAT_FIELDS = ("statements", "executed", "blocked", "failed", "peeks")


class ShadowClient:
    """One turn's worker, seen from the event loop."""

    def __init__(self, session: Session, coordinator: Coordinator, pool: WorkerPool, confidence: float,
                 limits: ShadowLimits) -> None:
        self.session = session
        self.coordinator = coordinator
        self.confidence = confidence
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.tools = {name: session.tools.get_tool(name).speculable for name in session.tools}
        self.reads = sorted(name for name in session.tools if session.tools.get_tool(name).effect is Effect.READ_ONLY)
        """The tools whose results an effect of the code may change (the worker stops reading after one)."""
        self.worker: WorkerProcess | None = None
        self.unavailable: str | None = None
        self.ended: str | None = None
        self.notes: list[str] = []
        self.stats = dict.fromkeys(_STAT_FIELDS, 0)
        self.launched = 0
        self.rejected: list[str] = []
        self._queue: list[bytes] = []
        self._out = bytearray()
        self._flushing = False
        self._waiting_writable = False
        self._in = bytearray()
        self._seq = 0
        self._idle_seq = -1
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._bytes = 0
        self._calls = 0
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._ending: str | None = None
        self._pool = pool
        future = pool.acquire()
        if future.done():
            self._attach(future)
        else:
            future.add_done_callback(lambda f: self._threadsafe(self._attach, f))

    def _threadsafe(self, fn: Any, *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            result = args[0].result() if args else None
            if isinstance(result, WorkerProcess):
                result.kill()

    # --- attaching and sending --------------------------------------------------------------------

    def _attach(self, future: concurrent.futures.Future[WorkerProcess | None]) -> None:
        worker = future.result()
        if worker is None:
            self.unavailable = self._pool.unavailable or "the shadow worker pool is closed"
            if self._pool.unavailable is not None and self._pool.unavailable not in _WARNED:
                _WARNED.add(self._pool.unavailable)
                warnings.warn(f"code speculation is off: {self._pool.unavailable}", RuntimeWarning, stacklevel=2)
            self._release_waiters()
            return
        if self._closed:
            worker.kill()
            return
        self.worker = worker
        self._timer = self.loop.call_later(self.limits.turn_wall_s, self._end, "the turn's wall-clock limit")
        self.loop.add_reader(worker.sock.fileno(), self._readable)
        for data in self._queue:
            self._write(data)
        self._queue.clear()

    def send(self, message: dict[str, Any]) -> None:
        if self._closed or self.ended is not None or self.unavailable is not None:
            return
        data = wire.frame(message)
        if self.worker is None:
            self._queue.append(data)
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        """Queue ``data``; everything queued in one pass of the loop goes out in one ``send``."""
        self._out += data
        if not self._flushing:
            self._flushing = True
            self.loop.call_soon(self._writable)

    def _writable(self) -> None:
        worker = self.worker
        if worker is None or worker.killed or not self._out:
            self._flushing = False
            return
        try:
            sent = worker.sock.send(self._out)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._flushing = False
            self._end(f"the channel failed ({exc.strerror or exc})")
            return
        del self._out[:sent]
        if self._out and not self._waiting_writable:
            self._waiting_writable = True
            self.loop.add_writer(worker.sock.fileno(), self._writable)
        elif not self._out:
            self._flushing = False
            if self._waiting_writable:
                self._waiting_writable = False
                self.loop.remove_writer(worker.sock.fileno())

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --- receiving (untrusted) --------------------------------------------------------------------

    def _readable(self) -> None:
        worker = self.worker
        if worker is None:
            return
        try:
            chunk = worker.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                self._end(f"the channel failed ({exc.strerror or exc})")
            return
        if not chunk:
            self._end("the worker exited")
            return
        self._bytes += len(chunk)
        if self._bytes > MAX_TURN_BYTES:
            self._end("the worker sent too much")
            return
        self._in += chunk
        self._process()

    def _process(self) -> None:
        """Handle complete frames for at most :data:`WAKE_BUDGET_S` (and :data:`FRAMES_PER_WAKE`); with more
        waiting, let other callbacks run first."""
        started = time.perf_counter()
        for _ in range(FRAMES_PER_WAKE):
            if self.ended is not None or self._closed or len(self._in) < wire.HEADER_SIZE:
                return
            try:
                length = wire.frame_length(bytes(self._in[:wire.HEADER_SIZE]), self.limits.max_message_bytes)
            except wire.NotData as exc:
                self._end(f"the worker sent an oversized frame ({exc})")
                return
            if len(self._in) < wire.HEADER_SIZE + length:
                return
            body = bytes(self._in[wire.HEADER_SIZE:wire.HEADER_SIZE + length])
            del self._in[:wire.HEADER_SIZE + length]
            if wire.token_bound(body) > self.limits.max_frame_tokens:
                self._end("the worker sent an oversized frame (too many values)")
                return
            try:
                self._handle(wire.parse(body))
            except (wire.NotData, KeyError, TypeError, ValueError, AttributeError) as exc:
                self._end(f"the worker sent a malformed message ({type(exc).__name__})")
                return
            if time.perf_counter() - started > WAKE_BUDGET_S:
                break
        if len(self._in) >= wire.HEADER_SIZE:
            self.loop.call_soon(self._process)

    def _handle(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "call":
            self._call(message)
        elif op == "ending":
            self._ending = str(message.get("why", ""))[:300] or None
        elif op == "idle":
            seq = message["seq"]
            if type(seq) is not int:
                raise TypeError("seq")
            self._idle_seq = max(self._idle_seq, seq)
            notes = message.get("notes")
            for note in notes[:50] if type(notes) is list else []:
                if type(note) is str and len(self.notes) < 100:
                    self.notes.append(note[:500])
            stats = message.get("stats")
            if type(stats) is not dict:
                stats = {}
            for name in _STAT_FIELDS:
                value = stats.get(name)
                if type(value) is int and value >= 0:
                    self.stats[name] = value
            self._release_waiters()
        else:
            raise ValueError(f"unexpected op {op!r}")

    def _call(self, message: dict[str, Any]) -> None:
        call_id, name = message["id"], message["tool"]
        if type(call_id) is not int:
            raise TypeError("id")
        self._calls += 1
        if self._calls > MAX_TURN_CALLS:
            self._end("the worker asked for too many calls")
            return
        source = SOURCE_PEEK if message.get("source") == SOURCE_PEEK else SOURCE_SHADOW
        if type(name) is not str or not self.tools.get(name, False):
            self._reject(call_id, str(name)[:100], "this tool does not run before the real call")
            return
        try:
            budget = self.limits.max_frame_tokens
            args, kwargs = wire.decode(message["args"], budget), wire.decode(message["kwargs"], budget)
            if type(args) is not list or type(kwargs) is not dict or any(type(k) is not str for k in kwargs):
                raise wire.NotData("arguments are a list and a dict with string keys")
        except wire.NotData as exc:
            self._reject(call_id, name, f"not data: {exc}")
            return
        call = ToolCall(name, kwargs, tuple(args))
        try:
            _, _, key = self.session.resolve(call)
        except CallError as exc:
            self._reject(call_id, name, f"not a valid call: {exc}")
            return
        real = self.coordinator.real_result(key)
        if real is not None:
            real.add_done_callback(lambda f: self._answer_future(call_id, f))
            return
        if source == SOURCE_SHADOW:
            self.coordinator.want(key, call, source, self.confidence)
        self.coordinator.note_shape(key, call)
        ticket = self.session.speculate(call, source=source, confidence=self.confidence)
        if ticket.status not in ("launched", "deduplicated") or not self.session.on_settled(
                key, lambda result: self._answer_settled(call_id, result), copy=False):  # only encoded, at once
            self._reject(call_id, name, f"not speculated: {ticket.reason or ticket.status}")
            return
        if ticket.launched:
            self.launched += 1

    def _reject(self, call_id: int, name: str, reason: str) -> None:
        if len(self.rejected) < 100:
            self.rejected.append(f"{name}: {reason}")
        self._answer(call_id, blocked=reason)

    def _answer(self, call_id: int, *, value: Any = None, error: BaseException | None = None,
                blocked: str | None = None) -> None:
        # Each answer has a sequence number, as statements have: the worker is not idle until it has run
        # what the answer lets it run (the next call of a chain), so a real call about to miss waits for
        # the shadow's launch of that very call instead of racing it (:meth:`settle`).
        if blocked is not None:
            self.send({"op": "result", "id": call_id, "seq": self.next_seq(), "blocked": blocked})
        elif error is not None:
            self.send({"op": "result", "id": call_id, "seq": self.next_seq(),
                       "error": [type(error).__name__, str(error)[:2000]]})
        else:
            try:
                encoded = wire.encode(value, self.limits.max_frame_tokens, self.limits.max_result_bytes)
            except wire.NotData as exc:
                self.send({"op": "result", "id": call_id, "seq": self.next_seq(),
                           "blocked": f"the result is not data: {exc}"})
                return
            self.send({"op": "result", "id": call_id, "seq": self.next_seq(), "value": encoded})

    def _answer_settled(self, call_id: int, result: SettledSpeculation) -> None:
        if result.cancelled:
            self._answer(call_id, blocked="the speculation was cancelled")
        elif result.error is not None:
            if isinstance(result.error, TimeoutError):
                self._answer(call_id, blocked="the speculation timed out")
            else:
                self._answer(call_id, error=result.error)
        elif result.ok:
            self._answer(call_id, value=result.value)
        else:
            self._answer(call_id, blocked="the speculation ended without a value")

    def _answer_future(self, call_id: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self._answer(call_id, blocked="the real call was cancelled")
            return
        error = future.exception()
        if error is None:
            self._answer(call_id, value=future.result())
        else:
            cause = error.__cause__ if error.__cause__ is not None else error
            self._answer(call_id, error=cause)

    # --- settling and the end ---------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return self._finished or self._idle_seq >= self._seq

    @property
    def _finished(self) -> bool:
        return self._closed or self.ended is not None or self.unavailable is not None

    def _release_waiters(self) -> None:
        keep = []
        for seq, future in self._waiters:
            if self._finished or self._idle_seq >= seq:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((seq, future))
        self._waiters = keep

    async def settle(self, within_s: float) -> None:
        """Wait (at most ``within_s``) until the worker has run everything sent so far that it can."""
        if not self.idle:
            future: asyncio.Future[None] = self.loop.create_future()
            self._waiters.append((self._seq, future))
            try:
                await asyncio.wait_for(asyncio.shield(future), within_s)
            except TimeoutError:
                return
        await asyncio.sleep(0)

    def _end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
        self._shutdown()
        self._release_waiters()

    def _shutdown(self) -> None:
        worker = self.worker
        if self._timer is not None:
            self._timer.cancel()
        if worker is not None and not worker.killed:
            try:
                self.loop.remove_reader(worker.sock.fileno())
                self.loop.remove_writer(worker.sock.fileno())
            except (ValueError, OSError):
                pass
            worker.kill()

    def close(self) -> None:
        """Kill the worker (its scratch directory goes with it); speculations stay the session's."""
        if not self._closed:
            self._closed = True
            self._shutdown()
            self._release_waiters()

    def end_notes(self) -> list[str]:
        out = list(self.notes)
        if self.unavailable is not None:
            out.append(f"code speculation is off: {self.unavailable}")
        if self.ended is not None:
            why = self.ended
            if why == "the worker exited":
                why = self._ending or "the worker exited (the kernel ends it past its CPU or memory limit)"
            out.append(f"the shadow worker ended early: {why[:300]}; later statements not speculated")
        return out


def snapshot(namespace: Mapping[str, Any], tools: frozenset[str], definitions: Mapping[str, str],
             max_nodes: int = wire.MAX_NODES) -> tuple[dict[str, Any], list[str]]:
    """The REPL namespace as the worker receives it: data encoded, modules by name, definitions as source,
    anything else blocked; returns the ``begin`` fields and notes on what was blocked."""
    import types

    values: dict[str, Any] = {}
    modules: dict[str, str] = {}
    blocked: dict[str, str] = {}
    sources: list[str] = []
    notes: list[str] = []
    budget = max_nodes
    for name, value in list(namespace.items()):
        if name.startswith("__") or name in tools:
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        if isinstance(value, type | types.FunctionType) or callable(value):
            source = definitions.get(name)
            if source is not None:
                sources.append(source)
            else:
                blocked[name] = f"{name!r} was defined outside the code the predictor saw"
                notes.append(f"{name}: defined outside the streamed code, blocked in the shadow")
            continue
        try:
            encoded = wire.encode(value, max_nodes=budget)
        except wire.NotData as exc:
            blocked[name] = f"{name!r} ({type(value).__name__}) is not data: {exc}"
            notes.append(f"{name}: {type(value).__name__} value not copied into the shadow")
            continue
        budget -= _count(encoded)
        values[name] = encoded
    return {"values": values, "modules": modules, "blocked": blocked, "definitions": sources}, notes


def _count(encoded: Any) -> int:
    stack, n = [encoded], 0
    while stack:
        item = stack.pop()
        n += 1
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return n
