"""Multi-agent benchmark: serial, client-side and client+engine-side arms with M agents on one engine.

For each agent count M, M concurrent agents each run T BFCL tasks (trajectories spread over the test fold)
against one simulated engine with K batch slots, batch-dependent decode and a bounded prefix cache
(:mod:`forethought.bench.engine_sim.engine`). Arms:

* ``serial``: no speculation; every tool call ends the response and the client sends the conversation back;
* ``client-side``: the speculator model (Nichols et al., client side) plus streaming early dispatch;
* ``client-paced``: client-side, with returning requests admitted by the engine's measured time to first
  token (:class:`~forethought.agent.pacing.ReturnPacer`, one shared by all agents);
* ``engine-side``: the same, through the tool-cache gateway (:mod:`forethought.gateway.app`): finished
  speculations are posted, and a matching call continues inside the response instead of a round trip.

Every arm reaches the engine through the gateway: for clients that never post it is a transparent proxy
(it never waits for them), so the hop a proxy adds — an artifact of running the cache outside the engine —
is paid alike and the arms differ only in speculation and posting. The speculator talks to the engine
directly. Every client request (main model, speculator, post to the gateway) pays the API overhead ``o`` on
the client side; a server-side continuation does not. The engine and the gateway run in child processes by
default, so their timing does not depend on the agents' event loop. Per (M, arm) the result holds aggregate
throughput (main-model tokens per second of *model time*: wall time divided by ``time_scale``), time saved
per agent against serial, prefill tokens computed and recomputed, slot occupancy, gateway continuations,
the equivalence verdict (tool outputs and final backend states equal serial's, task by task), and the
measuring process's health (CPU load per process, event-loop lag). Beside each measurement the
multi-agent simulator of :mod:`forethought.bench.perfmodel` gives its prediction for the measured workload shape
(``model``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from rich.console import Console
from rich.table import Table

from forethought._core.runtime import Runtime
from forethought.agent.loop import Agent
from forethought.agent.pacing import ReturnPacer
from forethought.bench.engine_sim.cache import count_tokens
from forethought.bench.engine_sim.engine import TimingConfig
from forethought.bench.engine_sim.model_server import (
    MAIN_MODEL,
    SPECULATOR_MODEL,
    ModelServer,
    SpeculatorConfig,
    create_model_server,
)
from forethought.bench.metrics import equivalent
from forethought.bench.perfmodel import Arm as SimArm
from forethought.bench.perfmodel import SimConfig, simulate_arms
from forethought.bench.perfmodel import time_saved as sim_time_saved
from forethought.bench.report import document, write_json
from forethought.bench.runner import TrajectoryRun, converse
from forethought.bench.workloads.bfcl_workload import BfclWorkload
from forethought.bench.workloads.latency import LatencyModel
from forethought.errors import ForethoughtError
from forethought.gateway.app import ADMIN_TOKEN_HEADER, Gateway, GatewayConfig, create_gateway
from forethought.llm.chat import LLMClient, OpenAIChatClient
from forethought.llm.events import LLMEvent
from forethought.llm.tool_cache import CachedOutput, CacheTarget, HttpToolCachePoster
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.trajectory import Trajectory
from forethought.serve.http import serve_in_process
from forethought.serve.subprocess_server import serve_in_subprocess

if TYPE_CHECKING:  # bench.main may import this module: no import cycle at run time
    from forethought.bench.main import BenchConfig

ARMS = ("serial", "client-side", "client-paced", "engine-side")
MODEL_SOURCE = "model"
PAPER_GAIN_32_AGENTS_TOKENS_PER_S = 196.0
PAPER_ENGINE_OVER_CLIENT_POINTS = (2.0, 3.0)
"""Nichols et al. (arXiv 2512.15834): +196 tok/s at 32 agents; engine-side 2-3 points over client-side."""
LAG_PROBE_S = 0.005


@dataclass(frozen=True, slots=True)
class MultiAgentParams:
    """Engine and client parameters of the multi-agent run (seconds before time scaling).

    ``time_scale`` replaces the bench config's for this run (``None``: keep it). At 0.25 and below, the
    event-loop lag of 32 agents' HTTP traffic in one Python process (``loop_lag_ms`` in the result) moved
    the 32-agent figures by several points from run to run on 2 cores; at 0.5 three runs agreed within
    2 points. The default 0.4 keeps a full 1/8/32 run under 3 minutes.
    """

    slots: int = 32
    batch_slowdown: float = 0.02
    cache_tokens: int = 131_072
    chunk_tokens: int = 8
    api_overhead_s: float = 0.1
    post_wait_s: float = 0.05
    samples: int = 1
    time_scale: float | None = 0.4
    processes: bool = True
    """Run the engine and the gateway in child processes (off the agents' event loop and core)."""

    def __post_init__(self) -> None:
        if self.slots < 1 or self.cache_tokens < 0 or self.chunk_tokens < 1 or self.samples < 1:
            raise ValueError("slots, chunk_tokens and samples must be >= 1, cache_tokens >= 0")
        if min(self.batch_slowdown, self.api_overhead_s, self.post_wait_s) < 0:
            raise ValueError("batch_slowdown, api_overhead_s and post_wait_s must be >= 0")
        if self.time_scale is not None and self.time_scale <= 0:
            raise ValueError("time_scale must be > 0 (or None to keep the bench config's)")


def engine_timing(config: BenchConfig, params: MultiAgentParams) -> tuple[TimingConfig, TimingConfig]:
    """Timing of the main model (the engine under test) and of the speculator stand-in."""
    main = TimingConfig(ttft_s=config.ttft_s, prefill_s_per_token=config.prefill_s_per_token,
                        decode_tokens_per_s=config.decode_tokens_per_s, reasoning_tokens=config.reasoning_tokens,
                        max_concurrency=params.slots, time_scale=config.time_scale,
                        batch_slowdown=params.batch_slowdown, cache_tokens=params.cache_tokens,
                        chunk_tokens=params.chunk_tokens)
    spec = TimingConfig(ttft_s=config.speculator_ttft_s, prefill_s_per_token=config.prefill_s_per_token / 4,
                        decode_tokens_per_s=config.speculator_decode_tokens_per_s, reasoning_tokens=0,
                        time_scale=config.time_scale, chunk_tokens=params.chunk_tokens)
    return main, spec


class OverheadClient:
    """An :class:`LLMClient` that waits ``overhead_s`` before each request (client-side API overhead)."""

    def __init__(self, inner: LLMClient, overhead_s: float) -> None:
        self.inner = inner
        self.overhead_s = overhead_s

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        if self.overhead_s > 0:
            await asyncio.sleep(self.overhead_s)
        async for event in self.inner.stream(model, messages, tools, **extra):
            yield event


class OverheadPoster:
    """A :class:`~forethought.llm.tool_cache.ToolCachePoster` paying ``overhead_s`` per post."""

    def __init__(self, inner: HttpToolCachePoster, overhead_s: float) -> None:
        self.inner = inner
        self.overhead_s = overhead_s

    async def post(self, target: CacheTarget, entries: Sequence[CachedOutput]) -> int:
        if self.overhead_s > 0:
            await asyncio.sleep(self.overhead_s)
        return await self.inner.post(target, entries)

    async def aclose(self) -> None:
        await self.inner.aclose()


class LoopLag:
    """Measures how late this event loop wakes a sleeping task (the agents' process health)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_PROBE_S)
            self.samples.append(max(0.0, loop.time() - before - LAG_PROBE_S))

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._probe())
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def summary_ms(self) -> dict[str, float]:
        ordered = sorted(self.samples) or [0.0]
        return {"mean": 1000 * statistics.fmean(ordered), "p95": 1000 * ordered[int(0.95 * (len(ordered) - 1))]}


@dataclass(frozen=True, slots=True)
class ArmOutcome:
    """One (M, arm) run: its wall clock, per-agent times, task runs and server-side counters."""

    arm: str
    agents: int
    makespan_s: float
    agent_s: tuple[float, ...]
    runs: tuple[tuple[int, TrajectoryRun], ...]
    engine: Mapping[str, Any]
    gateway: Mapping[str, Any] = field(default_factory=dict)
    posts: int = 0
    served_calls: int = 0
    cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """CPU seconds of the agents', the engine's and the gateway's processes (one figure three times when the
    servers run in-process)."""
    loop_lag_ms: Mapping[str, float] = field(default_factory=dict)
    speculator_s: float = 0.0
    """Mean time from a speculator request to its first closed call (g), wall seconds."""
    pacing: Mapping[str, float] = field(default_factory=dict)
    """client-paced: returns held, seconds they waited, the pacer's final limit."""


@dataclass(slots=True)
class _Servers:
    """The engine and gateway under test, reached over HTTP (in this process or in child processes)."""

    engine_url: str
    gateway_url: str
    control: httpx2.AsyncClient
    admin_token: str
    """The gateway's admin token (its counters are reset only with it)."""

    async def reset(self) -> tuple[float, float]:
        """Zero both servers' counters; returns their processes' CPU seconds so far."""
        (await self.control.post(self.engine_url + "/reset")).raise_for_status()
        (await self.control.post(self.gateway_url + "/gateway/reset",
                                 headers={ADMIN_TOKEN_HEADER: self.admin_token})).raise_for_status()
        engine, gateway = await self.stats()
        return float(engine["process_cpu_s"]), float(gateway["process_cpu_s"])

    async def stats(self) -> tuple[dict[str, Any], dict[str, Any]]:
        engine = await self.control.get(self.engine_url + "/stats")
        gateway = await self.control.get(self.gateway_url + "/gateway/stats")
        engine.raise_for_status()
        gateway.raise_for_status()
        return engine.json(), gateway.json()


@contextlib.asynccontextmanager
async def _serve(trajectories: Sequence[Trajectory], main: TimingConfig, speculator: SpeculatorConfig,
                 gateway: GatewayConfig, processes: bool) -> AsyncIterator[_Servers]:
    token = gateway.admin_token or secrets.token_hex(16)
    gateway = replace(gateway, admin_token=token)
    async with httpx2.AsyncClient(timeout=30.0) as control:
        if processes:
            async with serve_in_subprocess(create_model_server, list(trajectories), main, speculator) as engine_url, \
                    serve_in_subprocess(create_gateway, engine_url + "/v1", gateway) as gateway_url:
                yield _Servers(engine_url, gateway_url, control, token)
            return
        engine = ModelServer(trajectories, main, speculator)
        async with serve_in_process(engine.app) as engine_url:
            proxy = Gateway(engine_url + "/v1", gateway)
            try:
                async with serve_in_process(proxy.app) as gateway_url:
                    yield _Servers(engine_url, gateway_url, control, token)
            finally:
                await proxy.aclose()


def tasks_for(trajectories: Sequence[Trajectory], agents: int, per_agent: int) -> list[tuple[int, Trajectory]]:
    """``agents * per_agent`` (repeat, trajectory) tasks spread evenly over ``trajectories`` (cycled if short)."""
    count = agents * per_agent
    n = len(trajectories)
    if count <= n:
        step = n / count
        return [(0, trajectories[int(i * step)]) for i in range(count)]
    return [(i // n, trajectories[i % n]) for i in range(count)]


async def _run_task(arm: str, agents: int, repeat: int, trajectory: Trajectory, workload: BfclWorkload,
                    client: LLMClient, runtime: Runtime, speculator: ModelSpeculator | None,
                    latency: LatencyModel, poster: OverheadPoster | None,
                    pacer: ReturnPacer | None = None) -> tuple[TrajectoryRun, int, int]:
    """One task with one agent; never raises for a failed conversation (the error is recorded)."""
    session_tools = workload.session_tools(trajectory, latency)
    name = f"{arm}/{agents}/{trajectory.id}/{repeat}"
    agent = Agent(client, MAIN_MODEL, session_tools.tools, runtime, speculate=speculator is not None,
                  predictors=[speculator] if speculator is not None else (),
                  request_extra={"metadata": {"trajectory_id": trajectory.id, "conversation_id": name}},
                  session_id=name, engine_side=poster is not None, cache_poster=poster, pacer=pacer)
    run = await converse(arm, agent, trajectory, session_tools.fingerprint)
    return run, agent.engine_stats.posts, agent.engine_stats.served_calls


async def run_arm_agents(arm: str, agents: int, tasks: Sequence[tuple[int, Trajectory]], per_agent: int,
                         workload: BfclWorkload, servers: _Servers, config: BenchConfig,
                         params: MultiAgentParams) -> ArmOutcome:
    """M agents, each running its ``per_agent`` tasks one after another, all at once; one runtime."""
    if arm not in ARMS:
        raise ForethoughtError(f"unknown multi-agent arm {arm!r}; known: {', '.join(ARMS)}")
    engine_cpu, gateway_cpu = await servers.reset()
    overhead = params.api_overhead_s * config.time_scale
    main = (OpenAIChatClient.for_gateway(servers.gateway_url + "/v1") if arm == "engine-side"
            else OpenAIChatClient(servers.gateway_url + "/v1"))
    spec = OpenAIChatClient(servers.engine_url + "/v1")
    runtime = Runtime(policy=config.policy)
    latency = LatencyModel(mean_s=config.tool_latency_s, seed=config.seed, time_scale=config.time_scale)
    speculator = (ModelSpeculator(OverheadClient(spec, overhead), SPECULATOR_MODEL, samples=params.samples)
                  if arm != "serial" else None)
    poster = OverheadPoster(HttpToolCachePoster(), overhead) if arm == "engine-side" else None
    client = OverheadClient(main, overhead)
    pacer = ReturnPacer() if arm == "client-paced" else None

    async def agent_loop(index: int) -> tuple[float, list[tuple[int, TrajectoryRun]], int, int]:
        started = time.monotonic()
        out: list[tuple[int, TrajectoryRun]] = []
        posts = served = 0
        for repeat, trajectory in tasks[index * per_agent:(index + 1) * per_agent]:
            run, p, s = await _run_task(arm, agents, repeat, trajectory, workload, client, runtime, speculator,
                                        latency, poster, pacer)
            out.append((repeat, run))
            posts += p
            served += s
        return time.monotonic() - started, out, posts, served

    started = time.monotonic()
    cpu = time.process_time()
    try:
        with LoopLag() as lag:
            loops = await asyncio.gather(*(agent_loop(i) for i in range(agents)))
    finally:
        makespan = time.monotonic() - started
        cpu = time.process_time() - cpu
        runtime.close()
        await main.aclose()
        await spec.aclose()
        if poster is not None:
            await poster.aclose()
    engine_stats, gateway_stats = await servers.stats()
    cpu_s = (cpu, float(engine_stats["process_cpu_s"]) - engine_cpu,
             float(gateway_stats["process_cpu_s"]) - gateway_cpu)
    return ArmOutcome(arm, agents, makespan, tuple(t for t, _, _, _ in loops),
                      tuple(r for _, runs, _, _ in loops for r in runs), engine_stats["by_model"][MAIN_MODEL],
                      gateway_stats if arm == "engine-side" else {}, sum(p for _, _, p, _ in loops),
                      sum(s for _, _, _, s in loops), cpu_s, lag.summary_ms(),
                      speculator.stats.mean_first_close_s if speculator is not None else 0.0,
                      {"held": pacer.held, "waited_s": pacer.waited_s, "limit": pacer.limit} if pacer else {})


def summarize(outcome: ArmOutcome, serial: ArmOutcome, time_scale: float) -> dict[str, Any]:
    """The ``results.agents[M][ARM]`` entry: throughput, time saved, prefill, occupancy, equivalence."""
    model_s = outcome.makespan_s / time_scale if time_scale > 0 else outcome.makespan_s
    generated = int(outcome.engine["generated_tokens"])
    mean_agent = statistics.fmean(outcome.agent_s)
    serial_agent = statistics.fmean(serial.agent_s)
    by_task = {(rep, run.trajectory_id): run for rep, run in serial.runs}
    records = [rec for _, run in outcome.runs for rec in run.records]
    calls = sum(1 for rec in records if rec.outcome != "error")
    engine = outcome.engine
    return {
        "tokens_per_s": generated / model_s if model_s > 0 else 0.0,
        "time_saved": 1.0 - mean_agent / serial_agent if serial_agent > 0 else 0.0,
        "makespan_s": outcome.makespan_s,
        "mean_agent_s": mean_agent,
        "generated_tokens": generated,
        "prefill_tokens": int(engine["computed_tokens"]),
        "prefill_tokens_cached": int(engine["cached_tokens"]),
        "prefill_tokens_recomputed": int(engine["recomputed_tokens"]),
        "evicted_tokens": int(engine["evicted_tokens"]),
        "slot_occupancy": float(engine["slot_occupancy"]),
        "mean_running": float(engine["mean_running"]),
        "queue_wait_s": float(engine["queue_wait_s"]),
        "requests": int(engine["requests"]),
        "continuations": int(engine["continuations"]),
        "served_calls": outcome.served_calls,
        "posts": outcome.posts,
        "tool_calls": calls,
        "model_hits": sum(1 for rec in records if rec.outcome == "hit" and rec.source == MODEL_SOURCE),
        "alpha": (sum(1 for rec in records if rec.outcome == "hit" and rec.source == MODEL_SOURCE) / calls
                  if calls else 0.0),
        "hits": sum(run.stats.hits for _, run in outcome.runs),
        "misses": sum(run.stats.misses for _, run in outcome.runs),
        "errors": sum(1 for _, run in outcome.runs if run.error),
        "cpu_load": {name: cpu / outcome.makespan_s if outcome.makespan_s > 0 else 0.0
                     for name, cpu in zip(("agents", "engine", "gateway"), outcome.cpu_s, strict=True)},
        "loop_lag_ms": dict(outcome.loop_lag_ms),
        "pacing": dict(outcome.pacing),
        "equivalent": all(equivalent(by_task[(rep, run.trajectory_id)], run) for rep, run in outcome.runs),
    }


def modelled(outcomes: Mapping[str, ArmOutcome], config: BenchConfig, params: MultiAgentParams, per_agent: int,
             prompt_tokens: Mapping[str, int]) -> dict[str, Any]:
    """The perfmodel simulator's prediction for this run's measured workload shape and parameters.

    Turns per task = mean tool calls; decoded tokens per turn = the serial arm's generated tokens per call
    (answers folded in; the simulator has no answer-only generations); ``alpha`` = the client-side arm's
    speculator hit rate; ``g`` = its measured time to a first closed call.
    """
    serial, client = outcomes["serial"], outcomes["client-side"]
    runs = [run for _, run in serial.runs]
    calls = sum(len(run.records) for run in runs)
    outputs = [rec.output for run in runs for rec in run.records]
    call_texts = [json.dumps(dict(rec.call.arguments)) + rec.call.name for run in runs for rec in run.records]
    client_calls = [rec for _, run in client.runs for rec in run.records]
    if not calls or not client_calls:
        return {"error": "no tool calls to model"}
    call_tokens = max(1, round(statistics.fmean(count_tokens(t) for t in call_texts)))
    decoded = int(serial.engine["generated_tokens"]) / calls
    try:
        sim = SimConfig(
            agents=serial.agents, tasks_per_agent=per_agent, turns=max(1, round(calls / len(runs))),
            slots=params.slots, decode_tokens_per_s=config.decode_tokens_per_s, batch_slowdown=params.batch_slowdown,
            prefill_tokens_per_s=1.0 / config.prefill_s_per_token if config.prefill_s_per_token > 0 else 1e9,
            cache_tokens=params.cache_tokens or 10**9,
            prompt_tokens=int(statistics.median(prompt_tokens.get(run.trajectory_id, 0) for run in runs)),
            reasoning_tokens=max(0, round(decoded) - call_tokens), call_tokens=call_tokens,
            result_tokens=max(1, round(statistics.fmean(count_tokens(o) for o in outputs))),
            tool_s=config.tool_latency_s, tool_jitter=0.3,
            speculator_s=client.speculator_s / config.time_scale if config.time_scale > 0 else 0.0,
            alpha=sum(1 for rec in client_calls if rec.outcome == "hit" and rec.source == MODEL_SOURCE)
            / len(client_calls), api_overhead_s=params.api_overhead_s, seed=config.seed)
        results = simulate_arms(sim)
    except ValueError as exc:
        return {"error": str(exc)}
    base = results[SimArm.SERIAL]
    return {str(arm): {"tokens_per_s": r.tokens_per_s, "time_saved": sim_time_saved(r, base),
                       "prefill_tokens_recomputed": r.prefill_tokens_recomputed, "slot_occupancy": r.slot_occupancy}
            for arm, r in results.items()}


def _table(agents: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Table:
    table = Table(title="multi-agent throughput (model time)")
    for header in ("agents", "arm", "tok/s", "saved/agent", "prefill", "recomputed", "occupancy", "served",
                   "alpha", "equiv", "model tok/s", "model saved"):
        table.add_column(header, justify="right")
    for m, arms in agents.items():
        for arm, v in arms.items():
            model = v.get("model") or {}
            table.add_row(m, arm, f"{v['tokens_per_s']:.1f}", f"{v['time_saved']:.1%}", f"{v['prefill_tokens']:,}",
                          f"{v['prefill_tokens_recomputed']:,}", f"{v['slot_occupancy']:.2f}",
                          str(v["served_calls"]), f"{v['alpha']:.2f}", "yes" if v["equivalent"] else "NO",
                          f"{model.get('tokens_per_s', 0.0):.1f}", f"{model.get('time_saved', 0.0):.1%}")
    return table


async def run_multi_agent(config: BenchConfig, agent_counts: Sequence[int] = (1, 8, 32), tasks_per_agent: int = 2,
                          params: MultiAgentParams | None = None, console: Console | None = None,
                          json_path: str | Path | None = None) -> dict[str, Any]:
    """``forethought bench --agents 1,8,32``: every arm at every agent count; returns the JSON document.

    ``results.agents[M][ARM] = {"tokens_per_s", "time_saved", ...}``; ``results.equivalent`` is true when
    every arm equals serial task by task; ``results.engine`` holds every timing parameter used.
    """
    params = params or MultiAgentParams()
    if params.time_scale is not None:
        config = replace(config, time_scale=params.time_scale)
    if config.workload != "bfcl":
        raise ForethoughtError("the multi-agent benchmark runs on the bfcl workload")
    if not agent_counts or min(agent_counts) < 1 or tasks_per_agent < 1:
        raise ForethoughtError("agent counts and tasks per agent must be >= 1")
    started = time.monotonic()
    workload = BfclWorkload(count=0, grouping="turn" if config.grouping == "turn" else "step")
    trajectories = list(workload.trajectories())
    prompt_tokens = {t.id: count_tokens(json.dumps(t.tools, separators=(",", ":"))) for t in trajectories}
    main, spec = engine_timing(config, params)
    speculator = SpeculatorConfig(alpha=config.alpha, timing=spec, seed=config.seed)
    gateway_config = GatewayConfig(post_wait_s=params.post_wait_s * config.time_scale)
    agents_out: dict[str, dict[str, Any]] = {}
    async with _serve(trajectories, main, speculator, gateway_config, params.processes) as servers:
        for m in agent_counts:
            tasks = tasks_for(trajectories, m, tasks_per_agent)
            outcomes: dict[str, ArmOutcome] = {}
            for arm in ARMS:
                if console is not None:
                    console.print(f"[dim]{m} agents x {tasks_per_agent} tasks: {arm}[/dim]")
                outcomes[arm] = await run_arm_agents(arm, m, tasks, tasks_per_agent, workload, servers, config,
                                                     params)
            model = modelled(outcomes, config, params, tasks_per_agent, prompt_tokens)
            agents_out[str(m)] = {arm: {**summarize(o, outcomes["serial"], config.time_scale), "model": model.get(arm)}
                                  for arm, o in outcomes.items()}
    equivalent_all = all(v["equivalent"] for arms in agents_out.values() for v in arms.values())
    results = {
        "agents": agents_out,
        "equivalent": equivalent_all,
        "tasks_per_agent": tasks_per_agent,
        "engine": {"main": asdict(main), "speculator": asdict(spec), **asdict(params),
                   "gateway_post_wait_s": gateway_config.post_wait_s, "tool_latency_s": config.tool_latency_s,
                   "alpha": config.alpha},
        "paper": {"tokens_per_s_gain_32_agents": PAPER_GAIN_32_AGENTS_TOKENS_PER_S,
                  "engine_over_client_points": list(PAPER_ENGINE_OVER_CLIENT_POINTS)},
        "elapsed_s": time.monotonic() - started,
    }
    doc = document("bench", {**config.params(), "agent_counts": list(agent_counts),
                             "tasks_per_agent": tasks_per_agent, **asdict(params)}, results)
    if json_path is not None:
        write_json(json_path, doc)
    if console is not None:
        console.print(_table(agents_out))
        console.print(f"equivalence with serial: {'[green]OK[/green]' if equivalent_all else '[red]DIFFERS[/red]'}"
                      f"   time scale {config.time_scale:g}   elapsed {results['elapsed_s']:.0f} s")
    return doc


__all__ = ["ARMS", "ArmOutcome", "LoopLag", "MultiAgentParams", "OverheadClient", "OverheadPoster", "engine_timing",
           "modelled", "run_arm_agents", "run_multi_agent", "summarize", "tasks_for"]
