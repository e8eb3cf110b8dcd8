"""``forethought bench --engine vllm``: the multi-agent arms against a real vLLM serving a tiny random model.

The engine is real (vLLM's CPU build, :mod:`forethought.engines.vllm`): tokenization, chat template,
prefill, continuous batching, the prefix cache and grammar-constrained decoding. The model is a 1.5M-parameter
random Llama on CPU, made to replay BFCL trajectories by the replay proxy (:mod:`forethought.bench.vllm.replay`:
every call pinned and checked; parallel steps split into one call per step; turns cut to ``max_turns``). So
the mechanisms are real and the ratios are not a GPU's serving a large model.

Per agent count M the arms run over the same tasks (:func:`~forethought.bench.multi_agent.tasks_for`), in an
order rotated per repeat, each through the multi-agent runner of :mod:`forethought.bench.multi_agent`:

* ``serial`` — no speculation; main model through the gateway (a transparent proxy for it);
* ``client-side`` — the speculator stand-in (the simulated engine's speculator model, its own process) and
  streaming early dispatch; the main model through the gateway;
* ``engine-side`` — the same speculations posted to forethought's gateway (its own process) in front of
  the replay proxy and vLLM: a matching call continues inside the response;
* ``engine-plugin`` — the same, through the endpoint plugin's own chat endpoint (:mod:`forethought.engines.vllm.chat`)
  inside vLLM's own API server: no gateway process, the cache route on vLLM's port, and a matching call continues
  the response inside the engine, on the same request (its KV cache kept; only the tool result's tokens prefilled);
* ``engine-relay`` (opt-in, ``VllmBenchParams.arms``) — the plugin's relay (the gateway mounted in vLLM's server):
  its continuation is a new request that the prefix cache serves.

Calls are pinned by forced tokens (:mod:`forethought.bench.vllm.forced`: the call's canonical tokens as the chat
template renders it), in every arm alike, so a continuation inside the engine holds token for token the
conversation a new request would render; the plugin's endpoint asks the replay proxy for each segment's pinning.

Before each arm vLLM's prefix cache is emptied (``POST /reset_prefix_cache``, vLLM's dev mode), so every arm
starts cold. Figures per (M, arm): wall time, mean agent time and time saved against serial, generated tokens per second
of wall time, and vLLM's own counters (``/metrics``, differences around the arm): prompt tokens, prompt tokens
computed (after the prefix cache) and cached, generated tokens, requests, vLLM's FLOP estimate
(``--enable-mfu-metrics``), and for the plugin's endpoint the tokens it appended to live requests: vLLM's prompt
counters count a request's first prefill only, so ``prompt_tokens_computed_all`` adds them. Equivalence is
checked task by task against serial (tool outputs and final backend states), and every arm must finish with no
conversation error and no replay mismatch, else the run fails loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from rich.console import Console
from rich.table import Table

from forethought.bench.engine_sim.engine import TimingConfig
from forethought.bench.engine_sim.model_server import SpeculatorConfig, create_model_server
from forethought.bench.metrics import equivalent
from forethought.bench.multi_agent import ArmOutcome, MultiAgentParams, _Servers, run_arm_agents, tasks_for
from forethought.bench.report import document, write_json
from forethought.bench.vllm import metrics
from forethought.bench.vllm.pin import single_call_steps
from forethought.bench.vllm.replay import create_replay_proxy
from forethought.bench.vllm.server import MODEL_NAME, VllmConfig, VllmServer, build_model, free_port, locate
from forethought.bench.workloads.bfcl_workload import BfclWorkload
from forethought.engines.vllm.plugin import (
    ADMIN_TOKEN_ENV,
    ENGINE_PREFIX,
    PLUGIN_NAME,
    POST_WAIT_ENV,
    PREFIX,
    REPLAY_ENV,
    UPSTREAM_ENV,
)
from forethought.errors import ForethoughtError
from forethought.gateway.app import GatewayConfig, create_gateway
from forethought.predictors.trajectory import Trajectory
from forethought.serve.subprocess_server import serve_in_subprocess

if TYPE_CHECKING:
    from forethought.bench.main import BenchConfig

ARMS = ("serial", "client-side", "engine-side", "engine-plugin")
ALL_ARMS = (*ARMS, "engine-relay")
MFU_FLAG = "--enable-mfu-metrics"
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
"""Enables vLLM's ``POST /reset_prefix_cache``: each arm starts with an empty prefix cache (else the first arm
pays the prefill of every shared prompt prefix and the others find it cached)."""
CPU_CAVEAT = ("real vLLM 0.32 (CPU build) on 2 shared cores serving a 1.5M-parameter random-weight model: the "
              "mechanisms are real, the ratios are not a GPU serving gpt-oss-120b")


@dataclass(frozen=True, slots=True)
class VllmBenchParams:
    """Shape of the run (wall seconds: nothing is scaled on a real engine except the tools' latency)."""

    max_turns: int = 2
    repeats: int = 1
    api_overhead_s: float = 0.05
    post_wait_s: float = 0.05
    samples: int = 1
    speculator_ttft_s: float = 0.08
    speculator_decode_tokens_per_s: float = 250.0
    arms: tuple[str, ...] = ARMS

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.repeats < 1 or self.samples < 1:
            raise ValueError("max_turns, repeats and samples must be >= 1")
        if "serial" not in self.arms or not set(self.arms) <= set(ALL_ARMS):
            raise ValueError(f"arms must include serial and be among {', '.join(ALL_ARMS)}")
        if min(self.api_overhead_s, self.post_wait_s) < 0:
            raise ValueError("api_overhead_s and post_wait_s must be >= 0")


def replay_trajectories(workload: BfclWorkload, max_turns: int) -> list[Trajectory]:
    """The workload's trajectories, one call per step, cut to their first ``max_turns`` turns."""
    return [replace(single_call_steps(t), turns=t.turns[:max_turns]) for t in workload.trajectories()]


@dataclass(frozen=True, slots=True)
class _Stack:
    speculator_url: str
    gateway_url: str
    plugin_url: str
    engine_chat_url: str
    vllm_url: str
    proxy_url: str
    ready_s: float
    admin_token: str
    """The gateway's and the plugin's admin token (their counters are reset with it)."""


@contextlib.asynccontextmanager
async def _stack(trajectories: Sequence[Trajectory], config: BenchConfig, params: VllmBenchParams,
                 vllm: VllmConfig) -> AsyncIterator[_Stack]:
    """vLLM (with the plugin), the replay proxy, the gateway and the speculator stand-in, each a process."""
    meta = await asyncio.to_thread(build_model, vllm)
    port = vllm.port or free_port()
    spec_timing = TimingConfig(ttft_s=params.speculator_ttft_s,
                               decode_tokens_per_s=params.speculator_decode_tokens_per_s, reasoning_tokens=0,
                               time_scale=config.time_scale)
    speculator = SpeculatorConfig(alpha=config.alpha, timing=spec_timing, seed=config.seed)
    vllm_url = f"http://127.0.0.1:{port}"
    admin = secrets.token_hex(16)
    async with serve_in_subprocess(create_replay_proxy, vllm_url, list(trajectories),
                                   meta["whitespace_token_ids"], MODEL_NAME, int(meta["eos_token_id"])) as proxy_url, \
            serve_in_subprocess(create_model_server, list(trajectories), TimingConfig(time_scale=config.time_scale),
                                speculator) as speculator_url, \
            serve_in_subprocess(create_gateway, proxy_url + "/v1",
                                GatewayConfig(post_wait_s=params.post_wait_s, admin_token=admin)) as gateway_url:
        env = {**vllm.extra_env, UPSTREAM_ENV: proxy_url + "/v1", POST_WAIT_ENV: str(params.post_wait_s),
               DEV_MODE_ENV: "1", REPLAY_ENV: proxy_url, ADMIN_TOKEN_ENV: admin}
        extra = vllm.extra_args if MFU_FLAG in vllm.extra_args else (*vllm.extra_args, MFU_FLAG)
        server = VllmServer(replace(vllm, port=port, plugins=(*vllm.plugins, PLUGIN_NAME), extra_env=env,
                                    extra_args=extra))
        await asyncio.to_thread(server.start)
        try:
            await require_plugin(server.url)
            yield _Stack(speculator_url, gateway_url, server.url + PREFIX, server.url + ENGINE_PREFIX, server.url,
                         proxy_url, server.ready_s, admin)
        finally:
            await asyncio.to_thread(server.stop)


async def require_plugin(vllm_url: str) -> None:
    """Fail loudly when vLLM started without the endpoint plugin (vLLM logs a plugin that fails and goes on)."""
    async with httpx2.AsyncClient(timeout=10.0) as http:
        response = await http.get(vllm_url + PREFIX + "/health")
    if response.status_code != 200:
        raise ForethoughtError(f"vLLM at {vllm_url} did not load the {PLUGIN_NAME!r} endpoint plugin "
                               f"(GET {PREFIX}/health answered {response.status_code}; see the server log)")


async def _replay_stats(control: httpx2.AsyncClient, proxy_url: str) -> dict[str, Any]:
    response = await control.get(proxy_url + "/replay/stats")
    response.raise_for_status()
    stats: dict[str, Any] = response.json()
    return stats


_ArmRun = tuple[ArmOutcome, metrics.EngineCounters, dict[str, Any], dict[str, Any]]
"""An arm's outcome, vLLM's counters around it, the replay proxy's and the plugin endpoint's counters."""


async def _run_arm(arm: str, m: int, tasks: Sequence[tuple[int, Trajectory]], per_agent: int, workload: BfclWorkload,
                   stack: _Stack, control: httpx2.AsyncClient, config: BenchConfig,
                   multi: MultiAgentParams) -> _ArmRun:
    url = {"engine-plugin": stack.engine_chat_url, "engine-relay": stack.plugin_url}.get(arm, stack.gateway_url)
    servers = _Servers(stack.speculator_url, url, control, stack.admin_token)
    (await control.post(stack.proxy_url + "/replay/reset")).raise_for_status()
    (await control.post(stack.engine_chat_url + "/reset")).raise_for_status()
    (await control.post(stack.vllm_url + "/reset_prefix_cache")).raise_for_status()  # every arm starts cold
    before = await metrics.read(stack.vllm_url, control)
    outcome = await run_arm_agents("engine-side" if arm.startswith("engine-") else arm, m, tasks, per_agent,
                                   workload, servers, config, multi)
    after = await metrics.read(stack.vllm_url, control)
    chat = await control.get(stack.engine_chat_url + "/stats")
    chat.raise_for_status()
    return replace(outcome, arm=arm), after - before, await _replay_stats(control, stack.proxy_url), chat.json()


def _summary(outcome: ArmOutcome, serial: ArmOutcome, counters: metrics.EngineCounters,
             replay: Mapping[str, Any], chat: Mapping[str, Any]) -> dict[str, Any]:
    mean_agent = statistics.fmean(outcome.agent_s)
    serial_agent = statistics.fmean(serial.agent_s)
    by_task = {(rep, run.trajectory_id): run for rep, run in serial.runs}
    errors = [run.error for _, run in outcome.runs if run.error]
    return {
        "wall_s": outcome.makespan_s,
        "mean_agent_s": mean_agent,
        "time_saved": 1.0 - mean_agent / serial_agent if serial_agent > 0 else 0.0,
        "tokens_per_s": counters.generation_tokens / outcome.makespan_s if outcome.makespan_s > 0 else 0.0,
        "vllm": {**counters.as_dict(),
                 "prompt_tokens_computed_all": round(counters.prompt_tokens_computed) + int(chat["appended_tokens"])},
        "engine_chat": dict(chat),
        "served_calls": outcome.served_calls,
        "posts": outcome.posts,
        "hits": sum(run.stats.hits for _, run in outcome.runs),
        "misses": sum(run.stats.misses for _, run in outcome.runs),
        "replay_verified": int(replay.get("verified", 0)),
        "replay_mismatches": list(replay.get("mismatches", [])),
        "errors": errors,
        "equivalent": not errors and all(equivalent(by_task[(rep, run.trajectory_id)], run)
                                         for rep, run in outcome.runs),
    }


def _median(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _aggregate(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeats of one (M, arm): medians with spread of the timed figures, sums of the counts."""
    out: dict[str, Any] = {key: _median([s[key] for s in samples])
                           for key in ("wall_s", "mean_agent_s", "time_saved", "tokens_per_s")}
    out["vllm"] = {key: _median([s["vllm"][key] for s in samples]) for key in samples[0]["vllm"]}
    for key in ("served_calls", "posts", "hits", "misses", "replay_verified"):
        out[key] = sum(int(s[key]) for s in samples)
    out["engine_chat"] = {key: sum(int(s["engine_chat"][key]) for s in samples) for key in samples[0]["engine_chat"]}
    out["replay_mismatches"] = [m for s in samples for m in s["replay_mismatches"]]
    out["errors"] = [e for s in samples for e in s["errors"]]
    out["equivalent"] = all(s["equivalent"] for s in samples)
    out["repeats"] = len(samples)
    return out


def _table(agents: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Table:
    table = Table(title="vLLM (CPU, tiny random model): multi-agent arms")
    for header in ("agents", "arm", "wall s", "saved/agent", "gen tok/s", "prompt tok", "computed", "+appended",
                   "cached", "GFLOP", "in-engine", "served", "equiv"):
        table.add_column(header, justify="right")
    for m, arms in agents.items():
        for arm, v in arms.items():
            vl = v["vllm"]
            table.add_row(m, arm, f"{v['wall_s']['median']:.1f}", f"{v['time_saved']['median']:.1%}",
                          f"{v['tokens_per_s']['median']:.1f}", f"{vl['prompt_tokens']['median']:,.0f}",
                          f"{vl['prompt_tokens_computed']['median']:,.0f}",
                          f"{vl['prompt_tokens_computed_all']['median']:,.0f}",
                          f"{vl['prompt_tokens_cached']['median']:,.0f}",
                          f"{vl['estimated_flops']['median'] / 1e9:,.1f}",
                          str(v["engine_chat"]["continued_in_engine"]), str(v["served_calls"]),
                          "yes" if v["equivalent"] else "NO")
    return table


async def run_vllm_bench(config: BenchConfig, agent_counts: Sequence[int] = (1, 8), tasks_per_agent: int = 1,
                         params: VllmBenchParams | None = None, vllm: VllmConfig | None = None,
                         console: Console | None = None, json_path: str | Path | None = None) -> dict[str, Any]:
    """Every arm at every agent count on a real vLLM; returns the JSON document (``results.agents[M][ARM]``).

    Raises :class:`~forethought.errors.ForethoughtError` when vLLM is unavailable here, and after the run when
    any arm had a conversation error or a replay mismatch (the document is written first).
    """
    params = params or VllmBenchParams()
    vllm = locate(vllm)
    if not agent_counts or min(agent_counts) < 1 or tasks_per_agent < 1:
        raise ForethoughtError("agent counts and tasks per agent must be >= 1")
    started = time.monotonic()
    load_before = os.getloadavg()
    workload = BfclWorkload(count=0, grouping="step")
    trajectories = replay_trajectories(workload, params.max_turns)
    multi = MultiAgentParams(api_overhead_s=params.api_overhead_s, post_wait_s=params.post_wait_s,
                             samples=params.samples, time_scale=None)
    agents_out: dict[str, dict[str, Any]] = {}
    async with httpx2.AsyncClient(timeout=60.0) as control, _stack(trajectories, config, params, vllm) as stack:
        if console is not None:
            console.print(f"[dim]vLLM ready in {stack.ready_s:.0f} s at {stack.vllm_url}[/dim]")
        for m in agent_counts:
            tasks = tasks_for(trajectories, m, tasks_per_agent)
            arms = params.arms
            samples: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for repeat in range(params.repeats):
                order = arms[repeat % len(arms):] + arms[:repeat % len(arms)]
                ran: dict[str, _ArmRun] = {}
                for arm in order:
                    if console is not None:
                        console.print(f"[dim]{m} agents x {tasks_per_agent} tasks, repeat {repeat + 1}: {arm}[/dim]")
                    ran[arm] = await _run_arm(arm, m, tasks, tasks_per_agent, workload, stack, control, config, multi)
                serial = ran["serial"][0]
                for arm, (outcome, counters, replay, chat) in ran.items():
                    samples[arm].append(_summary(outcome, serial, counters, replay, chat))
            agents_out[str(m)] = {arm: _aggregate(samples[arm]) for arm in arms}
    failures = [f"{m}/{arm}: {text}" for m, arms in agents_out.items() for arm, v in arms.items()
                for text in (*v["errors"], *v["replay_mismatches"])]
    results = {
        "engine": "vllm", "caveat": CPU_CAVEAT, "agents": agents_out,
        "equivalent": all(v["equivalent"] for arms in agents_out.values() for v in arms.values()),
        "failures": failures, "tasks_per_agent": tasks_per_agent, "params": asdict(params),
        "vllm": {"ready_s": stack.ready_s, "max_num_seqs": vllm.max_num_seqs, "max_model_len": vllm.max_model_len,
                 "seed": vllm.seed, "kv_cache_gib": vllm.kv_cache_gib, "kv_cache_bytes": vllm.kv_cache_bytes,
                 "cpus": None if vllm.cpus is None else list(vllm.cpus)},
        "client_cpus": sorted(os.sched_getaffinity(0)),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "elapsed_s": time.monotonic() - started,
    }
    doc = document("bench", {**config.params(), "engine": "vllm", "agent_counts": list(agent_counts),
                             "tasks_per_agent": tasks_per_agent, **asdict(params)}, results)
    if json_path is not None:
        write_json(json_path, doc)
    if console is not None:
        console.print(_table(agents_out))
        console.print(f"[yellow]{CPU_CAVEAT}[/yellow]")
        console.print(f"load average before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}   "
                      f"elapsed {results['elapsed_s']:.0f} s")
    if failures:
        raise ForethoughtError("the vLLM bench had failures: " + "; ".join(failures[:5]))
    return doc


def _cpu_list(text: str | None) -> tuple[int, ...] | None:
    """``"0,2-3"`` -> ``(0, 2, 3)``; ``None`` stays ``None``; anything else is a clear error."""
    if text is None:
        return None
    cpus: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if "-" in part[1:]:
                low, high = (int(x) for x in part.split("-", 1))
                if high < low:
                    raise ValueError(part)
                cpus.extend(range(low, high + 1))
            elif part:
                cpus.append(int(part))
    except ValueError:
        raise ValueError(f"expected CPU numbers separated by commas, got {text!r}") from None
    if not cpus or min(cpus) < 0:
        raise ValueError(f"expected CPU numbers separated by commas, got {text!r}")
    return tuple(cpus)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m forethought.bench.vllm.bench``: the bench of ``forethought bench --engine vllm`` (same defaults)
    with the engine's knobs that command does not offer: the arms and vLLM's KV-cache size (a small cache makes
    the prefix cache evict between turns)."""
    import argparse

    from forethought.bench.main import BenchConfig

    parser = argparse.ArgumentParser(description=(main.__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", default="1,8", help="comma-separated agent counts")
    parser.add_argument("--tasks-per-agent", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, among {', '.join(ALL_ARMS)}")
    parser.add_argument("--kv-cache-bytes", type=int, default=None,
                        help="vLLM's --kv-cache-memory-bytes (default: VllmConfig's kv_cache_gib)")
    parser.add_argument("--engine-cpus", default=None,
                        help="CPUs for vLLM (e.g. 0): its processes and OpenMP threads run only there")
    parser.add_argument("--client-cpus", default=None,
                        help="CPUs for everything else (e.g. 1): this process and the servers it starts")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    engine_cpus = _cpu_list(args.engine_cpus)
    client_cpus = _cpu_list(args.client_cpus)
    if client_cpus is not None:
        os.sched_setaffinity(0, set(client_cpus))  # the stand-ins, the gateway and the proxy inherit it
    params = VllmBenchParams(repeats=args.repeats, arms=tuple(a.strip() for a in args.arms.split(",") if a.strip()))
    agents = [int(a) for a in args.agents.split(",") if a.strip()]
    config = BenchConfig(workload="bfcl", trajectories=8, agents=agents[0], time_scale=0.3, repeats=args.repeats)
    vllm = VllmConfig(kv_cache_bytes=args.kv_cache_bytes, cpus=engine_cpus)
    asyncio.run(run_vllm_bench(config, agents, args.tasks_per_agent, params, vllm, console=Console(),
                               json_path=args.json_path))
    return 0


__all__ = ["ALL_ARMS", "ARMS", "CPU_CAVEAT", "VllmBenchParams", "main", "replay_trajectories", "require_plugin",
           "run_vllm_bench"]


if __name__ == "__main__":
    raise SystemExit(main())
