"""Closed forms of client-side speculation: worked examples, Lemma-1 properties, efficiency."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought.bench.perfmodel import (
    SPEEDUP_SUPREMUM,
    SpecParams,
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

alphas = st.floats(min_value=0.0, max_value=1.0)
seconds = st.floats(min_value=1e-3, max_value=1e3)
REL = 1e-12


def test_worked_examples() -> None:
    assert standard_time(2.0, 1.0, N=10) == pytest.approx(30.0)
    # a right guess hides the whole tool behind the generation
    assert speculative_time(1.0, 2.0, 0.5, 1.0, N=10) == pytest.approx(20.0)
    assert speedup(1.0, 2.0, 0.5, 1.0) == pytest.approx(1.5)
    # never right: nothing changes
    assert speedup(0.0, 2.0, 0.5, 1.0) == pytest.approx(1.0)
    # half right, tool longer than generation: 0.5 * (0.2 + 3) + 0.5 * (1 + 3) = 3.6 per turn
    assert speculative_time(0.5, 1.0, 0.2, 3.0) == pytest.approx(3.6)
    t = times(SpecParams(alpha=0.5, G=1.0, g=0.2, T=3.0, N=4))
    assert (t.standard_s, t.speculative_s) == pytest.approx((16.0, 14.4))
    assert t.speedup == pytest.approx(16.0 / 14.4)
    assert t.time_saved == pytest.approx(0.1)


def test_supremum_is_reached_only_in_the_degenerate_limit() -> None:
    assert overlap_cap(1.0, 1.0) == SPEEDUP_SUPREMUM
    assert lemma1_bound(1.0, 1e-6, 1.0) == pytest.approx(2.0, rel=1e-5)
    assert lemma1_bound(1.0, 1e-6, 1.0) < 2.0
    assert lemma1_bound(1.0, 0.0, 0.5) == pytest.approx(1.5)
    assert lemma1_bound(1.0, 0.0, 2.0) == pytest.approx(1.5)
    assert lemma1_bound(1.0, 2.0, 1.0) == 1.0  # speculator slower than the model: never speculating is best


@given(alpha=alphas, G=seconds, g=seconds, T=seconds)
def test_bound_is_below_two_with_a_real_speculator(alpha: float, G: float, g: float, T: float) -> None:
    assert speedup(alpha, G, g, T) < SPEEDUP_SUPREMUM
    assert lemma1_bound(G, g, T) < SPEEDUP_SUPREMUM
    assert speedup(alpha, G, g, T) <= lemma1_bound(G, g, T) * (1 + REL)


@given(alpha=alphas, G=seconds, T=seconds)
def test_bound_never_exceeds_two(alpha: float, G: float, T: float) -> None:
    assert speedup(alpha, G, 0.0, T) <= SPEEDUP_SUPREMUM
    assert overlap_cap(G, T) <= SPEEDUP_SUPREMUM


@given(a1=alphas, a2=alphas, G=seconds, frac=st.floats(0.0, 1.0), T=seconds)
def test_speedup_is_monotone_in_alpha_when_the_speculator_is_faster(
    a1: float, a2: float, G: float, frac: float, T: float
) -> None:
    lo, hi = sorted((a1, a2))
    g = frac * G
    assert speedup(lo, G, g, T) <= speedup(hi, G, g, T) * (1 + REL)


@given(alpha=alphas, G=seconds, frac=st.floats(0.0, 1.0), T=seconds, N=st.integers(1, 100))
def test_speculation_never_slower_when_g_at_most_G(alpha: float, G: float, frac: float, T: float, N: int) -> None:
    g = frac * G
    assert speculative_time(alpha, G, g, T, N) <= standard_time(G, T, N) * (1 + REL)
    assert speedup(alpha, G, g, T) >= 1.0 - REL


@given(G=seconds, extra=seconds, T=seconds)
def test_a_speculator_slower_than_the_model_makes_hits_cost_time(G: float, extra: float, T: float) -> None:
    # Documented limit of the model: monotonicity in alpha needs g <= G.
    g = G + extra
    assert speculative_time(1.0, G, g, T) > standard_time(G, T)
    assert speedup(1.0, G, g, T) < speedup(0.0, G, g, T)


@given(
    G=seconds,
    g=seconds,
    T=seconds,
    n=st.integers(1, 40),
    data=st.data(),
)
def test_per_turn_form_equals_closed_form_on_constant_turns(
    G: float, g: float, T: float, n: int, data: st.DataObject
) -> None:
    hits = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    alpha = sum(hits) / n
    assert per_turn_speedup([G] * n, [g] * n, [T] * n, hits) == pytest.approx(speedup(alpha, G, g, T), rel=1e-9)


@given(turns=st.lists(st.tuples(seconds, seconds, seconds), min_size=1, max_size=30))
def test_closed_form_on_means_overstates_the_per_turn_bound(turns: list[tuple[float, float, float]]) -> None:
    G, g, T = (list(column) for column in zip(*turns, strict=True))
    n = len(turns)
    on_means = speedup(1.0, sum(G) / n, sum(g) / n, sum(T) / n)
    assert per_turn_speedup(G, g, T, [True] * n) <= on_means * (1 + 1e-9)


def test_per_turn_times_worked_example() -> None:
    t = per_turn_times([1.0, 2.0, 1.0], [0.1, 0.1, 0.5], [1.0, 0.5, 2.0], [True, True, False])
    assert t.standard_s == pytest.approx(2.0 + 2.5 + 3.0)
    assert t.speculative_s == pytest.approx(1.1 + 2.0 + 3.0)


@given(alpha=alphas, G=seconds, g=seconds, T=seconds, ratio=st.floats(0.1, 1.5))
def test_efficiency_divides_by_the_model(alpha: float, G: float, g: float, T: float, ratio: float) -> None:
    model = speedup(alpha, G, g, T)
    assert efficiency(model, alpha, G, g, T) == pytest.approx(1.0)
    assert efficiency(model * ratio, alpha, G, g, T) == pytest.approx(ratio)


def test_efficiency_per_turn() -> None:
    G, g, T, hits = [1.0, 2.0], [0.2, 0.2], [1.0, 1.0], [True, False]
    model = per_turn_speedup(G, g, T, hits)
    assert model == pytest.approx((2.0 + 3.0) / (1.2 + 3.0))
    assert efficiency_per_turn(model, G, g, T, hits) == pytest.approx(1.0)
    assert efficiency_per_turn(1.1, G, g, T, hits) == pytest.approx(1.1 / model)


@pytest.mark.parametrize(
    "call",
    [
        lambda: speedup(1.5, 1.0, 0.1, 1.0),
        lambda: speedup(-0.1, 1.0, 0.1, 1.0),
        lambda: speedup(0.5, -1.0, 0.1, 1.0),
        lambda: speedup(0.5, 0.0, 0.1, 0.0),
        lambda: speedup(0.5, float("nan"), 0.1, 1.0),
        lambda: speedup(0.5, 1.0, float("inf"), 1.0),
        lambda: standard_time(1.0, 1.0, N=0),
        lambda: SpecParams(alpha=0.5, G=1.0, g=0.1, T=1.0, N=0),
        lambda: efficiency(0.0, 0.5, 1.0, 0.1, 1.0),
        lambda: per_turn_speedup([], [], [], []),
        lambda: per_turn_speedup([1.0], [0.1, 0.2], [1.0], [True]),
        lambda: per_turn_speedup([1.0], [0.1], [-1.0], [True]),
    ],
)
def test_bad_parameters_raise_value_error(call: object) -> None:
    assert callable(call)
    with pytest.raises(ValueError):
        call()
