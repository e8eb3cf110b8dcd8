"""The engine-side formula: derived times, orderings between arms, and its closed-form special cases."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought.bench.perfmodel import SPEEDUP_SUPREMUM, EngineParams, arm_times, engine_times, speculative_time
from forethought.bench.perfmodel.command import ModelCommandParams
from forethought.bench.perfmodel.engine import engine_params_of
from forethought.bench.perfmodel.simulator import SimConfig

alphas = st.floats(min_value=0.0, max_value=1.0)
seconds = st.floats(min_value=0.0, max_value=100.0)
positive = st.floats(min_value=1e-3, max_value=100.0)
turns = st.integers(min_value=1, max_value=30)
REL = 1e-9


def _params(**overrides: object) -> EngineParams:
    base: dict[str, object] = {
        "alpha": 0.8,
        "tool_s": 1.0,
        "speculator_s": 0.3,
        "api_overhead_s": 0.1,
        "prefill_tokens_per_s": 1000.0,
        "decode_tokens_per_s": 50.0,
        "call_tokens": 40,
        "reasoning_tokens": 60,
        "result_tokens": 200,
        "turns": 10,
    }
    base.update(overrides)
    return EngineParams(**base)  # type: ignore[arg-type]


def test_derived_quantities() -> None:
    p = _params()
    assert p.generation_s == pytest.approx(100 / 50 + 200 / 1000)
    assert p.reprefill_tokens == 100
    assert p.round_trip_s == pytest.approx(0.1 + 100 / 1000)
    stripped = _params(reasoning_resubmitted=False, evicted_tokens=500)
    assert stripped.reprefill_tokens == 40 + 500
    assert stripped.round_trip_s == pytest.approx(0.1 + 540 / 1000)


def test_worked_example_engine_side_saves_the_round_trips() -> None:
    # G = 2.2, C = 0.2, g + T + o = 1.4 <= G: every right guess continues server-side.
    t = engine_times(_params())
    assert t.serial_s == pytest.approx(10 * (0.2 + 2.2 + 1.0))
    assert t.client_s == pytest.approx(10 * (0.8 * 2.4 + 0.2 * 3.4))
    assert t.engine_s == pytest.approx(10 * (2.2 + 0.2 * 1.0) + 0.2 * (1 + 9 * 0.2))
    assert t.serial_s > t.client_s > t.engine_s
    assert t.engine_gain == pytest.approx(t.client_s / t.engine_s)
    assert t.time_saved_engine > t.time_saved_client > 0


@given(alpha=alphas, G=positive, g=seconds, T=seconds, C=seconds, o=seconds, n=turns)
def test_engine_side_is_never_slower_than_client_side(
    alpha: float, G: float, g: float, T: float, C: float, o: float, n: int
) -> None:
    t = arm_times(alpha=alpha, G=G, g=g, T=T, round_trip_s=C, post_s=o, turns=n)
    assert t.engine_s <= t.client_s * (1 + REL)


@given(alpha=alphas, G=positive, frac=st.floats(0.0, 1.0), T=seconds, C=seconds, n=turns)
def test_client_side_is_lemma_one_with_the_round_trip_in_G(
    alpha: float, G: float, frac: float, T: float, C: float, n: int
) -> None:
    g = frac * G
    t = arm_times(alpha=alpha, G=G, g=g, T=T, round_trip_s=C, post_s=0.0, turns=n)
    assert t.client_s == pytest.approx(speculative_time(alpha, C + G, g, T, n), rel=REL)
    assert t.client_s <= t.serial_s * (1 + REL)
    assert t.speedup_client <= SPEEDUP_SUPREMUM * (1 + REL)


@given(alpha=alphas, G=positive, g=seconds, T=seconds, n=turns)
def test_without_round_trip_cost_engine_side_equals_client_side(
    alpha: float, G: float, g: float, T: float, n: int
) -> None:
    t = arm_times(alpha=alpha, G=G, g=g, T=T, round_trip_s=0.0, post_s=0.0, turns=n)
    assert t.engine_s == pytest.approx(t.client_s, rel=REL)


@given(alpha=alphas, G=positive, fracs=st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), C=seconds, n=turns)
def test_closed_form_when_results_always_arrive_in_time(
    alpha: float, G: float, fracs: tuple[float, float, float], C: float, n: int
) -> None:
    # g + T + o <= G: the engine-side arm pays C only on the first request and after each miss.
    scale = 0.999 / max(sum(fracs), 1.0)
    g, T, o = (G * f * scale for f in fracs)
    t = arm_times(alpha=alpha, G=G, g=g, T=T, round_trip_s=C, post_s=o, turns=n)
    expected = n * (G + (1 - alpha) * T) + C * (1 + (n - 1) * (1 - alpha))
    assert t.engine_s == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_engine_side_is_not_bound_by_lemma_one() -> None:
    # Removing the round trip can beat 2x, which overlap alone never does.
    t = arm_times(alpha=1.0, G=1.0, g=0.1, T=0.8, round_trip_s=1.0, post_s=0.05, turns=20)
    assert t.speedup_client < SPEEDUP_SUPREMUM
    assert t.speedup_engine == pytest.approx(20 * 2.8 / 21)
    assert t.speedup_engine > SPEEDUP_SUPREMUM


def test_a_late_post_falls_back_to_the_client_path() -> None:
    # g + T + o = 2.1 > C + G = 2.0: the gateway never holds the result in time.
    t = arm_times(alpha=1.0, G=1.5, g=0.5, T=1.5, round_trip_s=0.5, post_s=0.1, turns=5)
    assert t.engine_s == pytest.approx(t.client_s)


@pytest.mark.parametrize(
    "overrides",
    [
        {"alpha": 2.0},
        {"prefill_tokens_per_s": 0.0},
        {"decode_tokens_per_s": -1.0},
        {"call_tokens": 0},
        {"reasoning_tokens": -1},
        {"turns": 0},
        {"api_overhead_s": float("nan")},
    ],
)
def test_bad_engine_parameters_raise(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _params(**overrides)


def test_bad_arm_times_raise() -> None:
    with pytest.raises(ValueError):
        arm_times(alpha=0.5, G=0.0, g=0.0, T=0.0, round_trip_s=0.0, post_s=0.0, turns=1)
    with pytest.raises(ValueError):
        arm_times(alpha=0.5, G=1.0, g=0.0, T=1.0, round_trip_s=-1.0, post_s=0.0, turns=1)


@pytest.mark.parametrize("source", [
    ModelCommandParams(alpha=0.3, tool_s=2.5, turns=7, reasoning_tokens=11, reasoning_resubmitted=False),
    SimConfig(alpha=0.6, tool_s=0.7, turns=4, call_tokens=9, result_tokens=33),
], ids=["model-command", "simulator"])
def test_parameter_sets_give_their_engine_params_field_by_field(source: object) -> None:
    # one construction serves both: every field but evicted_tokens must exist under the same name
    params = source.engine_params()  # type: ignore[attr-defined]
    for f in fields(EngineParams):
        if f.name == "evicted_tokens":
            assert not hasattr(source, f.name) and params.evicted_tokens == 0
        else:
            assert getattr(params, f.name) == getattr(source, f.name), f.name


def test_engine_params_of_validates_and_needs_every_required_field() -> None:
    fields_of = {f.name: getattr(_params(), f.name) for f in fields(EngineParams)}
    with pytest.raises(ValueError, match="alpha"):
        engine_params_of(SimpleNamespace(**{**fields_of, "alpha": 1.5}))
    del fields_of["call_tokens"]
    with pytest.raises(TypeError, match="call_tokens"):
        engine_params_of(SimpleNamespace(**fields_of))
