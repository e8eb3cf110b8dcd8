"""Figures of the code benchmark: per-program medians, per-arm totals, the ideal wall time, the targets.

Ideal wall time of a program: no arm that only learns a call when its text has streamed can finish earlier
than ``max(T_stream, t_last + L, t_first + depth * L)``, where ``T_stream`` is the stream's duration, ``L``
the tool latency, ``t_first``/``t_last`` the moments the first and the last line holding an executed call
finished streaming, and ``depth`` the program's longest chain of dependent calls. The efficiency of an arm
is ``sum(ideal) / sum(wall)``: its achieved speedup over serial divided by the ideal speedup
(``serial / ideal``); 1.0 would mean the arm adds nothing to what streaming and the dependency chain force.

The bound no arm can beat (:func:`bound_wall`) is the ideal raised where a program needs more than its
calls' lines: a call whose arguments need later text (``CodeProgram.streamed_last``: the chain after it
starts once that text has streamed), or a call that only the real run may make (a write, or a call whose
speculation raised), which starts once the code block has streamed. An arm keeping the invariants of
docs/design.md finishes no earlier; ``targets`` reports the sum of bounds against spec-ptc's wall, so a run
shows whether its wall-time target is reachable at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.bench.code.stream import StreamSchedule
from forethought.bench.code.suite import CodeProgram

FENCE = "```repl\n"
ARM_FIELDS = ("wall_s", "time_saved", "speedup", "hits", "partial_hits", "misses", "wasted_tool_s", "alpha",
              "efficiency")


@dataclass(frozen=True, slots=True)
class ArmRun:
    """One run of one program on one arm."""

    wall_s: float
    hits: int
    misses: int
    wasted: int
    wasted_tool_s: float
    partial_hits: int = 0
    stdout: str = ""
    error: str = ""
    signature: tuple[Any, ...] = ()
    outbox: tuple[str, ...] = ()
    lines: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())


def median_run(runs: Sequence[ArmRun]) -> ArmRun:
    """The run whose wall time is the median (the lower middle for an even count)."""
    ordered = sorted(runs, key=lambda r: r.wall_s)
    return ordered[(len(ordered) - 1) // 2]


def ideal_wall(program: CodeProgram, plan: StreamSchedule, call_lines: Iterable[int], latency_s: float) -> float:
    """The lower bound described in the module docstring, from the lines of the calls serial made."""
    lines = sorted(set(line for line in call_lines if line > 0))
    if not lines:
        return plan.duration
    start = program.message.index(FENCE) + len(FENCE)
    code_lines = program.message[start:].split("\n")

    def line_done(line: int) -> float:
        offset = start + sum(len(text) + 1 for text in code_lines[:line]) - 1
        return plan.time_of_offset(offset)

    return max(plan.duration, line_done(lines[-1]) + latency_s, line_done(lines[0]) + program.depth * latency_s)


def bound_wall(program: CodeProgram, plan: StreamSchedule, ideal: float, latency_s: float) -> float:
    """The ideal raised by what causality and the invariants force (module docstring)."""
    bound = ideal
    message = program.message
    if program.streamed_last:
        last = message.index(program.streamed_last) + len(program.streamed_last) - 1
        bound = max(bound, plan.time_of_offset(last) + program.chain_after * latency_s)
    if program.real_run_only:
        fence = message.index("```", message.index(FENCE) + len(FENCE))  # the closing fence
        bound = max(bound, plan.time_of_offset(fence + 2) + latency_s)
    return bound


def arm_totals(medians: Mapping[str, ArmRun], serial_wall: float, ideal_total: float) -> dict[str, Any]:
    """``results.arms[ARM]`` from the per-program median runs of one arm."""
    wall = sum(r.wall_s for r in medians.values())
    hits = sum(r.hits for r in medians.values())
    partial = sum(r.partial_hits for r in medians.values())
    misses = sum(r.misses for r in medians.values())
    served = hits + partial
    return {
        "wall_s": wall,
        "time_saved": 1.0 - wall / serial_wall if serial_wall else 0.0,
        "speedup": serial_wall / wall if wall else 0.0,
        "hits": hits,
        "partial_hits": partial,
        "misses": misses,
        "wasted": sum(r.wasted for r in medians.values()),
        "wasted_tool_s": sum(r.wasted_tool_s for r in medians.values()),
        "alpha": served / (served + misses) if served + misses else 0.0,
        "efficiency": ideal_total / wall if wall else 0.0,
    }


def program_row(run: ArmRun, serial: ArmRun, ideal: float) -> dict[str, Any]:
    """``results.programs[NAME][ARM]``."""
    return {"wall_s": run.wall_s, "hits": run.hits, "misses": run.misses, "wasted": run.wasted,
            "partial_hits": run.partial_hits, "wasted_tool_s": run.wasted_tool_s,
            "speedup": serial.wall_s / run.wall_s if run.wall_s else 0.0,
            "efficiency": ideal / run.wall_s if run.wall_s else 0.0}


WALL_VS_SPTC_TARGET = 0.8
"""Issue 27: forethought's summed wall at most this fraction of spec-ptc's, with the default (code) policy."""


def targets(programs: Mapping[str, Mapping[str, Any]], arms: Mapping[str, Mapping[str, Any]],
            map_programs: Iterable[str], bound_total: float | None = None) -> dict[str, Any]:
    """The issue's targets, checked on the measured figures; with ``bound_total`` (the sum of
    :func:`bound_wall`), also whether the wall-time target is reachable by any arm."""
    out: dict[str, Any] = {}
    speedups = {name: programs[name]["forethought"]["speedup"] for name in map_programs if name in programs}
    out["map_speedup_min"] = min(speedups.values()) if speedups else None
    out["map_speedup_ok"] = bool(speedups) and min(speedups.values()) >= 2.0
    if "spec-ptc" in arms:
        fewer = [name for name, row in programs.items()
                 if "spec-ptc" in row and row["forethought"]["hits"] < row["spec-ptc"]["hits"]]
        ratio = arms["forethought"]["wall_s"] / arms["spec-ptc"]["wall_s"]
        out.update(programs_with_fewer_hits_than_sptc=fewer, hits_never_below_sptc=not fewer,
                   wall_vs_sptc=ratio, wall_vs_sptc_ok=ratio <= WALL_VS_SPTC_TARGET)
        if bound_total is not None:
            reachable = bound_total / arms["spec-ptc"]["wall_s"]
            out.update(bound_vs_sptc=reachable, wall_vs_sptc_reachable=reachable <= WALL_VS_SPTC_TARGET)
    return out


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))
