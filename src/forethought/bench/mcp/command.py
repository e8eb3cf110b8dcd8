"""``forethought bench --workload mcp``: the MCP suites (BFCL over MCP, real servers on a repository), one report.

:func:`run_mcp_bench` runs the suites the command names (:mod:`~forethought.bench.mcp.runner` for ``bfcl``,
:mod:`~forethought.bench.mcp.repo_bench` for ``repo``), prints each one's table and writes the JSON document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forethought.bench.mcp.repo_bench import RepoBenchConfig, repo_bench
from forethought.bench.mcp.runner import BFCL_ARMS, TRAIN_FOLD, McpBenchConfig, mcp_bench
from forethought.bench.report import document, write_json

__all__ = ["format_results", "run_mcp_bench"]


def format_results(results: dict[str, Any]) -> str:
    lines = [f"{'arm':<12} {'seconds':>8} {'saved':>7} {'median':>7} {'hits':>5} {'upstream':>9} {'ratio':>6} "
             f"{'early-writes':>12} identical"]
    for arm, r in results["arms"].items():
        lines.append(f"{arm:<12} {r['seconds']:>8.2f} {r['time_saved']:>7.1%} {r['time_saved_median']:>7.1%} "
                     f"{r['hits']:>5} {r['upstream_calls']:>9} {r['upstream_ratio']:>6.2f} "
                     f"{r['early_non_read_runs']:>12} {r['identical_to_direct']}")
    return "\n".join(lines)


async def run_mcp_bench(trajectories: int, latency_s: float, seed: int, console: Any,
                        json_path: str | None, suite: str = "bfcl", arms: Sequence[str] = BFCL_ARMS,
                        in_process: bool = False) -> dict[str, Any]:
    """The ``bench --workload mcp`` command. ``bfcl``: think time equal to the mean tool latency; ``repo``: the
    real servers on a generated repository (:mod:`~forethought.bench.mcp.repo_bench`), ``trajectories`` tasks;
    ``both``: each, under ``results.suites``. ``in_process``: the proxies' pattern predictor on their loop."""
    def progress(line: str) -> None:
        console.print(line, style="dim")

    suites: dict[str, dict[str, Any]] = {}
    if suite in ("bfcl", "both"):
        config = McpBenchConfig(trajectories=trajectories, training=min(TRAIN_FOLD, 4 * trajectories),
                                think_s=latency_s, latency_s=latency_s, seed=seed, arms=("direct", *arms),
                                in_process=in_process)
        suites["bfcl"] = await mcp_bench(config, progress=progress)
    if suite in ("repo", "both"):
        suites["repo"] = await repo_bench(RepoBenchConfig(tasks=trajectories, seed=seed, in_process=in_process),
                                            progress=progress)
    for name, results in suites.items():
        console.print(f"suite {name}:")
        console.print(format_results(results))
    results = next(iter(suites.values())) if len(suites) == 1 else {
        "suites": suites, "equivalent": all(r["equivalent"] for r in suites.values())}
    params = results.get("params", {"suites": {k: v["params"] for k, v in suites.items()}})
    doc = document("bench", {"workload": "mcp", "suite": suite, **params}, results)
    if json_path:
        write_json(json_path, doc)
    return doc
