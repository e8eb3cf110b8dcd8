"""What the proxy itself costs: session start and per-call latency, direct against ``forethought mcp-proxy``.

``python -m forethought.bench.mcp.overhead [--repeats N] [--calls M] [--think-ms T] [--json PATH]`` starts an
``mcp`` SDK client the way an MCP client does, on stdio, against the fast ticket server
(:mod:`~forethought.bench.mcp.sim_server` with no injected latency) in three arms, interleaved repeat by
repeat (their order rotated):

- ``direct``: the client starts the server;
- ``proxy``: the client starts ``forethought mcp-proxy --memory -- <server>``, which trusts nothing, so it only
  relays (the cost of the hop);
- ``proxy-speculating``: ``... --memory --trust``, so every read may run early and the predictor works.

Per repeat it measures, from the moment the client spawns its command: the ``initialize`` answer
(``start_s``), the ``tools/list`` answer, and the first call's answer (``first_answer_s``); then ``calls``
calls of one read (``get_ticket``, a different ticket each, ``think_ms`` apart), each timed alone. The
results give per arm the median and spread over repeats of the session start and of the per-call median,
and the 1-minute load average before each repeat (``os.getloadavg``). The same document is written with
``--json``: ``{"command", "version", "params", "results"}`` as the other benches write it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from forethought.bench.mcp.service import ServiceShape
from forethought.bench.mcp.sim_server import server_command
from forethought.bench.report import document, write_json

ARMS = ("direct", "proxy", "proxy-speculating")
REPEATS, CALLS, THINK_MS = 5, 40, 0.0


@dataclass(frozen=True, slots=True)
class OverheadConfig:
    repeats: int = REPEATS
    calls: int = CALLS
    think_ms: float = THINK_MS
    python: str = sys.executable


@dataclass(frozen=True, slots=True)
class Run:
    """One session of one arm."""

    start_s: float
    listed_s: float
    first_answer_s: float
    per_call_s: tuple[float, ...]
    load: float


def arm_command(arm: str, python: str) -> list[str]:
    server = server_command(python, 0.0, 0.0, False, ServiceShape())
    if arm == "direct":
        return server
    flags = ["--memory", *(["--trust"] if arm == "proxy-speculating" else [])]
    return [python, "-m", "forethought.cli", "mcp-proxy", *flags, "--", *server]


async def one_session(command: Sequence[str], calls: int, think_s: float) -> Run:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    load = os.getloadavg()[0]
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(os.environ))
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - opening the null device does not block
        began = time.perf_counter()
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            started = time.perf_counter() - began
            await session.list_tools()
            listed = time.perf_counter() - began
            await session.call_tool("whoami", {})
            first = time.perf_counter() - began
            times = []
            for i in range(calls):
                if think_s:
                    await asyncio.sleep(think_s)
                t0 = time.perf_counter()
                await session.call_tool("get_ticket", {"ticket_id": f"P{i % 4}-{1 + i // 4}"})
                times.append(time.perf_counter() - t0)
    return Run(started, listed, first, tuple(times), load)


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 5), "min": round(min(values), 5),
            "max": round(max(values), 5)}


def summarize(runs: dict[str, list[Run]]) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for arm, done in runs.items():
        per_call = [statistics.median(r.per_call_s) for r in done]
        arms[arm] = {"start_s": _spread([r.start_s for r in done]),
                     "first_answer_s": _spread([r.first_answer_s for r in done]),
                     "per_call_median_s": _spread(per_call),
                     "per_call_p90_s": _spread([statistics.quantiles(r.per_call_s, n=10)[-1] for r in done]),
                     "load": [round(r.load, 2) for r in done]}
    direct = arms["direct"]
    for r in arms.values():
        r["start_minus_direct_s"] = round(r["start_s"]["median"] - direct["start_s"]["median"], 4)
        r["first_answer_minus_direct_s"] = round(r["first_answer_s"]["median"] - direct["first_answer_s"]["median"], 4)
        r["per_call_minus_direct_ms"] = round(1000 * (r["per_call_median_s"]["median"]
                                                      - direct["per_call_median_s"]["median"]), 3)
    return {"arms": arms}


async def overhead_bench(config: OverheadConfig, progress: Any = print) -> dict[str, Any]:
    runs: dict[str, list[Run]] = {arm: [] for arm in ARMS}
    for i in range(config.repeats):
        order = ARMS[i % len(ARMS):] + ARMS[:i % len(ARMS)]
        for arm in order:
            run = await one_session(arm_command(arm, config.python), config.calls, config.think_ms / 1000)
            runs[arm].append(run)
            progress(f"repeat {i + 1} {arm}: start {run.start_s:.3f} s, first answer {run.first_answer_s:.3f} s, "
                     f"per call {1000 * statistics.median(run.per_call_s):.2f} ms (load {run.load:.2f})")
    return summarize(runs)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Session start and per-call latency, direct vs the MCP proxy.")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--think-ms", type=float, default=THINK_MS)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    config = OverheadConfig(repeats=args.repeats, calls=args.calls, think_ms=args.think_ms)
    results = asyncio.run(overhead_bench(config))
    for arm, r in results["arms"].items():
        print(f"{arm:<18} start {r['start_s']['median']:.3f} s ({r['start_minus_direct_s']:+.3f}), first answer "
              f"{r['first_answer_s']['median']:.3f} s ({r['first_answer_minus_direct_s']:+.3f}), per call "
              f"{1000 * r['per_call_median_s']['median']:.2f} ms ({r['per_call_minus_direct_ms']:+.2f} ms)")
    if args.json_path:
        write_json(args.json_path, document("bench-mcp-overhead", asdict(config), results))


if __name__ == "__main__":
    main()
