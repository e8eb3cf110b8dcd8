"""The code benchmark: streamed programs run serially, with forethought, and with spec-ptc, side by side.

For every program of :data:`~forethought.bench.code.suite.SUITE` and every repeat, each arm replays the
same stream schedule (:mod:`~forethought.bench.code.stream`) against fresh tools with the same injected
latency:

* ``serial``: the message streams, then its code runs plainly (:class:`PlainExecutor`), one call after
  another;
* ``forethought``: the :class:`CodePredictor` speculates while the message streams, then the
  :class:`CodeExecutor` runs the code, claiming speculations and running independent calls concurrently;
* ``spec-ptc``: the public spec-ptc package in its own Python 3.12 environment
  (:mod:`~forethought.bench.code.sptc`), skipped with a stated reason if that environment is missing.

Wall time runs from the first delta to the end of execution. Hits are calls served by a prediction;
forethought's own concurrent misses count as misses. Per program the median-wall run is reported;
``results.equivalent`` says whether forethought's output, error, call sequence and sent messages equal
serial's on every run. Entry point: :func:`run_code_bench`; ``python -m forethought.bench.code.runner``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._core.tools import Effect, Tool, tool
from forethought._version import __version__
from forethought.bench.code.metrics import (
    ArmRun,
    arm_totals,
    bound_wall,
    ideal_wall,
    median_run,
    program_row,
    targets,
)
from forethought.bench.code.sptc import find_environment, run_driver
from forethought.bench.code.stream import StreamSchedule, replay, schedule
from forethought.bench.code.suite import MAP_PROGRAMS, SUITE, CodeProgram
from forethought.bench.code.tools import EFFECTS, make_tools
from forethought.code.defaults import code_policy
from forethought.code.executor import CodeExecutor
from forethought.code.fence import FenceExtractor
from forethought.code.plain import PlainExecutor
from forethought.code.predictor import CodePredictor
from forethought.code.results import ExecResult
from forethought.code.worker.client import SOURCE_PEEK, SOURCE_SHADOW
from forethought.errors import WorkloadError

DEFAULT_LATENCY_S = 0.4
DEFAULT_TOKENS_PER_S = 60.0
DEFAULT_REPEATS = 3
MAX_CONCURRENCY = 32
"""spec-ptc's in-flight cap: what code mode's policy allows one session (``max_concurrent_per_session``)."""
PREDICTED = (SOURCE_SHADOW, SOURCE_PEEK)
SPTC_TIMEOUT_PER_PROGRAM_S = 60.0

Progress = Callable[[str], None]


def bench_tools(latency_s: float, outbox: list[str]) -> list[Tool]:
    """The benchmark tools as forethought tools (sync functions, run on worker threads)."""
    return [tool(fn, name=name, effect=Effect(EFFECTS[name])) for name, fn in make_tools(latency_s, outbox).items()]


def bench_policy() -> Policy:
    """The default policy as code mode uses it (:func:`~forethought.code.defaults.code_policy`): nothing tuned for
    the benchmark."""
    return code_policy()


def _summary(results: Sequence[ExecResult]) -> tuple[str, str, tuple[Any, ...]]:
    stdout = "".join(r.stdout for r in results)
    error = next((r.error_text for r in results if r.error is not None), "")
    return stdout, error, tuple(r.signature() for r in results)


async def run_serial(program: CodeProgram, plan: StreamSchedule, latency_s: float) -> ArmRun:
    """Stream the message, then run its code plainly."""
    outbox: list[str] = []
    executor = PlainExecutor(bench_tools(latency_s, outbox))
    extractor = FenceExtractor()
    start = time.monotonic()
    async for delta in replay(plan):
        extractor.feed(delta)
    extractor.finish()
    results = [await executor.run(block.code) for block in extractor.blocks]
    wall = time.monotonic() - start
    stdout, error, signature = _summary(results)
    calls = [c for r in results for c in r.calls]
    return ArmRun(wall, 0, len(calls), 0, 0.0, stdout=stdout, error=error, signature=signature,
                  outbox=tuple(outbox), lines=tuple(c.line for c in calls))


async def run_forethought(program: CodeProgram, plan: StreamSchedule, latency_s: float,
                          settle_s: float = 0.0) -> ArmRun:
    """Stream the message into the code predictor, then run the code with the speculative executor.

    ``settle_s`` > 0 (tests): before the real run, wait (at most that long) until the shadow has run all it
    can and the calls it launched have finished, so which calls hit no longer depends on how fast this machine
    is; the benchmark never waits."""
    outbox: list[str] = []
    runtime = Runtime(bench_tools(latency_s, outbox), bench_policy())
    session = runtime.session()
    namespace: dict[str, Any] = {}
    executor = CodeExecutor(session, namespace)
    start = time.monotonic()
    turn = CodePredictor().begin(session, namespace)
    async for delta in replay(plan):
        turn.feed(delta)
    blocks = turn.finish()
    if settle_s > 0:
        await turn.settle(settle_s)
        await session.wait_speculations(timeout=settle_s)  # and what it launched has run
    executor.link = turn.link
    results = [await executor.run(block.code) for block in blocks]
    wall = time.monotonic() - start
    await turn.close()
    session.end_turn()
    stats = session.stats()
    await session.close()
    runtime.close()
    calls = [c for r in results for c in r.calls]
    hits = sum(1 for c in calls if c.kind == "hit" and c.source in PREDICTED)
    partial = sum(1 for c in calls if c.kind == "partial_hit" and c.source in PREDICTED)
    stdout, error, signature = _summary(results)
    return ArmRun(wall, hits, len(calls) - hits - partial, stats.wasted, stats.wasted_s, partial,
                  stdout=stdout, error=error, signature=signature, outbox=tuple(outbox), notes=tuple(turn.notes))


def _sptc_runs(environment: Any, plans: dict[str, StreamSchedule], latency_s: float) -> dict[str, ArmRun]:
    job = {"effects": EFFECTS, "latency_s": latency_s, "max_inflight": MAX_CONCURRENCY,
           "programs": [{"name": name, "schedule": plan.as_pairs()} for name, plan in plans.items()]}
    out = run_driver(environment, job, SPTC_TIMEOUT_PER_PROGRAM_S * max(1, len(plans)))
    runs = {}
    for name, row in out["programs"].items():
        runs[name] = ArmRun(row["wall_s"], row["hits"], row["misses"], row["wasted"], row["wasted_tool_s"],
                            stdout=row["stdout"], error=row["stderr"].strip(), outbox=tuple(row["outbox"]))
    return runs


def run_code_bench(*, latency_s: float = DEFAULT_LATENCY_S, tokens_per_s: float = DEFAULT_TOKENS_PER_S,
                   repeats: int = DEFAULT_REPEATS, programs: Sequence[str] | None = None, spec_ptc: bool = True,
                   sptc_python: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the code benchmark (blocking); returns the machine-readable document (``--json``)."""
    return asyncio.run(code_bench(latency_s=latency_s, tokens_per_s=tokens_per_s, repeats=repeats,
                                  programs=programs, spec_ptc=spec_ptc, sptc_python=sptc_python, progress=progress))


async def code_bench(*, latency_s: float = DEFAULT_LATENCY_S, tokens_per_s: float = DEFAULT_TOKENS_PER_S,
                     repeats: int = DEFAULT_REPEATS, programs: Sequence[str] | None = None, spec_ptc: bool = True,
                     sptc_python: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """:func:`run_code_bench` inside a running event loop (bad parameters raise :class:`WorkloadError`)."""
    names = programs
    if repeats < 1 or latency_s < 0 or tokens_per_s <= 0:
        raise WorkloadError("code bench: repeats must be >= 1, latency >= 0 and the token rate > 0")
    selected = [p for p in SUITE if names is None or p.name in names]
    unknown = set(names or ()) - {p.name for p in SUITE}
    if unknown:
        raise WorkloadError(f"code bench: unknown program(s): {', '.join(sorted(unknown))} "
                            f"(known: {', '.join(p.name for p in SUITE)})")
    plans = {p.name: schedule(p.message, tokens_per_s) for p in selected}
    environment = find_environment(sptc_python) if spec_ptc else None
    sptc_note = "" if environment is None or environment.available else environment.reason
    if environment is None:
        sptc_note = "spec-ptc arm not requested"
    runs: dict[str, dict[str, list[ArmRun]]] = {p.name: {"serial": [], "forethought": []} for p in selected}
    for repeat in range(repeats):
        for p in selected:
            runs[p.name]["serial"].append(await run_serial(p, plans[p.name], latency_s))
            runs[p.name]["forethought"].append(await run_forethought(p, plans[p.name], latency_s))
            if progress:
                progress(f"repeat {repeat + 1}/{repeats} {p.name}: serial {runs[p.name]['serial'][-1].wall_s:.2f}s "
                         f"forethought {runs[p.name]['forethought'][-1].wall_s:.2f}s")
        if environment is not None and environment.available:
            try:
                sptc = await asyncio.to_thread(_sptc_runs, environment, plans, latency_s)
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
                sptc_note = f"spec-ptc arm failed: {exc}"
                environment = None
            else:
                for name, run in sptc.items():
                    runs[name].setdefault("spec-ptc", []).append(run)
                if progress:
                    progress(f"repeat {repeat + 1}/{repeats} spec-ptc done")
    return _document(selected, plans, runs, latency_s, tokens_per_s, repeats, environment, sptc_note)


def _document(selected: list[CodeProgram], plans: dict[str, StreamSchedule], runs: dict[str, dict[str, list[ArmRun]]],
              latency_s: float, tokens_per_s: float, repeats: int, environment: Any, sptc_note: str) -> dict[str, Any]:
    arms = ["serial", "forethought"] + (["spec-ptc"] if all("spec-ptc" in runs[p.name] for p in selected) and (
        environment is not None) else [])
    medians = {arm: {p.name: median_run(runs[p.name][arm]) for p in selected} for arm in arms}
    ideals = {p.name: ideal_wall(p, plans[p.name], medians["serial"][p.name].lines, latency_s) for p in selected}
    serial_total = sum(r.wall_s for r in medians["serial"].values())
    ideal_total = sum(ideals.values())
    programs: dict[str, dict[str, Any]] = {
        p.name: {arm: program_row(medians[arm][p.name], medians["serial"][p.name], ideals[p.name]) for arm in arms}
        for p in selected}
    bounds = {p.name: bound_wall(p, plans[p.name], ideals[p.name], latency_s) for p in selected}
    info = {p.name: {"kind": p.kind, "depth": p.depth, "ideal_wall_s": ideals[p.name], "bound_wall_s": bounds[p.name],
                     "stream_s": plans[p.name].duration} for p in selected}
    arm_rows = {arm: arm_totals(medians[arm], serial_total, ideal_total) for arm in arms}
    equivalent = all(f.signature == s.signature and f.outbox == s.outbox
                     for p in selected for f, s in zip(runs[p.name]["forethought"], runs[p.name]["serial"],
                                                       strict=True))
    results: dict[str, Any] = {"programs": programs, "arms": arm_rows, "equivalent": equivalent,
                               "targets": targets(programs, arm_rows, MAP_PROGRAMS, sum(bounds.values())),
                               "program_info": info}
    if "spec-ptc" in arms:
        results["sptc_equivalent"] = all(r.stdout == medians["serial"][p.name].stdout and r.outbox == medians[
            "serial"][p.name].outbox for p in selected for r in runs[p.name]["spec-ptc"])
        results["sptc"] = {"available": True, "version": environment.version, "python": environment.python}
    else:
        results["sptc"] = {"available": False, "reason": sptc_note}
    results["notes"] = {p.name: list(medians["forethought"][p.name].notes) for p in selected
                        if medians["forethought"][p.name].notes}
    params = {"workload": "code", "latency_s": latency_s, "tokens_per_s": tokens_per_s, "repeats": repeats,
              "programs": [p.name for p in selected], "max_concurrency": MAX_CONCURRENCY}
    return {"command": "bench", "version": __version__, "params": params, "results": results}


def format_code_bench(document: dict[str, Any]) -> str:
    """A plain-text table of a :func:`run_code_bench` document."""
    results = document["results"]
    arms = list(results["arms"])
    lines = [f"{'program':20s}" + "".join(f"{arm:>22s}" for arm in arms)]
    for name, row in results["programs"].items():
        cells = "".join(f"{row[a]['wall_s']:>8.2f}s {row[a]['hits']:>2d}h {row[a]['misses']:>2d}m "
                        f"{row[a]['wasted']:>2d}w" for a in arms)
        lines.append(f"{name:20s}{cells}")
    lines.append("")
    for arm, row in results["arms"].items():
        lines.append(f"{arm:12s} wall {row['wall_s']:7.2f}s  speedup {row['speedup']:.2f}x  hits {row['hits']}  "
                     f"misses {row['misses']}  wasted {row['wasted_tool_s']:.2f}s  alpha {row['alpha']:.2f}  "
                     f"efficiency {row['efficiency']:.2f}")
    bound = sum(info["bound_wall_s"] for info in results["program_info"].values())
    versus = results["targets"].get("bound_vs_sptc")
    lines.append(f"bound     wall {bound:7.2f}s  (no arm keeping the invariants finishes sooner"
                 + (f"; {versus:.3f}x spec-ptc's wall)" if versus is not None else ")"))
    lines.append(f"equivalent: {results['equivalent']}  targets: {json.dumps(results['targets'])}")
    if not results["sptc"]["available"]:
        lines.append(results["sptc"]["reason"])
    return "\n".join(lines)


def save_document(document: dict[str, Any], path: str | Path) -> None:
    """Write the document as JSON, atomically (a temporary file renamed into place)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=2))
    tmp.replace(target)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=DEFAULT_LATENCY_S, help="tool latency in seconds")
    parser.add_argument("--rate", type=float, default=DEFAULT_TOKENS_PER_S, help="stream rate in tokens/s")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--program", action="append", help="run only these programs (repeatable)")
    parser.add_argument("--no-spec-ptc", action="store_true", help="skip the spec-ptc arm")
    parser.add_argument("--sptc-python", help="Python 3.12 interpreter with spec-ptc installed")
    parser.add_argument("--json", type=Path, help="write the results document here")
    args = parser.parse_args(argv)
    document = run_code_bench(latency_s=args.latency, tokens_per_s=args.rate, repeats=args.repeats,
                              programs=args.program, spec_ptc=not args.no_spec_ptc, sptc_python=args.sptc_python,
                              progress=lambda line: print(line, file=sys.stderr))
    print(format_code_bench(document))
    if args.json is not None:
        save_document(document, args.json)


if __name__ == "__main__":
    main()
