"""Cost of feeding a delta to the code predictor, as programs grow (the segmentation frontier at work).

``python -m forethought.bench.code.feedcost`` generates programs of 100, 1,000 and 5,000 top-level
statements (every fifth one a tool call), feeds each as a fenced message in 4-character deltas and reports
the mean time of one ``CodeTurn.feed`` call over all deltas, the first tenth and the last tenth. Flat
figures mean a delta costs the same at the end of a long program as at its start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._core.tools import Effect, tool
from forethought.code.predictor import CodePredictor

DELTA_CHARS = 4
SIZES = (100, 1_000, 5_000)


def _program(statements: int) -> str:
    lines = [f"x{i} = fetch('doc-{i}')" if i % 5 == 0 else f"y{i} = {i} * 2 + len('abc')"
             for i in range(statements)]
    return "```python\n" + "\n".join(lines) + "\n```\n"


async def measure(statements: int) -> dict[str, Any]:
    def fetch(url: str) -> str:
        return url

    runtime = Runtime([tool(fetch, effect=Effect.PURE)], Policy(max_calls_per_turn=1_000_000,
                                                                max_cost_per_turn=1e12))
    session = runtime.session()
    turn = CodePredictor().begin(session, {})
    message = _program(statements)
    costs = []
    for i in range(0, len(message), DELTA_CHARS):
        start = time.perf_counter()
        turn.feed(message[i:i + DELTA_CHARS])
        costs.append(time.perf_counter() - start)
        if i % 400 == 0:
            await asyncio.sleep(0)
    turn.finish()
    await turn.close()
    session.end_turn()
    await session.close()
    runtime.close()
    tenth = max(1, len(costs) // 10)
    return {"statements": statements, "deltas": len(costs), "mean_us": statistics.mean(costs) * 1e6,
            "first_tenth_us": statistics.mean(costs[:tenth]) * 1e6,
            "last_tenth_us": statistics.mean(costs[-tenth:]) * 1e6}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="feed cost per delta of the code predictor")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args(argv)
    rows = [asyncio.run(measure(n)) for n in args.sizes]
    print(json.dumps({"command": "code-feedcost", "results": rows}, indent=2))


if __name__ == "__main__":
    main()
