"""Key + hit claim of whichever forethought ``PYTHONPATH`` gives, by forethought.bench.micro's method (every round
keys calls never keyed before; the claims use separate, equal call objects), through public names only, so the
same harness measures any two versions side by side:

    for i in 1 2 3; do for tree in ../old ../new; do PYTHONPATH=$tree/src .venv/bin/python \
        scripts/micro_side_by_side.py; done; done

Prints one JSON line: the tree, and the medians (µs) of key, speculate, claim, hit claim and key + hit claim."""
import asyncio
import json
import statistics
import time
from typing import Any

import forethought
from forethought import Effect, Runtime, ToolCall, tool

ROUNDS, BATCH = 400, 16


@tool(effect=Effect.READ_ONLY, threaded=False)
async def search_flights(origin: str, destination: str, max_price: float = 1000.0) -> str:
    """Find flights (returns at once: the figures are the runtime's own cost)."""
    return "no flights"


def calls(round_: int) -> list[ToolCall]:
    """``BATCH`` distinct calls, new for each round (fresh objects on every call of this function)."""
    return [ToolCall("search_flights", {"origin": f"SFO-{round_}-{i}", "destination": "Paris, France",
                                        "max_price": 450.5}) for i in range(BATCH)]


def median_us(samples_ns: list[float]) -> float:
    return statistics.median(samples_ns) / 1000


async def main() -> dict[str, Any]:
    runtime = Runtime([search_flights])
    session = runtime.session("micro")
    clock = time.perf_counter_ns
    key = search_flights.arguments.key
    keys: list[float] = []
    spec: list[float] = []
    claim: list[float] = []
    for r in range(ROUNDS):
        batch = calls(10_000_000 + r)  # keyed once only, never speculated
        start = clock()
        for call in batch:
            key(call)
        keys.append((clock() - start) / BATCH)
        guesses, own = calls(r), calls(r)
        start = clock()
        for guess in guesses:
            session.speculate(guess, source="micro")
        spec.append((clock() - start) / BATCH)
        await session.wait_speculations(timeout=5)
        outcomes = []
        start = clock()
        for call in own:
            outcomes.append(await session.execute_detailed(call))
        claim.append((clock() - start) / BATCH)
        if any(o.kind != "hit" for o in outcomes):
            raise RuntimeError(f"expected only hits, got {sorted({str(o.kind) for o in outcomes})}")
        session.end_turn()
    runtime.close()
    out = {"tree": forethought.__file__, "key_us": median_us(keys), "speculate_us": median_us(spec),
           "claim_us": median_us(claim), "hit_claim_us": median_us([a + b for a, b in zip(spec, claim, strict=True)])}
    out["key_plus_hit_us"] = out["key_us"] + out["hit_claim_us"]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
