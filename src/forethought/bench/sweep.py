"""``forethought bench --workload sweep``: efficiency over alpha x T/G on a controlled synthetic workload.

A pilot serial run with no tool latency measures the mean generation time G per step. Then for every
alpha in the grid (the speculator is sampled once per step, so alpha is the acceptance rate) and every
ratio T/G, the serial and ``spec-model`` arms run on the synthetic workload (one PURE call per step) with
mean tool latency ``ratio * G``; efficiency is the measured speedup divided by the per-step Lemma-1 bound
(:mod:`forethought.bench.metrics`). Efficiency near 1.0 means the runtime itself costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from forethought.bench.arms import ARMS
from forethought.bench.main import BenchConfig, _measured, metrics_of, run_arms
from forethought.bench.report import document, write_json
from forethought.bench.workloads.latency import LatencyModel
from forethought.bench.workloads.synthetic import SyntheticWorkload

DEFAULT_ALPHAS = (0.0, 0.5, 1.0)
DEFAULT_RATIOS = (0.5, 1.0, 2.0)


async def run_sweep(config: BenchConfig, console: Console | None = None, json_path: str | None = None,
                    alphas: Sequence[float] = DEFAULT_ALPHAS,
                    ratios: Sequence[float] = DEFAULT_RATIOS) -> dict[str, Any]:
    workload = SyntheticWorkload(count=max(1, config.trajectories), turns=2, steps=4)
    trajectories = list(workload.trajectories())
    arms = (ARMS["serial"], ARMS["spec-model"])
    no_latency = LatencyModel(mean_s=0.0, seed=config.seed, time_scale=config.time_scale)
    pilot = await run_arms(replace(config, alpha=0.0), workload, arms[:1], trajectories, no_latency, None, None)
    g_main = _measured(pilot)["G_s"]
    cells: list[dict[str, Any]] = []
    for alpha in alphas:
        for ratio in ratios:
            mean_unscaled = ratio * g_main / config.time_scale if config.time_scale else 0.0
            latency = LatencyModel(mean_s=mean_unscaled, jitter=0.0, seed=config.seed, time_scale=config.time_scale)
            runs = await run_arms(replace(config, alpha=alpha, samples=1), workload, arms, trajectories, latency,
                                  None, None)
            spec = metrics_of(runs, {})["spec-model"]
            measured = _measured(runs)
            cells.append({"alpha": alpha, "T_over_G": ratio, "G_s": measured["G_s"], "T_s": measured["T_s"],
                          "g_s": measured["g_s"], "alpha_measured": spec.alpha, "speedup": spec.speedup,
                          "time_saved": spec.time_saved, "efficiency": spec.efficiency, "hits": spec.hits,
                          "misses": spec.misses, "equivalent": spec.equivalent})
    results = {"cells": cells, "min_efficiency": min(c["efficiency"] for c in cells),
               "equivalent": all(c["equivalent"] for c in cells), "pilot_G_s": g_main}
    doc = document("bench", {**config.params(), "workload": "sweep", "alphas": list(alphas),
                             "ratios": list(ratios)}, results)
    write_json(json_path or f"{config.out_dir}/sweep.json", doc)
    if console is not None:
        table = Table(title=f"efficiency sweep (synthetic, time scale {config.time_scale:g}, pilot G {g_main:.3f} s)")
        for column in ("alpha (set)", "T/G", "G s", "T s", "g s", "alpha (measured)", "speedup", "efficiency"):
            table.add_column(column, justify="right")
        for c in cells:
            table.add_row(f"{c['alpha']:.1f}", f"{c['T_over_G']:.1f}", f"{c['G_s']:.3f}", f"{c['T_s']:.3f}",
                          f"{c['g_s']:.3f}", f"{c['alpha_measured']:.2f}",
                          f"{c['speedup']:.3f}", f"{c['efficiency']:.3f}")
        console.print(table)
        console.print(f"minimum efficiency: {results['min_efficiency']:.3f}; equivalence: {results['equivalent']}")
    return doc
