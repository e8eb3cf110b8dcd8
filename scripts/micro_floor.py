"""The floor under ``forethought.bench.micro``'s key + hit claim: what the steps a hit cannot skip cost alone.

A hit is a guess keyed, recorded and launched as a task, then the model's own call (a separate, equal object)
found again and its value handed back through ``await session.execute_detailed``. This script times those
primitives alone, by the micro benchmark's method (batches of 16 calls never keyed before, medians of 400
rounds), with nothing of the runtime's own bookkeeping (policy, pricing, admission, capacity, ledger,
telemetry, lifecycle, freshness) around them:

* ``key_us``: one canonical key of a call never keyed before (``ArgumentSpec.key``), as the micro's ``key_us``;
* ``second_key_us``: the model's own call keyed again (what a claim does now);
* ``memo_lookup_us``: the cheapest stand-in for that second key conceivable: a dict lookup by the call's
  name and argument items, with a type-strict comparison of the values (not built; a floor);
* ``record_us``: the speculation's record (``Entry``, as ``Session.speculate`` builds it);
* ``task_us``: ``loop.create_task`` of a coroutine that returns at once;
* ``await_us``: an ``await`` through two coroutine levels (``Session.execute_detailed`` -> ``Claims.execute``)
  that pops a dict and builds the ``CallOutcome``;
* ``ticket_us``: the ``SpeculationTicket`` ``speculate`` returns.

It prints one JSON line: the figures, the target (half of e9e8259's key + hit claim, passed as ``--base``), the
floor with a second key and with the memo, and what is left of the target for everything else.

    .venv/bin/python scripts/micro_floor.py --base 20.6
"""

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.entry import CallKind, CallOutcome, Entry, SpeculationTicket, TicketStatus
from forethought._core.lifecycle import State
from forethought.bench.micro import _calls, _make_tool

ROUNDS, BATCH, WARMUP = 400, 16, 40


def _memo_key(call: ToolCall) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return call.name, tuple(call.arguments.items())


def _same_types(a: ToolCall, b: ToolCall) -> bool:
    return all(type(v) is type(b.arguments[k]) for k, v in a.arguments.items())


async def measure() -> dict[str, float]:
    t = _make_tool()
    key = t.arguments.key
    loop = asyncio.get_running_loop()
    clock = time.perf_counter_ns
    now = time.monotonic

    async def tool_run() -> str:
        return "no flights"

    async def inner(store: dict[Any, Any], k: Any) -> CallOutcome:
        return CallOutcome(store.pop(k), CallKind.HIT, 0.0, 0.0, "")

    async def outer(store: dict[Any, Any], k: Any) -> CallOutcome:
        return await inner(store, k)

    samples: dict[str, list[float]] = {name: [] for name in
                                       ("key_us", "second_key_us", "memo_lookup_us", "record_us", "task_us",
                                        "await_us", "ticket_us")}
    for r in range(WARMUP + ROUNDS):
        guesses, calls = _calls(BATCH, r), _calls(BATCH, r)
        start = clock()
        keys = [key(g) for g in guesses]
        samples["key_us"].append((clock() - start) / BATCH)
        start = clock()
        for c in calls:
            key(c)
        samples["second_key_us"].append((clock() - start) / BATCH)
        memo = {_memo_key(g): g for g in guesses}
        start = clock()
        for c in calls:
            found = memo.get(_memo_key(c))
            if found is None or not _same_types(found, c):
                raise RuntimeError("the memo missed an equal call")
        samples["memo_lookup_us"].append((clock() - start) / BATCH)
        start = clock()
        for g, k in zip(guesses, keys, strict=True):
            stamp = now()
            Entry(k, g, g.arguments, g.arguments, t, "micro", 1.0, stamp, stamp + 60.0, now, [("micro", 1.0)],
                  State.PROPOSED, None)
        samples["record_us"].append((clock() - start) / BATCH)
        start = clock()
        tasks = [loop.create_task(tool_run()) for _ in guesses]
        samples["task_us"].append((clock() - start) / BATCH)
        await asyncio.gather(*tasks)
        store = dict.fromkeys(range(BATCH), "no flights")
        start = clock()
        for i in range(BATCH):
            await outer(store, i)
        samples["await_us"].append((clock() - start) / BATCH)
        start = clock()
        for k in keys:
            SpeculationTicket(TicketStatus.LAUNCHED, k)
        samples["ticket_us"].append((clock() - start) / BATCH)
    return {name: statistics.median(values[WARMUP:]) / 1000 for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=float, required=True,
                        help="e9e8259's key + hit claim in µs, measured on this machine (the target is half)")
    args = parser.parse_args()
    figures = asyncio.run(measure())
    shared = figures["key_us"] + figures["record_us"] + figures["task_us"] + figures["await_us"] + figures["ticket_us"]
    # key_us appears twice: the micro's key + hit claim counts one key alone and the hit path keys the guess again.
    floor_two_keys = figures["key_us"] + shared + figures["second_key_us"]
    floor_memo = figures["key_us"] + shared + figures["memo_lookup_us"]
    target = args.base / 2
    print(json.dumps({"figures_us": {k: round(v, 3) for k, v in figures.items()}, "target_us": round(target, 3),
                      "floor_two_keys_us": round(floor_two_keys, 3), "floor_memo_us": round(floor_memo, 3),
                      "left_for_the_rest_two_keys_us": round(target - floor_two_keys, 3),
                      "left_for_the_rest_memo_us": round(target - floor_memo, 3)}))


if __name__ == "__main__":
    main()
