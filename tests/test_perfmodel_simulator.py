"""The multi-agent simulator: agreement with the closed forms on one agent, and engine-level accounting."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.bench.perfmodel import Arm, SimConfig, engine_times, simulate, simulate_arms, standard_time, time_saved

FEW_PERCENT = 0.03


def _one_agent(**overrides: object) -> SimConfig:
    base: dict[str, object] = {"agents": 1, "tasks_per_agent": 1, "turns": 12}
    base.update(overrides)
    cfg = SimConfig(**base)  # type: ignore[arg-type]
    # the closed form has no first-turn special case: give the first request the size of a later one
    params = cfg.engine_params()
    return dataclasses.replace(cfg, prompt_tokens=params.reprefill_tokens + cfg.result_tokens)


one_agent_params = st.fixed_dictionaries(
    {
        "turns": st.integers(1, 15),
        "tool_s": st.floats(0.0, 5.0),
        "speculator_s": st.floats(0.0, 2.0),
        "api_overhead_s": st.floats(0.0, 0.5),
        "decode_tokens_per_s": st.floats(10.0, 200.0),
        "prefill_tokens_per_s": st.floats(500.0, 20000.0),
        "reasoning_tokens": st.integers(0, 200),
        "call_tokens": st.integers(1, 80),
        "result_tokens": st.integers(0, 400),
        "reasoning_resubmitted": st.booleans(),
    }
)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(params=one_agent_params)
def test_serial_arm_matches_the_closed_form_on_one_agent(params: dict[str, object]) -> None:
    cfg = _one_agent(**params)
    result = simulate(cfg, Arm.SERIAL)
    model = engine_times(cfg.engine_params())
    assert result.mean_agent_s == pytest.approx(model.serial_s, rel=FEW_PERCENT)
    # and with the round trip folded into G it is Lemma 1's T_std = N (G + T)
    p = cfg.engine_params()
    assert result.mean_agent_s == pytest.approx(
        standard_time(p.round_trip_s + p.generation_s, p.tool_s, p.turns), rel=FEW_PERCENT
    )


def test_serial_arm_within_a_few_percent_with_a_real_first_prompt() -> None:
    cfg = SimConfig(agents=1, tasks_per_agent=1, turns=20, prompt_tokens=2000)
    result = simulate(cfg, Arm.SERIAL)
    assert result.mean_agent_s == pytest.approx(engine_times(cfg.engine_params()).serial_s, rel=FEW_PERCENT)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(params=one_agent_params, alpha=st.sampled_from([0.0, 1.0]))
def test_speculative_arms_match_the_closed_form_when_guesses_are_certain(
    params: dict[str, object], alpha: float
) -> None:
    cfg = _one_agent(alpha=alpha, **params)
    model = engine_times(cfg.engine_params())
    assert simulate(cfg, Arm.CLIENT).mean_agent_s == pytest.approx(model.client_s, rel=1e-6, abs=1e-9)
    assert simulate(cfg, Arm.ENGINE).mean_agent_s == pytest.approx(model.engine_s, rel=1e-6, abs=1e-9)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(params=one_agent_params, alpha=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_one_agent_orderings_hold_on_every_realisation(params: dict[str, object], alpha: float, seed: int) -> None:
    cfg = _one_agent(alpha=alpha, seed=seed, **params)
    results = simulate_arms(cfg)
    serial, client, engine = (results[a].mean_agent_s for a in (Arm.SERIAL, Arm.CLIENT, Arm.ENGINE))
    eps = 1e-9 * serial
    assert engine <= client + eps
    if cfg.speculator_s <= cfg.api_overhead_s + cfg.engine_params().generation_s:
        assert client <= serial + eps


def test_accounting_is_conserved_across_arms() -> None:
    cfg = SimConfig(agents=6, tasks_per_agent=2, turns=5, slots=4, alpha=0.6, seed=3)
    calls = 6 * 2 * 5
    for arm, r in simulate_arms(cfg).items():
        assert r.output_tokens == calls * cfg.decoded_per_turn
        assert r.tool_calls == calls
        assert r.engine_continuations + r.client_hits + r.misses == calls
        assert 0.0 < r.slot_occupancy <= 1.0
        assert r.makespan_s >= r.mean_agent_s > 0
        if arm is Arm.SERIAL:
            assert (r.client_hits, r.engine_continuations, r.wasted_tool_s) == (0, 0, 0.0)
        if arm is Arm.CLIENT:
            assert r.engine_continuations == 0


def test_wrong_guesses_waste_tool_time() -> None:
    cfg = SimConfig(agents=2, tasks_per_agent=1, turns=4, alpha=0.0, tool_s=1.5)
    r = simulate(cfg, Arm.CLIENT)
    assert r.misses == 8
    assert r.wasted_tool_s == pytest.approx(8 * 1.5)


def test_continuations_recompute_nothing_and_round_trips_recompute_the_call() -> None:
    cfg = SimConfig(agents=4, tasks_per_agent=1, turns=6, alpha=1.0, tool_s=0.5, speculator_s=0.2)
    results = simulate_arms(cfg)
    engine, client = results[Arm.ENGINE], results[Arm.CLIENT]
    assert engine.engine_continuations == 4 * 6
    assert engine.prefill_tokens_recomputed == 0
    resubmitted = cfg.call_tokens + cfg.reasoning_tokens
    assert client.prefill_tokens_recomputed == 4 * 5 * resubmitted
    assert engine.prefill_tokens < client.prefill_tokens


def test_a_small_prefix_cache_forces_recomputation() -> None:
    ample = SimConfig(agents=8, tasks_per_agent=1, turns=6, slots=4, tool_s=2.0)
    turn_tokens = ample.reasoning_tokens + ample.call_tokens + ample.result_tokens
    longest = ample.prompt_tokens + ample.turns * turn_tokens + ample.decoded_per_turn
    tight = dataclasses.replace(ample, cache_tokens=longest * 3)
    roomy, cramped = simulate(ample, Arm.SERIAL), simulate(tight, Arm.SERIAL)
    assert cramped.prefill_tokens_recomputed > roomy.prefill_tokens_recomputed
    assert roomy.prefill_tokens_recomputed == 8 * 5 * (ample.call_tokens + ample.reasoning_tokens)


def test_decode_slows_with_batch_size() -> None:
    flat = SimConfig(agents=16, tasks_per_agent=1, turns=3, slots=16, batch_slowdown=0.0)
    steep = dataclasses.replace(flat, batch_slowdown=0.2)
    assert simulate(steep, Arm.SERIAL).tokens_per_s < simulate(flat, Arm.SERIAL).tokens_per_s


def test_slots_limit_concurrency() -> None:
    many = SimConfig(agents=16, tasks_per_agent=1, turns=3, slots=16, tool_s=0.0)
    few = dataclasses.replace(many, slots=2)
    assert simulate(few, Arm.SERIAL).makespan_s > simulate(many, Arm.SERIAL).makespan_s


def test_runs_are_deterministic_and_seeded() -> None:
    cfg = SimConfig(agents=5, tasks_per_agent=2, turns=4, alpha=0.5, tool_jitter=0.5, seed=11)
    assert simulate(cfg, Arm.ENGINE) == simulate(cfg, Arm.ENGINE)
    other = dataclasses.replace(cfg, seed=12)
    assert simulate(other, Arm.ENGINE) != simulate(cfg, Arm.ENGINE)


def test_time_saved_is_relative_to_the_baseline() -> None:
    cfg = SimConfig(agents=2, tasks_per_agent=1, turns=5, alpha=1.0)
    results = simulate_arms(cfg)
    serial = results[Arm.SERIAL]
    assert time_saved(serial, serial) == 0.0
    expected = 1 - results[Arm.CLIENT].mean_agent_s / serial.mean_agent_s
    assert time_saved(results[Arm.CLIENT], serial) == pytest.approx(expected)
    assert set(results[Arm.ENGINE].as_dict()) >= {"tokens_per_s", "prefill_tokens_recomputed", "slot_occupancy"}


@pytest.mark.parametrize(
    "overrides",
    [{"agents": 0}, {"slots": 0}, {"cache_tokens": 100}, {"alpha": 1.5}, {"decode_tokens_per_s": 0.0}, {"turns": 0}],
)
def test_bad_configs_raise(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SimConfig(**overrides)  # type: ignore[arg-type]
