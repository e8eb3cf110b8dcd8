"""Does prediction stay cheap as history grows? (``python -m forethought.bench.predict_scale``)

A proxy or daemon learns for weeks: a predictor whose cost grows with what it has seen becomes the
bottleneck it was meant to remove. This benchmark plays a long generated history
(:mod:`forethought.bench.scale_sessions`: by default 1,000 sessions, listings of about 50 KB, twenty
tools, values that rarely repeat) to one :class:`~forethought.predictors.patterns.PatternPredictor` the
way an agent lives it: before every call ``predict_now`` on the context the agent has, then ``observe``
of the call. It reports, per window of sessions (default 100), the CPU time of each prediction and each
observation (the thread's CPU time, which a busy machine inflates less than wall time: p50, p99, max) and
the exact top-1 share, and the process's resident memory after each window (after a garbage collection),
so that growth with history shows as a trend across windows. ``results.final`` holds the last window's
percentiles and the memory growth from the session named by ``--warm`` (200) to the end.

It also scores the generated date and time suite (:mod:`forethought.bench.date_suite`, ``results.dates``):
the share of sentences whose dates and times the predictor's date derivation reads exactly.

Deterministic inputs (a seed); timings and memory are the machine's: run it on a quiet machine, several
times, and report medians with their spread and the load average.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from forethought.bench import date_suite
from forethought.bench.predict_eval import latency_summary
from forethought.bench.scale_sessions import ScaleConfig, scale_sessions
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import contexts

TARGET_P99_MS = 10.0
"""The issue's budget: predict and observe p99 of CPU per call, after the history."""
TARGET_GROWTH_MB = 50.0
"""The issue's budget: resident memory growth from the warm-up session to the end."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What to play and how to report it."""

    sessions: int = 1000
    output_kb: int = 50
    seed: int = 29
    window: int = 100
    """Sessions per reported window."""
    warm: int = 200
    """Memory growth is measured from the end of this session."""
    date_cases: int = 700
    date_seed: int = 11


def resident_mb() -> float:
    """The process's resident memory now, in MB (Linux ``/proc``; elsewhere the peak so far)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _summary(samples: Sequence[float]) -> dict[str, float]:
    summary = latency_summary(samples)
    return {**summary, "count": len(samples)} if summary else {"count": 0}


def run_predict_scale(config: RunConfig | None = None, predictor: PatternPredictor | None = None) -> dict[str, Any]:
    """Play the generated history to ``predictor`` (a new one by default); the timings, memory and accuracy."""
    config = config or RunConfig()
    predictor = predictor or PatternPredictor()
    gc.collect()
    start_mb = resident_mb()
    windows: list[dict[str, Any]] = []
    memory: dict[int, float] = {}
    predict_cpu: list[float] = []
    observe_cpu: list[float] = []
    exact = positions = 0
    wall = time.perf_counter()
    generated = scale_sessions(ScaleConfig(config.sessions, config.output_kb, config.seed))
    for n, (session, system) in enumerate(generated, start=1):
        head = ({"role": "system", "content": system},)
        for context, observed, _ in contexts(session):
            context = replace(context, messages=(*head, *context.messages))
            cpu = time.thread_time()
            predictions = predictor.predict_now(context)
            predict_cpu.append(time.thread_time() - cpu)
            exact += int(bool(predictions) and predictions[0].call == observed.call)
            positions += 1
            cpu = time.thread_time()
            predictor.observe(context, observed)
            observe_cpu.append(time.thread_time() - cpu)
        if n % config.window == 0 or n == config.sessions:
            gc.collect()
            memory[n] = resident_mb()
            windows.append({"sessions": n, "calls": len(predict_cpu), "predict_cpu": _summary(predict_cpu),
                            "observe_cpu": _summary(observe_cpu), "exact_top1": exact / max(1, positions),
                            "rss_mb": round(memory[n], 1), "counters": len(predictor.counts)})
            predict_cpu, observe_cpu, exact, positions = [], [], 0, 0
    wall = time.perf_counter() - wall
    if config.warm not in memory:
        memory[config.warm] = memory[min(memory, key=lambda k: abs(k - config.warm))] if memory else start_mb
    last = windows[-1] if windows else {}
    growth = memory.get(config.sessions, start_mb) - memory[config.warm]
    final = {"predict_cpu_p99_ms": last.get("predict_cpu", {}).get("p99_ms"),
             "observe_cpu_p99_ms": last.get("observe_cpu", {}).get("p99_ms"),
             "predict_cpu_p50_ms": last.get("predict_cpu", {}).get("p50_ms"),
             "observe_cpu_p50_ms": last.get("observe_cpu", {}).get("p50_ms"),
             "memory_growth_mb": round(growth, 1), "rss_start_mb": round(start_mb, 1),
             "rss_end_mb": round(memory.get(config.sessions, start_mb), 1)}
    final["within_targets"] = bool(
        final["predict_cpu_p99_ms"] is not None and final["predict_cpu_p99_ms"] <= TARGET_P99_MS
        and final["observe_cpu_p99_ms"] is not None and final["observe_cpu_p99_ms"] <= TARGET_P99_MS
        and growth <= TARGET_GROWTH_MB)
    dates = date_suite.score_suite(date_suite.date_suite(config.date_cases, config.date_seed))
    return {"windows": windows, "final": final, "dates": dates, "wall_s": round(wall, 1),
            "config": asdict(config)}


def _print(results: dict[str, Any]) -> None:
    print(f"{'sessions':>8} {'calls':>6} {'pred p50':>9} {'pred p99':>9} {'obs p50':>8} {'obs p99':>8} "
          f"{'exact1':>7} {'rss MB':>8} {'counters':>9}")
    for w in results["windows"]:
        p, o = w["predict_cpu"], w["observe_cpu"]
        print(f"{w['sessions']:>8} {w['calls']:>6} {p.get('p50_ms', 0):>9.2f} {p.get('p99_ms', 0):>9.2f} "
              f"{o.get('p50_ms', 0):>8.2f} {o.get('p99_ms', 0):>8.2f} {w['exact_top1']:>7.3f} {w['rss_mb']:>8.1f} "
              f"{w['counters']:>9}")
    print(json.dumps(results["final"]))
    dates = results["dates"]
    print(f"dates: {dates['exact']:.3f} of {dates['cases']} exact; " + ", ".join(
        f"{family} {entry['exact']:.2f}" for family, entry in dates["by_family"].items()))


_DEFAULTS = RunConfig()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--sessions", type=int, default=_DEFAULTS.sessions)
    parser.add_argument("--output-kb", type=int, default=_DEFAULTS.output_kb)
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    parser.add_argument("--window", type=int, default=_DEFAULTS.window)
    parser.add_argument("--warm", type=int, default=_DEFAULTS.warm)
    parser.add_argument("--date-cases", type=int, default=_DEFAULTS.date_cases)
    args = parser.parse_args(argv)
    config = RunConfig(args.sessions, args.output_kb, args.seed, args.window, args.warm, args.date_cases)
    results = run_predict_scale(config)
    _print(results)
    if args.json_path:
        from forethought.bench.report import document, write_json

        write_json(args.json_path, document("predict-scale", results["config"], results))


if __name__ == "__main__":
    main()
