"""Shared helpers of the code-speculation tests: tools with a call log, a runtime, stream-and-run."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from forethought import Effect, Policy, Runtime, Tool, tool
from forethought.code.executor import CodeExecutor
from forethought.code.plain import PlainExecutor
from forethought.code.predictor import CodeMode, CodePredictor, CodeTurn
from forethought.code.results import ExecResult
from forethought.code.worker.limits import ShadowLimits

FAST_LIMITS = ShadowLimits(statement_cpu_s=0.5, cpu_s=10.0)


@dataclass
class ToolLog:
    """Every invocation of the test tools (speculative or not), in order, with start and end times."""

    calls: list[tuple[str, tuple[Any, ...], float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def make_tools(log: ToolLog | None = None, latency_s: float = 0.0, outbox: list[str] | None = None) -> list[Tool]:
    """fetch/summarize (PURE), lookup (PURE, raises KeyError), search (READ_ONLY), send (DESTRUCTIVE)."""
    record = log if log is not None else ToolLog()
    sent = outbox if outbox is not None else []

    def logged(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            start = time.monotonic()
            try:
                if latency_s:
                    time.sleep(latency_s)
                return fn(*args)
            finally:
                with record.lock:
                    record.calls.append((name, args, start, time.monotonic()))
        return run

    def fetch(url: str) -> dict[str, Any]:
        return logged("fetch", lambda u: {"url": u, "n": len(u)})(url)

    def summarize(text: str) -> str:
        return logged("summarize", lambda t: f"summary of {t}")(text)

    def lookup(key: str) -> int:
        def find(k: str) -> int:
            if k.startswith("bad"):
                raise KeyError(k)
            return len(k)
        return logged("lookup", find)(key)

    def search(query: str, k: int = 2) -> list[str]:
        return logged("search", lambda q, n: [f"{q}-{i}" for i in range(n)])(query, k)

    def send(message: str) -> str:
        def deliver(m: str) -> str:
            sent.append(m)
            return f"sent {len(sent)}"
        return logged("send", deliver)(message)

    return [tool(fetch, effect=Effect.PURE), tool(summarize, effect=Effect.PURE), tool(lookup, effect=Effect.PURE),
            tool(search, effect=Effect.READ_ONLY), tool(send, effect=Effect.DESTRUCTIVE)]


@dataclass
class ShadowPhase:
    """What a turn did before any real run: its stats, notes, and whether the worker ended early."""

    stats: Any
    notes: list[str]
    ended: str | None
    launched_args: list[tuple[str, tuple[Any, ...]]]


async def shadow_only(code: str, log: ToolLog, namespace: dict[str, Any] | None = None, *,
                      limits: ShadowLimits | None = None, tools: list[Tool] | None = None,
                      tail: str = "\nafter = fetch('independent')\n", settle_s: float = 15.0) -> ShadowPhase:
    """Stream ``code`` (plus an independent final call) into the shadow and let it finish; no real run."""
    rt = runtime(tools if tools is not None else make_tools(log))
    session = rt.session()
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=limits or FAST_LIMITS)
    turn = predictor.begin(session, namespace if namespace is not None else {})
    turn.feed(code + tail)
    turn.finish()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle_s
    while loop.time() < deadline:
        await turn.settle(0.05)
        stats = turn.stats()
        if turn.shadow.ended is not None or turn.shadow.unavailable is not None or (
                turn.idle and stats.statements and stats.executed + stats.blocked + stats.failed >= stats.statements):
            break
    await session.wait_speculations(5.0)
    stats = turn.stats()
    await turn.close()
    session.end_turn()
    await session.close()
    rt.close()
    with log.lock:
        launched = [(c[0], c[1]) for c in log.calls]
    return ShadowPhase(stats, turn.notes, turn.shadow.ended, launched)


def runtime(tools: Iterable[Tool]) -> Runtime:
    return Runtime(tools, Policy(max_concurrent=32, max_concurrent_per_session=32, max_calls_per_turn=512,
                                 max_cost_per_turn=4096.0))


@dataclass
class StreamedRun:
    results: list[ExecResult]
    turn: CodeTurn
    hits: int
    stats: Any


async def stream_and_run(message: str, tools: list[Tool], *, chunk: int = 5, settle: bool = True,
                         mode: CodeMode = CodeMode.AUTO, namespace: dict[str, Any] | None = None,
                         predictor: CodePredictor | None = None, policy: Policy | None = None) -> StreamedRun:
    """Stream ``message`` into a code predictor in ``chunk``-character deltas, then execute its blocks."""
    rt = runtime(tools) if policy is None else Runtime(tools, policy)
    session = rt.session()
    ns = namespace if namespace is not None else {}
    executor = CodeExecutor(session, ns)
    predictor = predictor or CodePredictor(mode=mode, limits=FAST_LIMITS)
    turn = predictor.begin(session, ns)
    for i in range(0, len(message), chunk):
        turn.feed(message[i:i + chunk])
        await asyncio.sleep(0)
    blocks = turn.finish()
    if settle:
        await turn.settle(5.0)
    executor.link = turn.link
    results = [await executor.run(block.code) for block in blocks]
    await turn.close()
    session.end_turn()
    stats = session.stats()
    await session.close()
    rt.close()
    hits = sum(1 for r in results for c in r.calls if c.kind == "hit" and c.source in ("code-shadow", "code-peek"))
    return StreamedRun(results, turn, hits, stats)


async def run_plain(code: str, tools: list[Tool], namespace: dict[str, Any] | None = None) -> ExecResult:
    return await PlainExecutor(tools, namespace if namespace is not None else {}).run(code)


def user_names(namespace: dict[str, Any], tools: Iterable[Tool]) -> dict[str, Any]:
    skip = {t.name for t in tools}
    return {k: v for k, v in namespace.items() if not k.startswith("__") and k not in skip}


def comparable(namespace: dict[str, Any]) -> str:
    """A namespace rendered for equality checks: functions and classes by name, data by repr."""
    out = {}
    for name, value in sorted(namespace.items()):
        out[name] = f"<{type(value).__name__} {value.__qualname__}>" if hasattr(value, "__qualname__") else repr(value)
    return repr(out)
