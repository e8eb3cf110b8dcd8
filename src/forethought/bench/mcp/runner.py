"""``forethought bench --workload mcp``: recorded BFCL traces replayed by an MCP client, direct vs proxy.

This is the ``--mcp-suite bfcl`` suite (the default); ``repo`` is :mod:`~forethought.bench.mcp.repo_bench`
(real filesystem and git servers on a generated repository), and ``both`` runs the two.

Each test trajectory (the ground truth of a BFCL multi-turn entry, one call per step) is replayed by an
``mcp`` SDK client with model think time before every call, against the entry's backends served as an MCP
server (:mod:`forethought.bench.workloads.mcp_bfcl`, tool latency about equal to think time). Three arms, run one
after another on every trajectory (their order rotated): ``direct`` (client -> server), ``proxy-cold`` (the
proxy with a store that starts empty and learns online across the fold), ``proxy-warm`` (the proxy with a
store trained by replaying the other fold through it first). The server is trusted and annotates as
read-only exactly the functions that never changed state in BFCL's ground truth.

Per arm: wall time of the replays (from the first call to the last answer; server start-up excluded), time
saved against direct, upstream ``tools/call`` requests, early runs of non-read tools, and whether every
answer and the final backend state equal the direct arm's. ``time_saved_bound`` is what a proxy that
guessed every read-only call could save: the share of read-only calls times latency / (latency + think).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio

from forethought._core.calls import ToolCall
from forethought.bench.mcp.oracle import oracle_factory, oracle_settings
from forethought.bench.workloads.bfcl import BfclEntry, load_bfcl, split_interleaved, to_trajectory
from forethought.bench.workloads.bfcl_workload import spread
from forethought.bench.workloads.latency import LatencyModel, call_key_text
from forethought.bench.workloads.mcp_bfcl import STATE_URI, measured_read_only, server_command
from forethought.mcp.effects import McpPolicy, ProxySettings
from forethought.mcp.proxy import Proxy, ProxyConfig
from forethought.predictors.trajectory import Trajectory
from forethought.telemetry import Event, EventKind

ARMS = ("direct", "proxy-cold", "proxy-warm")
"""The arms every MCP suite runs."""
ORACLE = "oracle"
BFCL_ARMS = (*ARMS, ORACLE)
"""The BFCL suite's arms: the three, and the oracle (the proxy told the true next call, :mod:`oracle`)."""
TRAIN_AT_ONCE = 4
"""Training replays run at once (the store is shared by concurrent proxies, as it is in use)."""
TRAIN_FOLD = 100
"""Entries in one fold of the interleaved BFCL split (the most the warm store can be trained on)."""


@dataclass(frozen=True, slots=True)
class McpBenchConfig:
    trajectories: int = 12
    training: int = 24
    think_s: float = 0.25
    latency_s: float = 0.25
    seed: int = 0
    python: str = sys.executable
    settings: ProxySettings = field(default_factory=ProxySettings)
    """The proxies' own knobs (guesses per result, confidence floor, upstream bound)."""
    arms: tuple[str, ...] = BFCL_ARMS
    """The arms to run (``direct`` always runs: the others are measured against it)."""
    oracle_depth: int = 1
    """How many of the true next calls the oracle proposes after each result."""
    in_process: bool = False
    """Run the proxies' pattern predictor on their event loop (``--in-process``), not in worker processes."""

    def __post_init__(self) -> None:
        unknown = set(self.arms) - set(BFCL_ARMS)
        if unknown:
            raise ValueError(f"unknown MCP bench arms: {sorted(unknown)}")


@dataclass(frozen=True, slots=True)
class Replay:
    """One trajectory replayed in one arm."""

    seconds: float
    answers: tuple[str, ...]
    state: str
    upstream_calls: int
    early_non_read: int
    hits: int
    speculation: Mapping[str, int] = field(default_factory=dict)
    """What happened to the guesses: the runtime's events by kind (rejections by reason) and the proxy's
    own refusals."""
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per tool: counts and the calibration's decision (:func:`tool_report`)."""


@dataclass(slots=True)
class ArmTotals:
    seconds: float = 0.0
    upstream_calls: int = 0
    early_non_read: int = 0
    hits: int = 0
    calls: int = 0
    identical: bool = True
    per_trajectory_saved: list[float] = field(default_factory=list)
    speculation: Counter[str] = field(default_factory=Counter)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)


def _dump(result: Any) -> str:
    return json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)


async def _replay(session: Any, trajectory: Trajectory, think_s: float,
                  ready: Callable[[], Awaitable[None]] | None = None) -> tuple[float, list[str], str]:
    await session.list_tools()
    if ready is not None:
        await ready()  # the proxy's predictor worker has started (untimed, as the server's start is)
    answers: list[str] = []
    start = time.monotonic()
    for turn in trajectory.turns:
        for step in turn.steps:
            await asyncio.sleep(think_s)  # the model thinking before it emits the call
            for call in step:
                answers.append(_dump(await session.call_tool(call.name, dict(call.arguments))))
    seconds = time.monotonic() - start
    state = await session.read_resource(STATE_URI)
    return seconds, answers, _dump(state)


def _null_log() -> TextIO:
    """Where a directly started server's stderr goes (the bench's output stays readable)."""
    return open(os.devnull, "w")


@contextlib.asynccontextmanager
async def _direct_session(command: Sequence[str]) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(os.environ))  # as the proxy
    with _null_log() as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def _proxied(proxy: Proxy, job: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Run ``job(session)`` through ``proxy``; returns its value and the session's upstream link."""
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage

    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    try:
        async with ClientSession(from_proxy, to_proxy) as session:
            await session.initialize()
            value = await job(session)
    finally:
        to_proxy.close()
        await serving
    return value, proxy.links[-1]


async def _run_arm(arm: str, trajectory: Trajectory, command: Sequence[str], proxy: Proxy | None,
                   read_only: frozenset[str], think_s: float) -> Replay:
    if proxy is None:
        async with _direct_session(command) as session:
            seconds, answers, state = await _replay(session, trajectory, think_s)
        calls = len(answers)
        return Replay(seconds, tuple(answers), state, calls, 0, 0)
    events: Counter[str] = Counter()
    unsubscribe = proxy.runtime.telemetry.subscribe(lambda e: events.update([event_label(e)]))
    try:
        (seconds, answers, state), link = await _proxied(proxy, lambda s: _replay(s, trajectory, think_s,
                                                                                    proxy.ready))
    finally:
        unsubscribe()
    early_non_read = sum(1 for t in link.speculative_tools if t not in read_only)
    hits = proxy.finished.hits
    events.update({f"proxy refused: {reason}": n for reason, n in proxy.refusals.items()})
    return Replay(seconds, tuple(answers), state, link.client_calls + link.speculative_calls, early_non_read, hits,
                  dict(events), tool_report(proxy))


def tool_report(proxy: Proxy) -> dict[str, dict[str, Any]]:
    """Per tool, what the proxy's finished sessions did (calls, hits, upstream calls, guesses priced out) and
    the calibration's latest decision with the runtime it priced."""
    tools: dict[str, dict[str, Any]] = {
        name: {"calls": t.calls, "hits": t.hits, "upstream_calls": t.upstream_calls, "priced_out": t.priced_out}
        for name, t in proxy.finished.tools.items()}
    for name, verdict in proxy.calibrator.verdicts.items():
        tools.setdefault(name, {})["decision"] = verdict.reason
        tools[name]["run_ms"] = round(1000 * verdict.run_s, 1)
    return tools


def merge_tools(into: dict[str, dict[str, Any]], tools: Mapping[str, Mapping[str, Any]]) -> None:
    """Add one run's :func:`tool_report` to an arm's (counts summed, the latest decision kept)."""
    for name, t in tools.items():
        mine = into.setdefault(name, {})
        for key, value in t.items():
            if isinstance(value, int) and not isinstance(value, bool):
                mine[key] = mine.get(key, 0) + value
            else:
                mine[key] = value


def add_runs(totals: dict[str, ArmTotals], runs: Mapping[str, Any]) -> None:
    """Add one task's runs (arm -> its replay: seconds, upstream and early calls, hits, answers, final state,
    speculation counts, per-tool stats) to the arms' totals; ``runs["direct"]`` is what the others must equal."""
    base = runs["direct"]
    for arm, run in runs.items():
        t = totals[arm]
        t.seconds += run.seconds
        t.upstream_calls += run.upstream_calls
        t.early_non_read += run.early_non_read
        t.hits += run.hits
        t.calls += len(run.answers)
        t.identical &= run.answers == base.answers and run.state == base.state
        t.per_trajectory_saved.append(1 - run.seconds / base.seconds if base.seconds else 0.0)
        t.speculation.update(run.speculation)
        merge_tools(t.tools, run.tools)


def event_label(event: Event) -> str:
    """An event's kind, and for a rejection its reason without the figures (``rejected: worth``)."""
    if event.kind is not EventKind.REJECTED:
        return str(event.kind.value)
    reason = str(re.split(r"[:0-9(]", event.detail, maxsplit=1)[0]).strip()
    return f"rejected: {reason}" if reason else "rejected"


def _proxy(store: Path, command: Sequence[str], settings: ProxySettings, in_process: bool = False) -> Proxy:
    return Proxy(ProxyConfig(command=tuple(command), policy=McpPolicy(settings=settings).trusting(), store=store,
                             in_process=in_process))


async def _train(entries: Sequence[BfclEntry], store: Path, config: McpBenchConfig, read_only: frozenset[str],
                 progress: Callable[[str], None]) -> None:
    """Warm ``store``: replay the training fold through the proxy (no think time, the same tool latency), a few
    trajectories at a time (each through its own proxy on the shared store, as concurrent clients would)."""

    async def one(entry: BfclEntry) -> None:  # at the same latencies: the store learns the tools' runtimes too
        command = server_command(config.python, entry, config.latency_s, config.seed, sorted(read_only))
        proxy = _proxy(store, command, config.settings, config.in_process)
        trajectory = to_trajectory(entry)
        try:
            await _proxied(proxy, lambda session: _replay(session, trajectory, 0.0, proxy.ready))
        finally:
            proxy.close()

    for start in range(0, len(entries), TRAIN_AT_ONCE):
        await asyncio.gather(*(one(e) for e in entries[start:start + TRAIN_AT_ONCE]))
        progress(f"trained on {min(start + TRAIN_AT_ONCE, len(entries))}/{len(entries)} trajectories")


async def mcp_bench(config: McpBenchConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the arms on the test fold; returns the ``bench``-style results."""
    entries = load_bfcl()
    read_only = measured_read_only(entries)
    train, test = split_interleaved(entries)
    test = spread(test, config.trajectories)
    train = spread(train, config.training)
    arms = tuple(a for a in BFCL_ARMS if a == "direct" or a in config.arms)
    totals = {arm: ArmTotals() for arm in arms}
    latency = LatencyModel(mean_s=config.latency_s, seed=config.seed)
    with tempfile.TemporaryDirectory(prefix="forethought-mcp-bench-") as tmp:
        cold, warm = Path(tmp) / "cold.sqlite", Path(tmp) / "warm.sqlite"
        if "proxy-warm" in arms:
            await _train(train, warm, config, read_only, progress)
        for i, entry in enumerate(test):
            trajectory = to_trajectory(entry)
            command = server_command(config.python, entry, config.latency_s, config.seed, sorted(read_only))
            order = arms[i % len(arms):] + arms[:i % len(arms)]
            runs: dict[str, Replay] = {}
            for arm in order:
                proxy = _arm_proxy(arm, cold, warm, command, config, trajectory)
                try:
                    runs[arm] = await _run_arm(arm, trajectory, command, proxy, read_only, config.think_s)
                finally:
                    if proxy is not None:
                        proxy.close()
            add_runs(totals, runs)
            progress(f"{entry.id}: " + ", ".join(f"{a} {runs[a].seconds:.2f}s" for a in arms))
    calls = [c for e in test for step in e.ground_truth for c in step]
    share = sum(c.name in read_only for c in calls) / len(calls) if calls else 0.0
    per_call = config.latency_s + config.think_s
    bound = share * config.latency_s / per_call if per_call else 0.0
    timing = _timing(calls, read_only, latency, config.think_s, totals["direct"].seconds)
    return _results(asdict(config), totals, read_only) | {"read_only_call_share": round(share, 4),
                                                          "time_saved_bound": round(bound, 4), "timing": timing}


def _arm_proxy(arm: str, cold: Path, warm: Path, command: Sequence[str], config: McpBenchConfig,
               trajectory: Trajectory) -> Proxy | None:
    """The proxy of one arm for one trajectory (``None`` for direct)."""
    if arm == "direct":
        return None
    if arm == ORACLE:
        calls = [call for turn in trajectory.turns for step in turn.steps for call in step]
        return Proxy(ProxyConfig(command=tuple(command),
                                 policy=McpPolicy(settings=oracle_settings(config.settings)).trusting()),
                     predictor_for=oracle_factory(calls, config.oracle_depth))
    return _proxy(cold if arm == "proxy-cold" else warm, command, config.settings, config.in_process)


def _timing(calls: Sequence[ToolCall], read_only: frozenset[str], latency: LatencyModel, think_s: float,
            direct_s: float) -> dict[str, Any]:
    """Think time against tool latency on the test calls, and the time a guess after each result could hide:
    ``min(latency, think)`` of every read-only call (the server draws each call's latency from the same seeded
    model, so these are the latencies the direct arm waited)."""
    seen: dict[str, int] = {}
    reads: list[float] = []
    writes: list[float] = []
    for call in calls:
        key = call_key_text(dict(call.arguments))
        n = seen[call.name + key] = seen.get(call.name + key, -1) + 1
        (reads if call.name in read_only else writes).append(latency.delay(call.name, key, n))
    hideable = sum(min(r, think_s) for r in reads)
    return {"think_s": think_s, "calls": len(calls), "read_calls": len(reads),
            "read_latency_s": round(sum(reads), 3), "write_latency_s": round(sum(writes), 3),
            "read_latency_mean_s": round(statistics.fmean(reads), 4) if reads else 0.0,
            "hideable_s": round(hideable, 3),
            "hideable_share": round(hideable / direct_s, 4) if direct_s else 0.0}


def _results(params: dict[str, Any], totals: dict[str, ArmTotals], read_only: frozenset[str]) -> dict[str, Any]:
    direct = totals["direct"]
    arms: dict[str, Any] = {}
    for arm, t in totals.items():
        saved = t.per_trajectory_saved
        arms[arm] = {
            "seconds": round(t.seconds, 3),
            "time_saved": round(1 - t.seconds / direct.seconds, 4) if direct.seconds else 0.0,
            "time_saved_median": round(statistics.median(saved), 4) if saved else 0.0,
            "time_saved_iqr": [round(q, 4) for q in _quartiles(saved)],
            "calls": t.calls,
            "hits": t.hits,
            "upstream_calls": t.upstream_calls,
            "upstream_ratio": round(t.upstream_calls / direct.upstream_calls, 3) if direct.upstream_calls else 0.0,
            "early_non_read_runs": t.early_non_read,
            "identical_to_direct": t.identical,
            "speculation": dict(sorted(t.speculation.items())),
        }
        if t.tools:
            arms[arm]["tools"] = dict(sorted(t.tools.items()))
    oracle = arms.get(ORACLE, {}).get("time_saved")
    for r in arms.values():
        r["oracle_share"] = round(r["time_saved"] / oracle, 4) if oracle else None
    return {"params": params | {"read_only_tools": sorted(read_only)}, "arms": arms,
            "equivalent": all(t.identical for t in totals.values())}


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (0.0, 0.0)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]
