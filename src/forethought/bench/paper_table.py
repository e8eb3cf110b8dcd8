"""``forethought bench --workload paper-table``: time saved by mean tool latency at several alphas.

Reproduces the shape of Nichols et al.'s "time saved by average tool latency" table with the stand-in
speculator sampled once per step (lambda = 1, so the acceptance rate is alpha): for each alpha and each
mean tool latency (0.5 .. 2.5 s before time scaling), the serial and ``spec-model`` arms run side by side
on the same BFCL trajectories; the cell is the measured time saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from forethought.bench.arms import ARMS
from forethought.bench.main import BenchConfig, make_workload, metrics_of, run_arms
from forethought.bench.report import document, write_json
from forethought.bench.workloads.latency import LatencyModel

PAPER_ALPHAS = (0.6, 0.7, 0.8)
PAPER_LATENCIES = (0.5, 1.0, 1.5, 2.0, 2.5)


async def run_paper_table(config: BenchConfig, console: Console | None = None, json_path: str | None = None,
                          alphas: Sequence[float] = PAPER_ALPHAS,
                          latencies: Sequence[float] = PAPER_LATENCIES) -> dict[str, Any]:
    workload = make_workload(replace(config, workload="bfcl"))
    trajectories = list(workload.trajectories())
    arms = (ARMS["serial"], ARMS["spec-model"])
    table: dict[str, dict[str, float]] = {}
    measured: dict[str, dict[str, float]] = {f"{alpha:g}": {} for alpha in alphas}
    equivalent = True
    for alpha in alphas:
        row: dict[str, float] = {}
        for mean in latencies:
            latency = LatencyModel(mean_s=mean, seed=config.seed, time_scale=config.time_scale)
            runs = await run_arms(replace(config, alpha=alpha, samples=1), workload, arms, trajectories, latency,
                                  None, None)
            metrics = metrics_of(runs, {})["spec-model"]
            row[f"{mean:g}"] = metrics.time_saved
            measured[f"{alpha:g}"][f"{mean:g}"] = metrics.alpha
            equivalent = equivalent and metrics.equivalent
        table[f"{alpha:g}"] = row
    results = {"time_saved": table, "alpha_measured": measured, "equivalent": equivalent,
               "trajectories": [t.id for t in trajectories]}
    doc = document("bench", {**config.params(), "workload": "paper-table", "alphas": list(alphas),
                             "latencies": list(latencies)}, results)
    write_json(json_path or f"{config.out_dir}/paper_table.json", doc)
    if console is not None:
        out = Table(title=f"time saved by mean tool latency (spec-model, stand-in speculator, "
                          f"{len(trajectories)} BFCL trajectories, time scale {config.time_scale:g})")
        out.add_column("alpha (set / measured)")
        for mean in latencies:
            out.add_column(f"{mean:g} s", justify="right")
        for alpha_name, values in table.items():
            seen = sum(measured[alpha_name].values()) / len(measured[alpha_name])
            out.add_row(f"{alpha_name} / {seen:.2f}", *[f"{100 * v:.1f}%" for v in values.values()])
        console.print(out)
        console.print(f"equivalence with serial: {equivalent}")
    return doc
