"""Where each millisecond goes: CPU per model step of every arm, by process and by part of the code.

``python -m forethought.bench.profile --json PATH`` runs each arm once over the same BFCL trajectories as
``forethought bench`` (same engine, timings and predictors), one arm at a time, with Python's profiler on in
the agents' process, and reports per arm and per model step: wall time, CPU of the agents' process, of the
simulated engine (its own ``/stats``), and of worker processes (the pattern predictor's, reaped at the arm's
end), the agents' CPU split by part (the core, the agent loop, the LLM clients, predictors, the openai SDK
and HTTP stack, asyncio and the event loop, JSON, the rest), and the event loop's lag. ``--load N`` runs it
again beside N CPU burners. Figures are CPU seconds measured by the operating system and the profiler (the
profiler's own overhead inflates the split, not the process totals); they are for comparing arms within one
run. Writes ``{"command": "profile", "version", "params", "results"}``.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import httpx2 as httpx
import typer
from rich.console import Console
from rich.table import Table

from forethought.bench.arms import ARMS, parse_arms
from forethought.bench.cpuload import CpuLoad
from forethought.bench.engine_sim.model_server import SpeculatorConfig, create_model_server
from forethought.bench.lag import LagMonitor
from forethought.bench.main import BenchConfig, _timing, make_workload, pattern_factory
from forethought.bench.oracle import OraclePredictor
from forethought.bench.report import document, write_json
from forethought.bench.runner import ArmContext, open_arm, run_batch
from forethought.bench.workloads.latency import LatencyModel
from forethought.predictors.offload import OffloadedPredictor
from forethought.serve.subprocess_server import serve_in_subprocess

AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("idle", ("of 'select.epoll' objects", "of 'select.select' objects")),
    ("core", ("forethought/_core/", "forethought/telemetry.py")),
    ("agent", ("forethought/agent/",)),
    ("llm", ("forethought/llm/",)),
    ("predictors", ("forethought/predictors/",)),
    ("sdk+http", ("/openai/", "/httpx", "/httpcore", "/anyio/", "/h11/", "/pydantic", "/sniffio")),
    ("asyncio", ("/asyncio/", "selectors.py", "_asyncio.")),
    ("json", ("/json/", "_json.", "jiter")),
)
"""Parts of the agents' process the profile is split into, by the file a function lives in (first match);
``idle`` is the event loop waiting in ``epoll`` (not CPU: left out of the split)."""


def _area(filename: str) -> str:
    for area, marks in AREAS:
        if any(mark in filename for mark in marks):
            return area
    return "other"


def split_by_area(profile: cProfile.Profile) -> dict[str, float]:
    """Own CPU seconds (``tottime``) of the profiled code by area (see :data:`AREAS`)."""
    stats = pstats.Stats(profile)
    out: dict[str, float] = {}
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        tottime = row[2]
        where = filename if filename != "~" else name
        area = _area(where)
        if area != "idle":
            out[area] = out.get(area, 0.0) + tottime
    return out


async def _engine_cpu(client: httpx.AsyncClient, base_url: str) -> float:
    answer = await client.get(base_url + "/stats")
    return float(answer.json().get("process_cpu_s", 0.0))


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from ``/proc`` (0 where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _workers_cpu(context: ArmContext) -> float:
    pids = [p.worker_pid() for p in context.predictors if isinstance(p, OffloadedPredictor)]
    return sum(_process_cpu(pid) for pid in pids if pid is not None)


async def profile_arms(config: BenchConfig, arm_names: Sequence[str]) -> dict[str, Any]:
    """Run ``arm_names`` once each (serial first), profiled; returns per-arm figures per model step."""
    arms = parse_arms(",".join(arm_names))
    workload = make_workload(config)
    trajectories = list(workload.trajectories())
    patterns = await pattern_factory(workload, config.offload) if any(a.patterns for a in arms) else None
    latency = LatencyModel(mean_s=config.tool_latency_s, seed=config.seed, time_scale=config.time_scale)
    main, spec = _timing(config)
    speculator = SpeculatorConfig(alpha=config.alpha, timing=spec, seed=config.seed)
    out: dict[str, Any] = {}
    async with serve_in_subprocess(create_model_server, list(trajectories), timing=main,
                                   speculator=speculator) as base_url, httpx.AsyncClient() as http:
        for arm in arms:
            monitor = LagMonitor()
            await monitor.__aenter__()
            context = open_arm(arm, base_url, policy=config.policy, samples=config.samples,
                               pattern_factory=patterns, oracle=lambda: OraclePredictor(trajectories),
                               chain_depth=config.chain_depth)
            try:
                await context.start()  # worker processes start and load before anything is measured
                engine_before, workers_before = await _engine_cpu(http, base_url), _workers_cpu(context)
                cpu_before, wall_before = time.process_time(), time.perf_counter()
                profile = cProfile.Profile()
                profile.enable()
                try:
                    await run_batch(context, trajectories, workload, agents=config.agents, latency=latency)
                finally:
                    profile.disable()
                    await monitor.__aexit__(None, None, None)
                wall = time.perf_counter() - wall_before
                agent_cpu = time.process_time() - cpu_before
                engine_cpu = await _engine_cpu(http, base_url) - engine_before
                workers_cpu = _workers_cpu(context) - workers_before
            finally:
                await context.aclose()
            run = context.result()
            steps = max(1, sum(len(r.steps) for r in run.runs))
            split = split_by_area(profile)
            per_step_ms = {area: round(1000.0 * s / steps, 3) for area, s in sorted(split.items())}
            out[arm.name] = {
                "steps": steps,
                "wall_s": round(wall, 3),
                "agent_cpu_ms_per_step": round(1000.0 * agent_cpu / steps, 3),
                "engine_cpu_ms_per_step": round(1000.0 * engine_cpu / steps, 3),
                "workers_cpu_ms_per_step": round(1000.0 * workers_cpu / steps, 3),
                "agent_split_ms_per_step": per_step_ms,
                "lag_p99_ms": round(monitor.p99_ms(), 3),
                "speculator_tokens": run.speculator_tokens,
            }
    return out


def _table(title: str, results: dict[str, Any]) -> Table:
    areas = sorted({a for r in results.values() for a in r["agent_split_ms_per_step"]})
    table = Table(title=title)
    for column in ("arm", "steps", "wall s", "agent ms/step", "engine ms/step", "workers ms/step", "lag p99 ms",
                   *areas):
        table.add_column(column, justify="right")
    for name, r in results.items():
        table.add_row(name, str(r["steps"]), f"{r['wall_s']:.2f}", f"{r['agent_cpu_ms_per_step']:.2f}",
                      f"{r['engine_cpu_ms_per_step']:.2f}", f"{r['workers_cpu_ms_per_step']:.2f}",
                      f"{r['lag_p99_ms']:.1f}",
                      *(f"{r['agent_split_ms_per_step'].get(a, 0.0):.2f}" for a in areas))
    return table


def main(
    arms: Annotated[str, typer.Option(help="Comma-separated arms (serial is always run).")] = ",".join(ARMS),
    trajectories: Annotated[int, typer.Option(help="BFCL trajectories per arm.")] = 8,
    agents: Annotated[int, typer.Option(help="Concurrent agents.")] = 4,
    load: Annotated[int, typer.Option(help="Also run beside N CPU burners.")] = 0,
    time_scale: Annotated[float, typer.Option(help="As for forethought bench.")] = 0.1,
    json_path: Annotated[str | None, typer.Option("--json", help="Write the JSON document here.")] = None,
) -> None:
    """Profile every arm: CPU per model step by process and by part of the code."""
    console = Console()
    config = BenchConfig(trajectories=trajectories, agents=agents, time_scale=time_scale)
    names = [a.strip() for a in arms.split(",") if a.strip()]
    results: dict[str, Any] = {"idle": asyncio.run(profile_arms(config, names)),
                               "load_average_start": os.getloadavg()[0]}
    console.print(_table(f"CPU per model step (load average {results['load_average_start']:.1f})",
                         results["idle"]))
    if load > 0:
        with CpuLoad(load):
            results["under_load"] = asyncio.run(profile_arms(replace(config), names))
        console.print(_table(f"beside {load} CPU burner(s)", results["under_load"]))
    results["load_average_end"] = os.getloadavg()[0]
    doc = document("profile", {"arms": names, "trajectories": trajectories, "agents": agents, "load": load,
                               "time_scale": time_scale}, results)
    if json_path:
        write_json(json_path, doc)
    else:
        console.print_json(json.dumps(results))


if __name__ == "__main__":
    typer.run(main)
