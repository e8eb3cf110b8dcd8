"""The loop bench's command: ``python -m forethought.bench.loop`` now, ``forethought bench --workload loop`` once
mounted (the CLI calls :func:`run_loop_command`). Prints one table and writes the ``--json`` document."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from forethought.bench.loop.arms import ARMS
from forethought.bench.loop.runner import LoopBenchConfig, run_loop_bench
from forethought.bench.report import write_json

__all__ = ["format_loop_results", "main", "run_loop_command"]


def format_loop_results(doc: dict[str, Any]) -> str:
    """The document as a table: per arm, seconds and time saved (median [min, max]), hits, checks."""
    results = doc["results"]
    lines = [f"{'arm':<18} {'seconds':>22} {'time saved':>26} {'per task':>9} {'hits':>9} {'early writes':>13} "
             f"{'identical':>9} {'stream':>7}"]
    for arm, r in results["arms"].items():
        s, t = r["seconds"], r["time_saved"]
        stream = "-" if r["stream_unchanged"] is None else "same" if r["stream_unchanged"] else "DIFF"
        lines.append(f"{arm:<18} {s['median']:>8.2f} [{s['min']:.2f}, {s['max']:.2f}] "
                     f"{100 * t['median']:>+9.1f}% [{100 * t['min']:+.1f}, {100 * t['max']:+.1f}] "
                     f"{100 * r['per_task_saved_median']:>+8.1f}% {r['hits']:>4}/{r['calls']:<4} "
                     f"{r['early_non_read_runs']:>13} {'yes' if r['equivalent'] else 'NO':>9} {stream:>7}")
    ratios = results["ratios"]
    load = doc["params"]["load_average"]
    lines.append("daemon saving / proxy's: " + _ratio(ratios.get("daemon_over_proxy"))
                 + ";  / oracle's: " + _ratio(ratios.get("daemon_over_oracle"))
                 + f";  load average {load['start'][0]:.2f} -> {load['end'][0]:.2f}")
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


async def run_loop_command(config: LoopBenchConfig, console: Any, json_path: str | None) -> dict[str, Any]:
    """What ``forethought bench --workload loop`` runs: the bench, its table on ``console``, the JSON file."""
    doc = await run_loop_bench(config, progress=lambda line: console.print(line, style="dim"))
    console.print(format_loop_results(doc))
    if json_path:
        write_json(json_path, doc)
    return doc


class _Console:
    def print(self, text: str, style: str | None = None) -> None:
        print(text, file=sys.stderr if style == "dim" else sys.stdout, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forethought.bench.loop", description=__doc__)
    parser.add_argument("--suite", choices=("notes", "repo"), default="notes")
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--training", type=int, default=12, help="untimed tasks the learning arms run first")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.3, help="notes suite: the server's latency per call")
    parser.add_argument("--time-scale", type=float, default=1.0, help="scales the model's timing")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--speculator-error-rate", type=float, default=0.3)
    parser.add_argument("--project", default=".", help="repo suite: where `make mcp-servers` installed servers")
    parser.add_argument("--json", dest="json_path", default=None)
    options = parser.parse_args(argv)
    config = LoopBenchConfig(options.suite, options.tasks, options.training, options.repeats, options.seed,
                             options.latency, options.time_scale, options.speculator_error_rate,
                             arms=tuple(a for a in options.arms.split(",") if a), project=options.project)
    doc = asyncio.run(run_loop_command(config, _Console(), options.json_path))
    return 0 if doc["results"]["equivalent"] else 1
