"""Benchmark metrics: time saved, acceptance, waste, equivalence and efficiency per arm.

Definitions (all measured in the same run, side by side):

* ``wall_s``: the sum over trajectories of each conversation's wall time (agent time, as one agent sees it).
* ``time_saved``: ``1 - wall_s / serial wall_s``; ``speedup``: ``serial wall_s / wall_s``.
* ``alpha``: the fraction of authoritative calls whose tool time overlapped generation: served by a
  speculation (hit or partial hit) or dispatched before the model's message ended.
* ``efficiency``: measured speedup divided by the model's bound for the measured G, g, T and hits. Per
  step the bound is the per-step form of Lemma 1: the step's generation G and tool times T_i come from
  the serial arm; each overlapped call became known at time k_i (0 for a pattern guess at step start, the
  speculator's measured time to its first closed call for a model guess, the moment its arguments closed
  for streamed dispatch); the best the step can take is Lemma 1's ``max(G, k + H) + (sum T_i - H)`` with
  H the overlapped calls' tool time and k the earliest k_i — for one call exactly ``max(G, k + T)`` on a
  hit and ``G + T`` on a miss (:func:`forethought.bench.perfmodel.per_turn_times`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from forethought.agent.loop import ToolRecord
from forethought.bench.perfmodel import per_turn_times
from forethought.bench.runner import ArmRun, TrajectoryRun

OVERLAPPED = ("hit", "partial_hit")
STREAM_SOURCE = "stream"
MODEL_SOURCE = "model"


@dataclass(frozen=True, slots=True)
class ArmMetrics:
    """The fields ``results.arms[ARM]`` of ``forethought bench --json`` (plus a few more)."""

    wall_s: float
    time_saved: float
    speedup: float
    hits: int
    partial_hits: int
    misses: int
    early_dispatched: int
    wasted_tool_s: float
    saved_tool_s: float
    alpha: float
    efficiency: float
    speculator_tokens: int
    errors: int
    equivalent: bool
    state_changing_hits: int = 0
    """Hits (served speculations) whose call changes backend state: committed snapshots."""
    state_changing_saved_s: float = 0.0
    """Tool seconds those state-changing hits saved."""
    launched: int = 0
    rejected: int = 0
    preempted: int = 0
    """Guesses cancelled to make room for more valuable ones."""
    backoffs: int = 0
    """Changes of the runtime's load state (normal, reduced, off) during the arm."""
    withdrawn: int = 0
    """Guesses withdrawn when new evidence (a speculator's samples) made them no longer worth running."""
    deferred: int = 0
    """Guesses held back until a speculator's samples had ended (worth more then than at once)."""
    wasted_by_source: dict[str, float] = field(default_factory=dict)
    """``wasted_tool_s`` split by the source of the wasted guess."""


def _overlapped(record: ToolRecord) -> bool:
    return record.outcome in OVERLAPPED or record.early


def _known_at(record: ToolRecord, speculator_g: float) -> float:
    if record.early or record.source == STREAM_SOURCE:
        return record.closed_at
    if record.source == MODEL_SOURCE:
        return speculator_g
    return 0.0


def optimal_time(serial: TrajectoryRun, run: TrajectoryRun, speculator_g: float) -> tuple[float, float]:
    """(serial model time, best achievable time) for ``run``'s hits over ``serial``'s measured G and T.

    Each step becomes one turn of :func:`forethought.bench.perfmodel.per_turn_times` with T = the overlapped
    calls' tool time and g = the earliest moment one of them was known (capped at G: the authoritative
    call starts at G anyway); the step's other tool time is added unchanged.
    """
    gens: list[float] = []
    known: list[float] = []
    hideable: list[float] = []
    hits: list[bool] = []
    rest = 0.0
    s_index = r_index = 0
    for s_step, r_step in zip(serial.steps, run.steps, strict=False):
        s_records = serial.records[s_index:s_index + s_step.calls]
        r_records = run.records[r_index:r_index + r_step.calls]
        s_index += s_step.calls
        r_index += r_step.calls
        tool_times = [r.tool_s for r in s_records]
        overlapped = [(t, _known_at(r, speculator_g)) for t, r in zip(tool_times, r_records, strict=False)
                      if _overlapped(r)]
        hidden = sum(t for t, _ in overlapped)
        gens.append(s_step.generation_s)
        hideable.append(hidden)
        known.append(min(s_step.generation_s, min((k for _, k in overlapped), default=0.0)))
        hits.append(bool(overlapped))
        rest += sum(tool_times) - hidden
    times = per_turn_times(gens, known, hideable, hits)
    return times.standard_s + rest, times.speculative_s + rest


def equivalent(serial: TrajectoryRun, run: TrajectoryRun) -> bool:
    """Same tool outputs in the same order, same final state, same error (if any)."""
    return (serial.outputs == run.outputs and serial.fingerprint == run.fingerprint
            and serial.error == run.error)


def arm_metrics(serial: ArmRun, arm: ArmRun,
                state_changing: Mapping[str, frozenset[int]] | None = None) -> ArmMetrics:
    """Metrics of ``arm`` against the ``serial`` arm (trajectories matched by id)."""
    by_id = {r.trajectory_id: r for r in serial.runs}
    wall = sum(r.wall_s for r in arm.runs)
    serial_wall = sum(by_id[r.trajectory_id].wall_s for r in arm.runs)
    records = [rec for r in arm.runs for rec in r.records]
    calls = sum(1 for rec in records if rec.outcome != "error")
    overlapped = sum(1 for rec in records if rec.outcome != "error" and _overlapped(rec))
    model_serial = model_best = 0.0
    for run in arm.runs:
        s, o = optimal_time(by_id[run.trajectory_id], run, arm.speculator_first_close_s)
        model_serial += s
        model_best += o
    speedup = serial_wall / wall if wall > 0 else 1.0
    bound = model_serial / model_best if model_best > 0 else 1.0
    stats = [r.stats for r in arm.runs]
    return ArmMetrics(
        wall_s=wall,
        time_saved=1.0 - wall / serial_wall if serial_wall > 0 else 0.0,
        speedup=speedup,
        hits=sum(s.hits for s in stats),
        partial_hits=sum(s.partial_hits for s in stats),
        misses=sum(s.misses for s in stats),
        early_dispatched=sum(1 for rec in records if rec.early),
        wasted_tool_s=sum(s.wasted_s for s in stats),
        saved_tool_s=sum(s.saved_s for s in stats),
        alpha=overlapped / calls if calls else 0.0,
        efficiency=speedup / bound if bound > 0 else 0.0,
        speculator_tokens=arm.speculator_tokens,
        errors=sum(1 for r in arm.runs if r.error),
        equivalent=all(equivalent(by_id[r.trajectory_id], r) for r in arm.runs),
        state_changing_hits=len(changing := _state_changing_hits(arm, state_changing or {})),
        state_changing_saved_s=sum(rec.saved_s for rec in changing),
        launched=sum(s.launched for s in stats),
        rejected=sum(s.rejected for s in stats),
        preempted=sum(s.preempted for s in stats),
        backoffs=arm.backoffs,
        withdrawn=sum(s.withdrawn for s in stats),
        deferred=sum(s.deferred for s in stats),
        wasted_by_source=dict(arm.wasted_by_source),
    )


def _state_changing_hits(arm: ArmRun, state_changing: Mapping[str, frozenset[int]]) -> list[ToolRecord]:
    """The served calls that changed backend state (their snapshots were committed)."""
    return [rec for run in arm.runs for i, rec in enumerate(run.records)
            if rec.outcome in OVERLAPPED and i in state_changing.get(run.trajectory_id, frozenset())]


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
