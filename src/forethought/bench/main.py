"""``forethought bench``: serial vs speculative arms on a workload, with equivalence check and report.

One run: start the simulated engine on a free loopback port, train the pattern predictor on the other
fold, run every arm over the same trajectories with the same injected latencies, compute metrics against
the serial arm, check equivalence (tool outputs and final backend states), optionally repeat at further
tool latencies for the time-saved-by-latency plot, and write JSON + HTML + PNG.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from forethought._policy import Policy
from forethought._trajectory import Trajectory
from forethought.bench.arms import Arm, parse_arms
from forethought.bench.metrics import ArmMetrics, arm_metrics
from forethought.bench.predict_eval import record_trajectories
from forethought.bench.report import (
    document,
    plot_efficiency,
    plot_latency_sweep,
    plot_outcomes,
    print_arms,
    write_html,
    write_json,
)
from forethought.bench.runner import ArmRun, run_arm
from forethought.errors import ForethoughtError
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.serve.model_server import SpeculatorConfig, TimingConfig, create_model_server
from forethought.serve.subprocess_server import serve_in_subprocess
from forethought.workloads.base import Workload
from forethought.workloads.latency import LatencyModel


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a bench run depends on; printed in the report."""

    workload: str = "bfcl"
    arms: str = "serial,spec-model,spec-stream,spec-pattern,pattern+stream,all"
    trajectories: int = 12
    agents: int = 4
    tool_latency_s: float = 1.0
    latencies: tuple[float, ...] = ()
    time_scale: float = 0.1
    alpha: float = 0.7
    samples: int = 3
    grouping: str = "step"
    seed: int = 0
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
        from forethought.workloads.bfcl_workload import BfclWorkload

        return BfclWorkload(count=config.trajectories, grouping="turn" if config.grouping == "turn" else "step")
    if config.workload == "synthetic":
        from forethought.workloads.synthetic import SyntheticWorkload

        return SyntheticWorkload(count=max(1, config.trajectories))
    raise ForethoughtError(f"unknown workload {config.workload!r} (bfcl, synthetic, sweep, code)")


async def pattern_factory(workload: Workload) -> Callable[[], PatternPredictor]:
    """Train once on the training fold's calls with their real outputs; each arm gets its own copy."""
    sessions = await record_trajectories(workload.training(), lambda t: workload.session_tools(t, None).tools)
    trained = PatternPredictor.trained_on(sessions)
    factory: Callable[[], PatternPredictor] = trained.copy
    return factory


async def run_arms(config: BenchConfig, workload: Workload, arms: Sequence[Arm], trajectories: Sequence[Trajectory],
                   latency: LatencyModel, console: Console | None,
                   patterns: Callable[[], PatternPredictor] | None) -> dict[str, ArmRun]:
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
                    policy=config.policy, samples=config.samples, pattern_factory=patterns, progress=advance)
    return results


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
    patterns = await pattern_factory(workload) if any(a.patterns for a in arms) else None
    latency = LatencyModel(mean_s=config.tool_latency_s, seed=config.seed, time_scale=config.time_scale)
    state_changing: dict[str, frozenset[int]] = {}
    if hasattr(workload, "state_changing_calls"):
        for t in trajectories:
            state_changing[t.id] = await workload.state_changing_calls(t)
    runs = await run_arms(config, workload, arms, trajectories, latency, console, patterns)
    metrics = metrics_of(runs, state_changing)
    sweep: dict[str, dict[str, float]] = {a.name: {str(config.tool_latency_s): metrics[a.name].time_saved}
                                          for a in arms if a.name != "serial"}
    for mean in config.latencies:
        if mean == config.tool_latency_s:
            continue
        if console is not None:
            console.print(f"[dim]latency sweep: mean tool latency {mean:g} s[/dim]")
        extra = await run_arms(config, workload, arms, trajectories, replace(latency, mean_s=mean), None, patterns)
        for name, m in metrics_of(extra, state_changing).items():
            if name != "serial":
                sweep[name][str(mean)] = m.time_saved
    arms_out = {name: asdict(m) for name, m in metrics.items()}
    equivalent = all(m.equivalent for m in metrics.values())
    differing = sorted({r.trajectory_id for name, run in runs.items() for r in run.runs
                        if not metrics[name].equivalent})
    results = {
        "arms": arms_out,
        "equivalent": equivalent,
        "trajectories": [t.id for t in trajectories],
        "latency_sweep": sweep,
        "measured": _measured(runs),
        "elapsed_s": time.monotonic() - started,
    }
    if not equivalent:
        results["not_equivalent_arms"] = [n for n, m in metrics.items() if not m.equivalent]
        results["trajectories_in_differing_arms"] = differing
    doc = document("bench", config.params(), results)
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once per run, before any plot is written
    images = [plot_outcomes(out_dir / "outcomes.png", arms_out),
              plot_efficiency(out_dir / "efficiency.png", arms_out)]
    if len(config.latencies) > 1:
        images.insert(0, plot_latency_sweep(out_dir / "time_saved_by_latency.png", sweep))
    notes = [f"time scale {config.time_scale:g}: every latency and generation time is multiplied by it",
             "alpha = fraction of authoritative calls overlapped with generation (hits, partial hits, early dispatch)"]
    html_path = write_html(out_dir / "report.html", doc, images, notes)
    json_file = write_json(json_path or out_dir / "bench.json", doc)
    if console is not None:
        print_arms(console, f"forethought bench — {config.workload}, {len(trajectories)} trajectories, "
                   f"{config.agents} agents, mean tool latency {config.tool_latency_s:g} s "
                   f"(time scale {config.time_scale:g})", arms_out)
        console.print(f"equivalence with serial: {'[green]OK[/green]' if equivalent else '[red]DIFFERS[/red]'}")
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
