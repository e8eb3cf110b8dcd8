"""``forethought bench``: serial vs speculative arms on a workload, with equivalence check and report.

One run: start the simulated engine on a free loopback port, train the pattern predictor on the other
fold, run every arm over the same trajectories with the same injected latencies — interleaved by batch of
trajectories (the arms' order rotating from batch to batch) and repeated — compute metrics against the
serial arm per repeat, report medians with their spread, check equivalence (tool outputs and final
backend states) on every repeat, watch the event-loop lag and the load average, optionally run again
beside ``--load N`` CPU burners and at further tool latencies, and write JSON + HTML + PNG with a verdict
in words.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from forethought._core.policy import Policy
from forethought.bench.arms import Arm, parse_arms
from forethought.bench.background import in_daemon_thread
from forethought.bench.cpuload import CpuLoad
from forethought.bench.engine_sim.model_server import SpeculatorConfig, TimingConfig, create_model_server
from forethought.bench.lag import LagMonitor, machine_snapshot
from forethought.bench.metrics import ArmMetrics, arm_metrics, median
from forethought.bench.oracle import OraclePredictor
from forethought.bench.predict_eval import record_trajectories
from forethought.bench.reliability import merge_reliability, print_reliability
from forethought.bench.report import (
    document,
    plot_efficiency,
    plot_latency_sweep,
    plot_outcomes,
    plot_time_saved,
    print_arms,
    write_html,
    write_json,
)
from forethought.bench.runner import ArmRun, open_arm, run_arm, run_batch
from forethought.bench.verdict import oracle_share, verdict
from forethought.bench.workloads.base import Workload
from forethought.bench.workloads.latency import LatencyModel
from forethought.errors import ForethoughtError
from forethought.predictors.base import Predictor
from forethought.predictors.offload import OffloadedPredictor
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.trajectory import Trajectory
from forethought.serve.subprocess_server import serve_in_subprocess

TRAJECTORY_WORKLOADS = ("bfcl", "synthetic")
"""The workloads made of trajectories (:func:`make_workload`): the arms of a plain bench run, serve-model."""
WORKLOADS = (*TRAJECTORY_WORKLOADS, "sweep", "paper-table", "code", "mcp", "loop")
"""Every workload ``forethought bench --workload`` accepts."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a bench run depends on; printed in the report."""

    workload: str = "bfcl"
    arms: str = "serial,spec-model,spec-stream,spec-pattern,pattern+stream,all,oracle"
    repeats: int = 3
    load: int = 0
    trajectories: int = 12
    agents: int = 4
    tool_latency_s: float = 1.0
    latencies: tuple[float, ...] = ()
    time_scale: float = 0.1
    alpha: float = 0.7
    samples: int = 3
    grouping: str = "step"
    seed: int = 0
    chain_depth: int = 1
    offload: bool = True
    """The pattern predictor runs in a worker process (its CPU off the agents' event loop)."""
    ttft_s: float = 0.25
    decode_tokens_per_s: float = 60.0
    prefill_s_per_token: float = 0.0002
    reasoning_tokens: int = 40
    speculator_ttft_s: float = 0.08
    speculator_decode_tokens_per_s: float = 250.0
    out_dir: str = "reports"
    policy: Policy = field(default_factory=Policy)

    def params(self) -> dict[str, Any]:
        out = asdict(self)
        out["policy"] = "default" if self.policy == Policy() else "custom"
        return out


def _timing(config: BenchConfig) -> tuple[TimingConfig, TimingConfig]:
    main = TimingConfig(ttft_s=config.ttft_s, prefill_s_per_token=config.prefill_s_per_token,
                        decode_tokens_per_s=config.decode_tokens_per_s, reasoning_tokens=config.reasoning_tokens,
                        time_scale=config.time_scale)
    spec = TimingConfig(ttft_s=config.speculator_ttft_s, prefill_s_per_token=config.prefill_s_per_token / 4,
                        decode_tokens_per_s=config.speculator_decode_tokens_per_s, reasoning_tokens=0,
                        time_scale=config.time_scale)
    return main, spec


def make_workload(config: BenchConfig) -> Workload:
    """The workload named in ``config`` (imported lazily: BFCL needs the bfcl-eval package)."""
    if config.workload == "bfcl":
        from forethought.bench.workloads.bfcl_workload import BfclWorkload

        return BfclWorkload(count=config.trajectories, grouping="turn" if config.grouping == "turn" else "step")
    if config.workload == "synthetic":
        from forethought.bench.workloads.synthetic import SyntheticWorkload

        return SyntheticWorkload(count=max(1, config.trajectories))
    if config.workload in WORKLOADS:
        raise ForethoughtError(f"workload {config.workload!r} is not made of trajectories: this run takes "
                               f"{' or '.join(TRAJECTORY_WORKLOADS)}")
    raise ForethoughtError(f"unknown workload {config.workload!r} (one of {', '.join(WORKLOADS)})")


async def pattern_factory(workload: Workload, offload: bool = True) -> Callable[[], Predictor]:
    """Train once on the training fold's calls with their real outputs; each arm gets its own copy (in a
    worker process of its own with ``offload``: :class:`~forethought.predictors.offload.OffloadedPredictor`)."""
    sessions = await record_trajectories(workload.training(), lambda t: workload.session_tools(t, None).tools)
    trained = await in_daemon_thread(lambda: PatternPredictor.trained_on(sessions), "train-patterns")
    if offload:  # one snapshot, a worker of its own per arm; this process keeps only the bytes
        snapshot, name = await in_daemon_thread(lambda: OffloadedPredictor.pickled(trained)), trained.name
        return lambda: OffloadedPredictor.from_pickle(snapshot, name)
    factory: Callable[[], Predictor] = trained.copy
    return factory


async def run_arms(config: BenchConfig, workload: Workload, arms: Sequence[Arm], trajectories: Sequence[Trajectory],
                   latency: LatencyModel, console: Console | None,
                   patterns: Callable[[], Predictor] | None) -> dict[str, ArmRun]:
    """Run ``arms`` (serial first) against a freshly started engine; returns each arm's runs."""
    main, spec = _timing(config)
    speculator = SpeculatorConfig(alpha=config.alpha, timing=spec, seed=config.seed)
    results: dict[str, ArmRun] = {}
    async with serve_in_subprocess(create_model_server, list(trajectories), timing=main,
                                   speculator=speculator) as base_url:
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, disable=console is None, transient=True)
        with progress:
            for arm in arms:
                task = progress.add_task(f"{arm.name:>15}", total=len(trajectories))

                def advance(_arm: str, task_id: TaskID = task) -> None:
                    progress.advance(task_id)

                results[arm.name] = await run_arm(
                    arm, trajectories, workload, base_url, agents=config.agents, latency=latency,
                    policy=config.policy, samples=config.samples, pattern_factory=patterns, progress=advance,
                    oracle=lambda: OraclePredictor(trajectories))
    return results


async def run_interleaved(config: BenchConfig, workload: Workload, arms: Sequence[Arm],
                          trajectories: Sequence[Trajectory], latency: LatencyModel, console: Console | None,
                          patterns: Callable[[], Predictor] | None,
                          monitor: LagMonitor) -> list[dict[str, ArmRun]]:
    """Every arm on every batch of ``agents`` trajectories, the arms' order rotating; ``repeats`` times.

    Returns one ``{arm: ArmRun}`` per repeat. Each arm keeps one runtime (and its predictors) for a whole
    repeat, as in a plain run; the monitor's label names the arm whose batch is running.
    """
    main, spec = _timing(config)
    speculator = SpeculatorConfig(alpha=config.alpha, timing=spec, seed=config.seed)
    size = max(1, config.agents)
    batches = [trajectories[i:i + size] for i in range(0, len(trajectories), size)]
    repeats = max(1, config.repeats)
    out: list[dict[str, ArmRun]] = []
    async with serve_in_subprocess(create_model_server, list(trajectories), timing=main,
                                   speculator=speculator) as base_url:
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, disable=console is None, transient=True)
        with progress:
            task = progress.add_task(f"{len(arms)} arms x {repeats} repeats",
                                     total=repeats * len(arms) * len(trajectories))

            def advance(_arm: str) -> None:
                progress.advance(task)

            for repeat in range(repeats):
                contexts = {arm.name: open_arm(arm, base_url, policy=config.policy, samples=config.samples,
                                               pattern_factory=patterns,
                                               oracle=lambda: OraclePredictor(trajectories),
                                               chain_depth=config.chain_depth) for arm in arms}
                try:
                    await asyncio.gather(*(context.start() for context in contexts.values()))
                    for number, batch in enumerate(batches):
                        shift = (repeat + number) % len(arms)
                        for arm in (*arms[shift:], *arms[:shift]):
                            monitor.label = arm.name
                            await run_batch(contexts[arm.name], batch, workload, agents=config.agents,
                                            latency=latency, progress=advance, repeat=repeat)
                        monitor.label = ""
                    out.append({name: context.result() for name, context in contexts.items()})
                finally:
                    for context in contexts.values():
                        await context.aclose()
    return out


def aggregate(per_repeat: Sequence[Mapping[str, ArmMetrics]]) -> dict[str, dict[str, Any]]:
    """Medians over repeats of every numeric field, ``time_saved_spread`` [min, max], equivalence on all."""
    out: dict[str, dict[str, Any]] = {}
    for name in per_repeat[0]:
        rows = [asdict(metrics[name]) for metrics in per_repeat]
        arm: dict[str, Any] = {}
        for field_name, first in rows[0].items():
            values = [row[field_name] for row in rows]
            if isinstance(first, bool):
                arm[field_name] = all(values)
            elif isinstance(first, dict):  # per key, a key missing from a repeat counting 0
                keys = sorted({k for v in values for k in v})
                arm[field_name] = {k: median([float(v.get(k, 0.0)) for v in values]) for k in keys}
            elif isinstance(first, int):
                arm[field_name] = round(median([float(v) for v in values]))
            else:
                arm[field_name] = median([float(v) for v in values])
        saved = [row["time_saved"] for row in rows]
        arm["time_saved_spread"] = [min(saved), max(saved)]
        arm["repeats"] = len(rows)
        out[name] = arm
    oracle = out.get("oracle")
    for name, arm in out.items():  # a share only where the oracle saved time (verdict.oracle_saved)
        arm["oracle_share"] = None if name == "serial" else oracle_share(float(arm["time_saved"]), oracle)
    return out


async def measure_arms(config: BenchConfig, workload: Workload, arms: Sequence[Arm],
                       trajectories: Sequence[Trajectory], latency: LatencyModel, console: Console | None,
                       patterns: Callable[[], Predictor] | None,
                       state_changing: Mapping[str, frozenset[int]]) -> tuple[dict[str, dict[str, Any]],
                                                                             dict[str, Any], list[dict[str, ArmRun]]]:
    """One interleaved, repeated measurement: (arms JSON, machine JSON, the raw runs of every repeat)."""
    before = machine_snapshot()
    async with LagMonitor() as monitor:
        runs = await run_interleaved(config, workload, arms, trajectories, latency, console, patterns, monitor)
    after = machine_snapshot()
    arms_out = aggregate([metrics_of(r, state_changing) for r in runs])
    for name, arm in arms_out.items():
        arm["lag_p99_ms"] = monitor.p99_ms(name)
    machine = {"cores": before.cores, "load_1m_start": before.load_1m, "load_1m_end": after.load_1m,
               "load_avg_start": [before.load_1m, before.load_5m, before.load_15m],
               "load_avg_end": [after.load_1m, after.load_5m, after.load_15m],
               "lag_p99_ms": monitor.p99_ms()}
    return arms_out, machine, runs


def metrics_of(runs: Mapping[str, ArmRun], state_changing: Mapping[str, frozenset[int]]) -> dict[str, ArmMetrics]:
    serial = runs["serial"]
    return {name: arm_metrics(serial, run, state_changing) for name, run in runs.items()}


async def run_bench(config: BenchConfig, console: Console | None = None,
                    json_path: str | None = None) -> dict[str, Any]:
    """The whole ``forethought bench`` job; returns the JSON document (also written to disk)."""
    started = time.monotonic()
    arms = parse_arms(config.arms)
    workload = make_workload(config)
    trajectories = list(workload.trajectories())
    if not trajectories:
        raise ForethoughtError("the workload has no trajectories to run")
    patterns = await pattern_factory(workload, config.offload) if any(a.patterns for a in arms) else None
    latency = LatencyModel(mean_s=config.tool_latency_s, seed=config.seed, time_scale=config.time_scale)
    state_changing: dict[str, frozenset[int]] = {}
    if hasattr(workload, "state_changing_calls"):
        for t in trajectories:
            state_changing[t.id] = await workload.state_changing_calls(t)
    gc.collect()
    gc.freeze()  # the harness's own long-lived data (workload, training): no collection in a timed arm walks it
    arms_out, machine, repeats = await measure_arms(config, workload, arms, trajectories, latency, console, patterns,
                                                    state_changing)
    sweep: dict[str, dict[str, float]] = {a.name: {str(config.tool_latency_s): arms_out[a.name]["time_saved"]}
                                          for a in arms if a.name != "serial"}
    for mean in config.latencies:
        if mean == config.tool_latency_s:
            continue
        if console is not None:
            console.print(f"[dim]latency sweep (one run, not repeated): mean tool latency {mean:g} s[/dim]")
        extra = await run_arms(config, workload, arms, trajectories, replace(latency, mean_s=mean), None, patterns)
        for name, m in metrics_of(extra, state_changing).items():
            if name != "serial":
                sweep[name][str(mean)] = m.time_saved
    equivalent = all(bool(a["equivalent"]) for a in arms_out.values())
    differing = sorted({r.trajectory_id for runs in repeats for name, run in runs.items() for r in run.runs
                        if not arms_out[name]["equivalent"]})
    words = verdict(arms_out, equivalent, machine, len(repeats))
    results: dict[str, Any] = {
        "arms": arms_out,
        "equivalent": equivalent,
        "repeats": len(repeats),
        "machine": machine,
        "verdict": words,
        "headline": words[0],
        "trajectories": [t.id for t in trajectories],
        "latency_sweep": sweep,
        "measured": _measured(repeats[0]),
        "reliability": {arm.name: merge_reliability(runs[arm.name].reliability for runs in repeats)
                        for arm in arms if arm.speculate},
    }
    if config.load > 0:
        if console is not None:
            console.print(f"[dim]again beside {config.load} CPU-burning process(es) (--load)[/dim]")
        with CpuLoad(config.load):
            loaded, loaded_machine, loaded_runs = await measure_arms(config, workload, arms, trajectories, latency,
                                                                     console, patterns, state_changing)
        results["under_load"] = {
            "processes": config.load,
            "machine": loaded_machine,
            "equivalent": all(bool(a["equivalent"]) for a in loaded.values()),
            "arms": {name: {"time_saved": a["time_saved"], "time_saved_spread": a["time_saved_spread"],
                            "lag_p99_ms": a["lag_p99_ms"], "wasted_tool_s": a["wasted_tool_s"],
                            "equivalent": a["equivalent"]} for name, a in loaded.items()},
        }
        equivalent = equivalent and results["under_load"]["equivalent"]
        results["equivalent"] = equivalent
        del loaded_runs
    results["elapsed_s"] = time.monotonic() - started
    if not equivalent:
        results["not_equivalent_arms"] = [n for n, a in arms_out.items() if not a["equivalent"]]
        results["trajectories_in_differing_arms"] = differing
    doc = document("bench", config.params(), results)
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once per run, before any plot is written
    images = [plot_time_saved(out_dir / "time_saved.png", arms_out),
              plot_outcomes(out_dir / "outcomes.png", arms_out),
              plot_efficiency(out_dir / "efficiency.png", arms_out)]
    if len(config.latencies) > 1:
        images.insert(1, plot_latency_sweep(out_dir / "time_saved_by_latency.png", sweep))
    notes = [f"medians over {len(repeats)} repeats, arms interleaved by batch of {config.agents} trajectories",
             f"time scale {config.time_scale:g}: every latency and generation time is multiplied by it",
             "alpha = fraction of authoritative calls overlapped with generation (hits, partial hits, early dispatch)"]
    html_path = write_html(out_dir / "report.html", doc, images, notes)
    json_file = write_json(json_path or out_dir / "bench.json", doc)
    if console is not None:
        print_arms(console, f"forethought bench — {config.workload}, {len(trajectories)} trajectories, "
                   f"{config.agents} agents, mean tool latency {config.tool_latency_s:g} s "
                   f"(time scale {config.time_scale:g})", arms_out)
        print_reliability(console, results["reliability"], "all" if "all" in results["reliability"] else
                          next(iter(results["reliability"]), ""))
        for name, arm in arms_out.items():
            split = arm.get("wasted_by_source") or {}
            if len(split) > 1:
                console.print(f"wasted tool s of {name} by source: "
                              + ", ".join(f"{source} {seconds:.2f}" for source, seconds in sorted(split.items()))
                              + f"; guesses withdrawn: {arm.get('withdrawn', 0)}, deferred: {arm.get('deferred', 0)}")
        console.print(f"equivalence with serial: {'[green]OK[/green]' if equivalent else '[red]DIFFERS[/red]'}")
        for number, line in enumerate(words):
            style = "bold red" if line.startswith(("WARNING", "NOT", "Speculation did not")) else \
                "bold" if number == 0 else None
            console.print(line, style=style, markup=False)
        console.print(f"report: {html_path}   json: {json_file}")
    return doc


def _measured(runs: Mapping[str, ArmRun]) -> dict[str, float]:
    """Mean per-step G and T of the serial arm, and the speculator's g: the inputs of the model."""
    serial = runs["serial"]
    steps = [s for r in serial.runs for s in r.steps if s.calls]
    g = max((run.speculator_first_close_s for run in runs.values()), default=0.0)
    if not steps:
        return {"G_s": 0.0, "T_s": 0.0, "g_s": g}
    return {"G_s": sum(s.generation_s for s in steps) / len(steps),
            "T_s": sum(s.tool_s for s in steps) / len(steps), "g_s": g}
