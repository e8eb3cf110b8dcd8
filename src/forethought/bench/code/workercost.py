"""What the OS-isolated shadow costs: worker start, a turn's on-path cost, and the event loop's lag under burn.

``python -m forethought.bench.code.workercost [--turns N] [--json PATH]`` measures, interleaved:

* ``fork_to_ready_ms``: a worker forked by the pool's fork server until it reports confined and ready
  (off the turn's path: spares are forked while earlier turns run);
* ``turn_on_path_ms``: what a turn adds to the caller: ``predictor.begin`` (take a spare, encode the
  namespace, send ``begin``) plus the first statement's round trip until the worker reports idle;
* ``loop_lag_ms``: how late a 1 ms ``asyncio.sleep`` wakes on the agent's event loop, with no shadow, while a
  shadow burns CPU in Python (``while True``), and while it burns in C (``pow`` on a huge integer, which holds
  the worker's GIL until the kernel's CPU limit ends the worker).

Each figure is a median and a 99th percentile over the samples taken.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._core.tools import Effect, tool
from forethought.code.fence import CodeMode
from forethought.code.predictor import CodePredictor
from forethought.code.worker.limits import ShadowLimits

BURN_S = 2.0
_BURNS = {"python_burn": "while True:\n    pass\n", "c_burn": "x = pow(3, 10 ** 9)\n"}


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"median": round(statistics.median(ordered), 3), "p99": round(p99, 3), "n": len(ordered)}


def _runtime() -> Runtime:
    def fetch(url: str) -> str:
        return url

    return Runtime([tool(fetch, effect=Effect.PURE)], Policy(max_calls_per_turn=10_000, max_cost_per_turn=1e9))


async def _lag(duration_s: float) -> list[float]:
    lags = []
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        start = time.monotonic()
        await asyncio.sleep(0.001)
        lags.append((time.monotonic() - start - 0.001) * 1000)
    return lags


async def measure(turns: int) -> dict[str, Any]:
    limits = ShadowLimits(statement_cpu_s=60.0, cpu_s=BURN_S)
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=limits)
    runtime = _runtime()
    namespace: dict[str, Any] = {"items": [f"doc-{i}" for i in range(50)], "config": {"k": (1, 2)}}
    on_path: list[float] = []
    await asyncio.sleep(0.5)  # the pool's fork server starts
    for _ in range(turns):
        session = runtime.session()
        start = time.perf_counter()
        turn = predictor.begin(session, namespace)
        turn.feed("r = fetch(items[0])\n")
        await turn.settle(5.0)
        on_path.append((time.perf_counter() - start) * 1000)
        await turn.close()
        session.end_turn()
        await session.close()
        await asyncio.sleep(0.02)  # a spare is forked meanwhile, as between real turns
    lags: dict[str, list[float]] = {"no_shadow": await _lag(BURN_S)}
    for name, code in _BURNS.items():
        session = runtime.session()
        turn = predictor.begin(session, {})
        turn.feed(code)
        await asyncio.sleep(0.1)
        lags[name] = await _lag(BURN_S)
        await turn.close()
        await session.close()
    fork = [s * 1000 for s in predictor.pool.spawn_seconds]
    predictor.pool.close()
    runtime.close()
    return {"fork_to_ready_ms": _quantiles(fork), "turn_on_path_ms": _quantiles(on_path),
            "loop_lag_ms": {name: _quantiles(v) | {"max": round(max(v), 3)} for name, v in lags.items()},
            "load_average": os.getloadavg()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", default=None, help="write machine-readable results here")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.turns))
    for name, value in results.items():
        print(f"{name}: {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "bench.code.workercost", "params": {"turns": args.turns}, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
