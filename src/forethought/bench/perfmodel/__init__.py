"""Performance models of speculative tool execution: what speedup to expect, and how close a run came.

* :mod:`.closed` – client-side closed forms (``T_std``, ``T_spec``, speedup, the Lemma-1 bound) and the
  efficiency figure the bench reports;
* :mod:`.engine` – the engine-side formula (API overhead, prefill and decode rates, token counts);
* :mod:`.simulator` – a deterministic discrete-event multi-agent simulator of one engine;
* :mod:`.heatmaps` – PNG heatmaps like Figure 3 of Nichols et al. (arXiv 2512.15834);
* :mod:`.command` – ``forethought model`` as a function returning its JSON document.

The derivations and their assumptions are in docs/perfmodel.md.
"""

from forethought.bench.perfmodel.closed import (
    SPEEDUP_SUPREMUM,
    SpecParams,
    SpecTimes,
    efficiency,
    efficiency_per_turn,
    lemma1_bound,
    overlap_cap,
    per_turn_speedup,
    per_turn_times,
    speculative_time,
    speedup,
    standard_time,
    times,
)
from forethought.bench.perfmodel.command import ModelCommandParams, run_model_command
from forethought.bench.perfmodel.engine import EngineParams, EngineTimes, arm_times, engine_times
from forethought.bench.perfmodel.heatmaps import plot_engine_heatmaps, plot_speedup_heatmaps
from forethought.bench.perfmodel.simulator import Arm, ArmResult, SimConfig, simulate, simulate_arms, time_saved

__all__ = [
    "SPEEDUP_SUPREMUM",
    "Arm",
    "ArmResult",
    "EngineParams",
    "EngineTimes",
    "ModelCommandParams",
    "SimConfig",
    "SpecParams",
    "SpecTimes",
    "arm_times",
    "efficiency",
    "efficiency_per_turn",
    "engine_times",
    "lemma1_bound",
    "overlap_cap",
    "per_turn_speedup",
    "per_turn_times",
    "plot_engine_heatmaps",
    "plot_speedup_heatmaps",
    "run_model_command",
    "simulate",
    "simulate_arms",
    "speculative_time",
    "speedup",
    "standard_time",
    "time_saved",
    "times",
]
