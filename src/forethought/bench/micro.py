"""Micro benchmark of the runtime's own per-call cost: keying a call, the hit path, the miss path.

``python -m forethought.bench.micro --json PATH`` prints a table and writes
``{"command": "micro", "version", "params", "results"}``. Every figure is a median over ``rounds``; each
round times a batch of ``batch`` distinct calls (16: a busy turn of guesses) back to back
with ``time.perf_counter_ns`` and divides by the batch size. The tool is a trivial async READ_ONLY tool
with three parameters (two strings and a number), called with all three, so the figures are the
runtime's overhead, not tool time.

Every round uses calls it has never keyed before (argument values carry the round), so no figure is served
by the key's memory of recent calls (:class:`~forethought._core.calls.ArgumentSpec`) except where the real
path is: the model's own call of a hit repeats what its guess keyed a moment earlier.

* ``key_us``: ``ArgumentSpec.key(call)``: validate, normalise and encode one call's canonical key (a call
  never keyed before).
* ``hit_claim_us``: ``session.speculate(guess)`` plus ``await session.execute_detailed(call)``, where
  ``call`` is a separate ``ToolCall`` equal to ``guess`` (as the model's own call is), after the speculative
  run has finished (the event-loop turns that run the speculative task between the two are not timed);
  every claim is checked to be a hit.
* ``miss_claim_us``: what the authoritative path adds on a miss: ``await session.execute_detailed(call)``
  with nothing speculated (every outcome checked to be a miss), minus ``tool_direct_us``, the same
  trivial tool function awaited directly with the same arguments.

Extra results: ``speculate_us`` and ``claim_us`` (the two halves of ``hit_claim_us``), ``miss_execute_us``
and ``tool_direct_us`` (the two terms of ``miss_claim_us``), ``hit_claim_cold_us``: one speculate and
one claim per round with other event-loop work in between, so caches are cold (the single-call case), and
``hit_claim_dict_us``: ``hit_claim_us`` for a tool whose result is a small mutable JSON object (five flight
records), so the cost of handing every caller its own copy of a served result shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from forethought._core.calls import ToolCall
from forethought._core.runtime import Runtime, Session
from forethought._core.tools import Effect, Tool, tool
from forethought._version import __version__
from forethought.errors import ForethoughtError

DEFAULT_ROUNDS = 400
DEFAULT_BATCH = 16
TARGET_KEY_PLUS_HIT_US = 20.0
"""Issue 2's target for ``key_us + hit_claim_us`` on a 2-core machine."""

_NS_PER_US = 1000.0


def _make_tool() -> Tool:
    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def search_flights(origin: str, destination: str, max_price: float = 1000.0) -> str:
        """Find flights (a stand-in that returns at once)."""
        return "no flights"

    return search_flights


def _make_dict_tool() -> Tool:
    @tool(name="search_flights", effect=Effect.READ_ONLY, threaded=False)
    async def search_flights(origin: str, destination: str, max_price: float = 1000.0) -> dict[str, Any]:
        """Find flights (a stand-in that returns a small JSON object at once)."""
        return {"origin": origin, "flights": [{"id": f"F{i}", "price": 99.5 + i, "stops": i % 2, "airline": "Air"}
                                              for i in range(5)]}

    return search_flights


def _calls(batch: int, round_: int = 0) -> list[ToolCall]:
    """``batch`` distinct calls, new for each ``round_`` (fresh objects on every call of this function)."""
    return [ToolCall("search_flights", {"origin": f"SFO-{round_}-{i}", "destination": "Paris, France",
                                        "max_price": 450.5}) for i in range(batch)]


def _rounds_of_calls(batch: int, rounds: int, first: int) -> list[list[ToolCall]]:
    return [_calls(batch, first + r) for r in range(rounds)]


def _median_us(samples_ns: list[float]) -> float:
    return statistics.median(samples_ns) / _NS_PER_US


def measure_key(t: Tool, batches: list[list[ToolCall]]) -> float:
    """Median microseconds of one canonical key (of a call not keyed before)."""
    key = t.arguments.key
    clock = time.perf_counter_ns
    per_call: list[float] = []
    for calls in batches:
        start = clock()
        for call in calls:
            key(call)
        per_call.append((clock() - start) / len(calls))
    return _median_us(per_call)


UNTIL_DONE_S = 5.0
"""Bound on waiting for speculative runs of a trivial tool between measured rounds."""


async def _until_done(session: Session) -> None:
    await session.wait_speculations(timeout=UNTIL_DONE_S)


async def measure_hit(session: Session, batches: list[tuple[list[ToolCall], list[ToolCall]]]
                      ) -> tuple[float, float, float]:
    """Median microseconds of (speculate, claim, speculate + claim) on the hit path; each batch is the
    guesses and, as separate equal objects, the model's own calls."""
    clock = time.perf_counter_ns
    spec_ns: list[float] = []
    claim_ns: list[float] = []
    both_ns: list[float] = []
    for guesses, calls in batches:
        n = len(calls)
        start = clock()
        for guess in guesses:
            session.speculate(guess, source="micro")
        spec = (clock() - start) / n
        await _until_done(session)
        outcomes = []
        start = clock()
        for call in calls:
            outcomes.append(await session.execute_detailed(call))
        claim = (clock() - start) / n
        if any(o.kind != "hit" for o in outcomes):
            raise RuntimeError(f"expected only hits, got {sorted({o.kind for o in outcomes})}")
        session.end_turn()
        spec_ns.append(spec)
        claim_ns.append(claim)
        both_ns.append(spec + claim)
    return _median_us(spec_ns), _median_us(claim_ns), _median_us(both_ns)


async def measure_hit_cold(session: Session, pairs: list[tuple[ToolCall, ToolCall]]) -> float:
    """Median microseconds of one speculate plus one claim with event-loop work in between."""
    clock = time.perf_counter_ns
    samples: list[float] = []
    for guess, call in pairs:
        start = clock()
        session.speculate(guess, source="micro")
        spec = clock() - start
        await _until_done(session)
        start = clock()
        outcome = await session.execute_detailed(call)
        claim = clock() - start
        if outcome.kind != "hit":
            raise RuntimeError(f"expected a hit, got {outcome.kind}")
        session.end_turn()
        samples.append(spec + claim)
    return _median_us(samples)


async def measure_miss(session: Session, t: Tool, batches: list[list[ToolCall]]) -> tuple[float, float]:
    """Median microseconds of (execute_detailed on a miss, the tool function awaited directly)."""
    clock = time.perf_counter_ns
    fn = t.fn
    miss_ns: list[float] = []
    direct_ns: list[float] = []
    for calls in batches:
        n = len(calls)
        arguments = [t.arguments.canonical_arguments(c) for c in calls]
        outcomes = []
        start = clock()
        for call in calls:
            outcomes.append(await session.execute_detailed(call))
        miss_ns.append((clock() - start) / n)
        if any(o.kind != "miss" for o in outcomes):
            raise RuntimeError(f"expected only misses, got {sorted({o.kind for o in outcomes})}")
        start = clock()
        for args in arguments:
            await fn(**args)
        direct_ns.append((clock() - start) / n)
    return _median_us(miss_ns), _median_us(direct_ns)


async def run_micro(rounds: int = DEFAULT_ROUNDS, batch: int = DEFAULT_BATCH) -> dict[str, float]:
    """Run every measurement; returns the ``results`` mapping (microseconds, medians)."""
    if rounds < 1 or batch < 1:
        raise ValueError("rounds and batch must be at least 1")
    t = _make_tool()
    runtime = Runtime([t])
    next_round = iter(range(1 << 30))

    def fresh(n: int) -> list[list[ToolCall]]:
        return _rounds_of_calls(batch, n, next(next_round) * (rounds + 1))

    def hits(n: int) -> list[tuple[list[ToolCall], list[ToolCall]]]:
        first = next(next_round) * (rounds + 1)
        return [(_calls(batch, first + r), _calls(batch, first + r)) for r in range(n)]

    try:
        session = runtime.session("micro")
        warmup = max(1, rounds // 10)
        measure_key(t, fresh(warmup))
        await measure_hit(session, hits(warmup))
        await measure_miss(session, t, fresh(warmup))
        key_us = measure_key(t, fresh(rounds))
        speculate_us, claim_us, hit_us = await measure_hit(session, hits(rounds))
        miss_execute_us, direct_us = await measure_miss(session, t, fresh(rounds))
        cold_us = await measure_hit_cold(session, [(g[0], c[0]) for g, c in hits(rounds)])
        await session.close()
    finally:
        runtime.close()
    dict_runtime = Runtime([_make_dict_tool()])
    try:
        dict_session = dict_runtime.session("micro-dict")
        await measure_hit(dict_session, hits(warmup))
        _, _, dict_us = await measure_hit(dict_session, hits(rounds))
        await dict_session.close()
    finally:
        dict_runtime.close()
    return {"key_us": key_us, "hit_claim_us": hit_us, "miss_claim_us": max(0.0, miss_execute_us - direct_us),
            "speculate_us": speculate_us, "claim_us": claim_us, "miss_execute_us": miss_execute_us,
            "tool_direct_us": direct_us, "hit_claim_cold_us": cold_us, "hit_claim_dict_us": dict_us}


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": platform.platform()}


def document(results: dict[str, float], rounds: int, batch: int) -> dict[str, Any]:
    return {"command": "micro", "version": __version__,
            "params": {"rounds": rounds, "batch": batch, **machine()},
            "results": {k: round(v, 3) for k, v in results.items()}}


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


_ROWS: tuple[tuple[str, str], ...] = (
    ("key_us", "canonical key of a 3-argument call"),
    ("hit_claim_us", "speculate + claim, hit, result done"),
    ("miss_claim_us", "miss path minus the tool's own call"),
    ("speculate_us", "  speculate alone"),
    ("claim_us", "  claim (hit) alone"),
    ("miss_execute_us", "  execute on a miss, trivial tool"),
    ("tool_direct_us", "  the trivial tool awaited directly"),
    ("hit_claim_cold_us", "speculate + claim, one call, cold caches"),
    ("hit_claim_dict_us", "speculate + claim, hit, small JSON object result"),
)


def render(doc: dict[str, Any], console: Console) -> None:
    results = doc["results"]
    params = doc["params"]
    table = Table(title=f"forethought micro benchmark ({params['cpus']} CPUs, Python {params['python']}, "
                        f"medians of {params['rounds']} rounds x {params['batch']} calls)")
    table.add_column("metric")
    table.add_column("what")
    table.add_column("median µs", justify="right")
    for name, what in _ROWS:
        table.add_row(name, what, f"{results[name]:.2f}")
    console.print(table)
    total = results["key_us"] + results["hit_claim_us"]
    verdict = "[green]meets[/green]" if total <= TARGET_KEY_PLUS_HIT_US else "[red]misses[/red]"
    console.print(f"key + hit claim = {total:.2f} µs: {verdict} the {TARGET_KEY_PLUS_HIT_US:g} µs target")


app = typer.Typer(add_completion=False, help="Micro benchmark of the runtime's per-call overhead.")


@app.command()
def main(json_path: Annotated[Path | None, typer.Option("--json", help="Write machine-readable results here.")]
         = None,
         rounds: Annotated[int, typer.Option(min=1, help="Rounds per measurement (medians).")] = DEFAULT_ROUNDS,
         batch: Annotated[int, typer.Option(min=1, help="Distinct calls per round.")] = DEFAULT_BATCH) -> None:
    """Measure key, hit-claim and miss-claim medians; print a table and optionally write JSON."""
    console = Console()
    try:
        results = asyncio.run(run_micro(rounds, batch))
    except ForethoughtError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    doc = document(results, rounds, batch)
    render(doc, console)
    if json_path is not None:
        _write_json(json_path, doc)
        console.print(f"json: {json_path}")


if __name__ == "__main__":
    sys.exit(app())
