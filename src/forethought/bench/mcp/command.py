"""``forethought bench --workload mcp``: the MCP suites, one report.

:func:`run_mcp_bench` runs the suites the command names, prints each one's table and writes the JSON document:
``bfcl`` (BFCL over MCP, :mod:`~forethought.bench.mcp.runner`), ``repo`` (the real filesystem and git servers on
a generated repository, :mod:`~forethought.bench.mcp.repo_bench`), ``latency`` and ``serial`` (the ticket service
with reads of a few hundred milliseconds, handling calls at once or one at a time,
:mod:`~forethought.bench.mcp.service_bench`); ``both`` is bfcl and repo, ``all`` every suite. The same runs as
``python -m forethought.bench.mcp.command --suite S [--trajectories N] [--json PATH]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forethought.bench.mcp.repo_bench import RepoBenchConfig, repo_bench
from forethought.bench.mcp.runner import BFCL_ARMS, TRAIN_FOLD, McpBenchConfig, mcp_bench
from forethought.bench.mcp.service_bench import ServiceBenchConfig, service_bench
from forethought.bench.report import document, write_json

__all__ = ["SUITES", "format_results", "run_mcp_bench"]

SUITES = ("bfcl", "repo", "latency", "serial", "both", "all")


def format_results(results: dict[str, Any]) -> str:
    lines = [f"{'arm':<12} {'seconds':>8} {'saved':>7} {'median':>7} {'of oracle':>9} {'hits':>5} {'upstream':>9} "
             f"{'ratio':>6} {'early-writes':>12} identical"]
    for arm, r in results["arms"].items():
        share = r.get("oracle_share")
        lines.append(f"{arm:<12} {r['seconds']:>8.2f} {r['time_saved']:>7.1%} {r['time_saved_median']:>7.1%} "
                     f"{share if share is not None else float('nan'):>9.2f} {r['hits']:>5} {r['upstream_calls']:>9} "
                     f"{r['upstream_ratio']:>6.2f} {r['early_non_read_runs']:>12} {r['identical_to_direct']}")
    for arm, r in results["arms"].items():
        for tool, t in sorted(r.get("tools", {}).items()):
            if t.get("decision") or t.get("hits"):
                lines.append(f"  {arm} {tool}: {t.get('hits', 0)} hits of {t.get('calls', 0)}, "
                             f"{t.get('priced_out', 0)} priced out; {t.get('decision', '')}")
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
    if suite in ("bfcl", "both", "all"):
        config = McpBenchConfig(trajectories=trajectories, training=min(TRAIN_FOLD, 4 * trajectories),
                                think_s=latency_s, latency_s=latency_s, seed=seed, arms=("direct", *arms),
                                in_process=in_process)
        suites["bfcl"] = await mcp_bench(config, progress=progress)
    if suite in ("repo", "both", "all"):
        suites["repo"] = await repo_bench(RepoBenchConfig(tasks=trajectories, seed=seed, in_process=in_process),
                                            progress=progress)
    for name in ("latency", "serial"):
        if suite in (name, "all"):
            config_s = ServiceBenchConfig(tasks=trajectories, seed=seed, serial=name == "serial")
            suites[name] = await service_bench(config_s, progress=progress)
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


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m forethought.bench.mcp.command``: the suites without the ``forethought`` CLI's options."""
    import argparse
    import asyncio

    from rich.console import Console

    parser = argparse.ArgumentParser(description="The MCP bench's suites.")
    parser.add_argument("--suite", choices=SUITES, default="bfcl")
    parser.add_argument("--trajectories", type=int, default=12)
    parser.add_argument("--tool-latency", type=float, default=0.25, help="bfcl suite: mean tool latency (s).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(a for a in BFCL_ARMS if a != "direct"))
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    asyncio.run(run_mcp_bench(args.trajectories, args.tool_latency, args.seed, Console(stderr=True), args.json_path,
                              suite=args.suite, arms=tuple(a for a in args.arms.split(",") if a)))


if __name__ == "__main__":
    main()
