"""``forethought model``: closed-form and simulated speedups as one machine-readable result.

:func:`run_model_command` evaluates the client-side closed form, the engine-side formula, optionally the
multi-agent simulator for each agent count, draws the heatmaps when given a directory, and returns (and
optionally writes, atomically) ``{"command", "version", "params", "results"}``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forethought._version import __version__
from forethought.bench.perfmodel._checks import finite_nonnegative, positive_int, require
from forethought.bench.perfmodel.closed import SPEEDUP_SUPREMUM, SpecParams, lemma1_bound, times
from forethought.bench.perfmodel.engine import EngineParams, engine_params_of, engine_times
from forethought.bench.perfmodel.heatmaps import DEFAULT_ALPHAS, plot_engine_heatmaps, plot_speedup_heatmaps
from forethought.bench.perfmodel.simulator import Arm, SimConfig, simulate_arms, time_saved

COMMAND = "model"
SPEEDUP_FIGURE = "speedup_heatmaps.png"
ENGINE_FIGURE = "engine_heatmaps.png"
RESULT_FILE_MODE = 0o644  # mkstemp creates 0600; results are meant to be shared


@dataclass(frozen=True, slots=True)
class ModelCommandParams:
    """Inputs of ``forethought model``; ``generation_s=None`` derives ``G`` from the token parameters."""

    alpha: float = 0.7
    generation_s: float | None = None
    speculator_s: float = 0.3
    tool_s: float = 1.0
    turns: int = 10
    api_overhead_s: float = 0.05
    prefill_tokens_per_s: float = 5000.0
    decode_tokens_per_s: float = 50.0
    call_tokens: int = 40
    reasoning_tokens: int = 60
    result_tokens: int = 200
    reasoning_resubmitted: bool = True
    simulate: bool = True
    agents: tuple[int, ...] = (1, 8, 32)
    slots: int = 16
    batch_slowdown: float = 0.01
    cache_tokens: int = 200_000
    prompt_tokens: int = 1000
    tasks_per_agent: int = 2
    tool_jitter: float = 0.0
    seed: int = 0
    alphas: tuple[float, ...] = DEFAULT_ALPHAS

    def __post_init__(self) -> None:
        if self.generation_s is not None:
            finite_nonnegative("generation_s", self.generation_s)
        require(len(self.agents) > 0, "agents needs at least one agent count")
        for m in self.agents:
            positive_int("agents", m)
        self.engine_params()  # validates the engine parameters
        if self.simulate:
            self.sim_config(self.agents[0])  # validates the simulator parameters

    def engine_params(self) -> EngineParams:
        return engine_params_of(self)

    def sim_config(self, agents: int) -> SimConfig:
        return SimConfig(
            agents=agents,
            tasks_per_agent=self.tasks_per_agent,
            turns=self.turns,
            slots=self.slots,
            decode_tokens_per_s=self.decode_tokens_per_s,
            batch_slowdown=self.batch_slowdown,
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            cache_tokens=self.cache_tokens,
            prompt_tokens=self.prompt_tokens,
            reasoning_tokens=self.reasoning_tokens,
            call_tokens=self.call_tokens,
            result_tokens=self.result_tokens,
            reasoning_resubmitted=self.reasoning_resubmitted,
            tool_s=self.tool_s,
            tool_jitter=self.tool_jitter,
            speculator_s=self.speculator_s,
            alpha=self.alpha,
            api_overhead_s=self.api_overhead_s,
            seed=self.seed,
        )


def _closed_form(p: ModelCommandParams) -> dict[str, float]:
    G = p.generation_s if p.generation_s is not None else p.engine_params().generation_s
    spec = SpecParams(alpha=p.alpha, G=G, g=p.speculator_s, T=p.tool_s, N=p.turns)
    t = times(spec)
    return {
        "alpha": p.alpha,
        "G": G,
        "g": p.speculator_s,
        "T": p.tool_s,
        "turns": p.turns,
        "standard_s": t.standard_s,
        "speculative_s": t.speculative_s,
        "speedup": t.speedup,
        "time_saved": t.time_saved,
        "lemma1_bound": lemma1_bound(G, p.speculator_s, p.tool_s),
        "supremum": SPEEDUP_SUPREMUM,
    }


def _engine(p: ModelCommandParams) -> dict[str, float]:
    ep = p.engine_params()
    t = engine_times(ep)
    return {
        "generation_s": ep.generation_s,
        "round_trip_s": ep.round_trip_s,
        "reprefill_tokens": ep.reprefill_tokens,
        "serial_s": t.serial_s,
        "client_s": t.client_s,
        "engine_s": t.engine_s,
        "speedup_client": t.speedup_client,
        "speedup_engine": t.speedup_engine,
        "time_saved_client": t.time_saved_client,
        "time_saved_engine": t.time_saved_engine,
        "engine_gain": t.engine_gain,
    }


def _simulation(p: ModelCommandParams) -> tuple[dict[str, Any], dict[str, Any]]:
    detail: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for m in p.agents:
        results = simulate_arms(p.sim_config(m))
        serial = results[Arm.SERIAL]
        detail[str(m)] = {arm.value: {**r.as_dict(), "time_saved": time_saved(r, serial)} for arm, r in results.items()}
        summary[str(m)] = {
            arm.value: {"tokens_per_s": r.tokens_per_s, "time_saved": time_saved(r, serial)}
            for arm, r in results.items()
        }
    return detail, summary


def _write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, RESULT_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_model_command(
    params: ModelCommandParams | None = None, *, json_path: Path | None = None, out_dir: Path | None = None
) -> dict[str, Any]:
    """Evaluate the models for ``params``; write heatmaps under ``out_dir`` and the result to ``json_path``."""
    p = params if params is not None else ModelCommandParams()
    results: dict[str, Any] = {"closed_form": _closed_form(p), "engine": _engine(p), "figures": {}}
    if p.simulate:
        results["simulation"], results["agents"] = _simulation(p)
    if out_dir is not None:
        speedup_png = plot_speedup_heatmaps(out_dir / SPEEDUP_FIGURE, alphas=p.alphas)
        engine = results["engine"]
        G = engine["generation_s"]
        engine_png = plot_engine_heatmaps(
            out_dir / ENGINE_FIGURE,
            alphas=p.alphas,
            g_ratio=p.speculator_s / G,
            post_ratio=p.api_overhead_s / G,
        )
        results["figures"] = {"speedup_heatmaps": str(speedup_png), "engine_heatmaps": str(engine_png)}
    params_doc = asdict(p)
    params_doc["agents"] = list(p.agents)
    params_doc["alphas"] = list(p.alphas)
    document = {"command": COMMAND, "version": __version__, "params": params_doc, "results": results}
    if json_path is not None:
        _write_json_atomic(json_path, document)
    return document
