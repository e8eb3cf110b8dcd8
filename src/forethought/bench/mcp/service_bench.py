"""``forethought bench --workload mcp --mcp-suite latency|serial``: the ticket service with realistic read latencies.

Generated agent tasks (:mod:`~forethought.bench.mcp.service`) are replayed by an ``mcp`` SDK client against the
seeded ticket server (:mod:`~forethought.bench.mcp.sim_server`), whose reads take a few hundred milliseconds
(``read_ms``, 30% jitter, seeded per call) and writes less, with model think time before every call. Two
suites: ``latency`` (a server that handles calls at once) and ``serial`` (the same server handling one call at
a time: a guess still running when the client's call comes makes that call wait). The tasks are split into two
folds by interleaving; the arms, their order rotated per task: ``direct``, ``proxy-cold`` (a store that starts
empty and learns across the fold), ``proxy-warm`` (the store first trained on the other fold, at the same
latencies) and ``oracle`` (the proxy told each next call: the most speculation after each result can hide).
Every answer and the service's final state (``sim://state``) are compared with direct's, and each arm reports
its share of the oracle's saving and, per tool, the calibration's decision (``tools``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from forethought._core.calls import ToolCall
from forethought.bench.mcp.oracle import oracle_factory, oracle_settings
from forethought.bench.mcp.runner import (
    ARMS,
    ORACLE,
    ArmTotals,
    Replay,
    _direct_session,
    _dump,
    _proxied,
    _results,
    add_runs,
    event_label,
    tool_report,
)
from forethought.bench.mcp.service import READS, ServiceShape, Step, make_tasks
from forethought.bench.mcp.sim_server import STATE_URI, server_command
from forethought.mcp.effects import McpPolicy, ProxySettings
from forethought.mcp.proxy import Proxy, ProxyConfig

SERVICE_ARMS = (*ARMS, ORACLE)
TRAIN_AT_ONCE = 4


@dataclass(frozen=True, slots=True)
class ServiceBenchConfig:
    tasks: int = 12
    """Tasks in the test fold (the training fold has as many)."""
    think_s: float = 0.3
    read_ms: float = 300.0
    write_ms: float = 120.0
    serial: bool = False
    seed: int = 0
    shape: ServiceShape = field(default_factory=ServiceShape)
    settings: ProxySettings = field(default_factory=ProxySettings)
    arms: tuple[str, ...] = SERVICE_ARMS
    python: str = ""


async def _replay(session: Any, task: Sequence[Step], think_s: float,
                  ready: Callable[[], Any] | None = None) -> tuple[float, list[str], str]:
    await session.list_tools()
    if ready is not None:
        await ready()
    answers = []
    start = time.monotonic()
    for step in task:
        if think_s:
            await asyncio.sleep(think_s)
        answers.append(_dump(await session.call_tool(step.tool, dict(step.arguments))))
    seconds = time.monotonic() - start
    state = await session.read_resource(STATE_URI)
    return seconds, answers, _dump(state)


def _proxy(command: Sequence[str], settings: ProxySettings, store: Path | None, oracle: Sequence[ToolCall] = ()
           ) -> Proxy:
    policy = McpPolicy(settings=oracle_settings(settings) if oracle else settings).trusting()
    return Proxy(ProxyConfig(command=tuple(command), policy=policy, store=store),
                 predictor_for=oracle_factory(oracle) if oracle else None)


async def _run_proxy(proxy: Proxy, task: Sequence[Step], think_s: float) -> Replay:
    events: Counter[str] = Counter()
    unsubscribe = proxy.runtime.telemetry.subscribe(lambda e: events.update([event_label(e)]))
    try:
        (seconds, answers, state), link = await _proxied(proxy, lambda s: _replay(s, task, think_s, proxy.ready))
    finally:
        unsubscribe()
    early = sum(1 for t in link.speculative_tools if t not in READS)
    events.update({f"proxy refused: {reason}": n for reason, n in proxy.refusals.items()})
    return Replay(seconds, tuple(answers), state, link.client_calls + link.speculative_calls + link.validator_calls,
                  early, proxy.finished.hits, dict(events), tool_report(proxy))


async def _train(tasks: Sequence[Sequence[Step]], command: Sequence[str], config: ServiceBenchConfig, store: Path,
                 progress: Callable[[str], None]) -> None:
    async def one(task: Sequence[Step]) -> None:
        proxy = _proxy(command, config.settings, store)
        try:
            await _proxied(proxy, lambda s: _replay(s, task, 0.0, proxy.ready))
        finally:
            proxy.close()

    for start in range(0, len(tasks), TRAIN_AT_ONCE):
        await asyncio.gather(*(one(t) for t in tasks[start:start + TRAIN_AT_ONCE]))
        progress(f"trained on {min(start + TRAIN_AT_ONCE, len(tasks))}/{len(tasks)} tasks")


async def service_bench(config: ServiceBenchConfig, progress: Callable[[str], None] = lambda _: None
                        ) -> dict[str, Any]:
    """Run the suite's arms on the test fold; returns the bench-style results."""
    import sys

    python = config.python or sys.executable
    tasks = make_tasks(config.shape, 2 * config.tasks, config.seed)
    train, test = tasks[0::2], tasks[1::2]
    command = server_command(python, config.read_ms, config.write_ms, config.serial, config.shape, config.seed)
    arms = tuple(a for a in SERVICE_ARMS if a == "direct" or a in config.arms)
    totals = {arm: ArmTotals() for arm in arms}
    with TemporaryDirectory(prefix="forethought-mcp-service-") as tmp:
        cold, warm = Path(tmp) / "cold.sqlite", Path(tmp) / "warm.sqlite"
        if "proxy-warm" in arms:
            await _train(train, command, config, warm, progress)
        for i, task in enumerate(test):
            order = arms[i % len(arms):] + arms[:i % len(arms)]
            runs: dict[str, Replay] = {}
            for arm in order:
                if arm == "direct":
                    async with _direct_session(command) as session:
                        seconds, answers, state = await _replay(session, task, config.think_s)
                    runs[arm] = Replay(seconds, tuple(answers), state, len(answers), 0, 0)
                    continue
                oracle = [ToolCall(s.tool, dict(s.arguments)) for s in task] if arm == ORACLE else ()
                store = {"proxy-cold": cold, "proxy-warm": warm}.get(arm)
                proxy = _proxy(command, config.settings, store, oracle)
                try:
                    runs[arm] = await _run_proxy(proxy, task, config.think_s)
                finally:
                    proxy.close()
            add_runs(totals, runs)
            progress(f"task {i + 1}/{len(test)}: " + ", ".join(f"{a} {runs[a].seconds:.2f}s" for a in arms))
    return _results(asdict(config) | {"shape": asdict(config.shape)}, totals, frozenset(READS))
