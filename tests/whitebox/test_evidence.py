"""Weighing sources together, the arithmetic: how a speculator model's samples revise a cheaper predictor's
guess (never upward for a guess nobody sampled, never past certainty, nonsense left alone), and what a
running guess is still worth. The fakes the evidence tests share live in evidence_fakes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_fakes import Listed, Sampler, ctx, guess, tools
from forethought import ToolCall
from forethought.predictors.base import SampleVotes, SamplingPredictor
from forethought.predictors.model import ModelSpeculator

__all__ = ["Listed", "Sampler", "ctx", "guess", "tools"]
"""The fakes tests/test_defer.py imports from here."""


def test_the_fake_sampler_is_a_sampling_predictor() -> None:
    assert isinstance(Sampler([]), SamplingPredictor)
    assert not isinstance(Listed([]), SamplingPredictor)
    assert isinstance(ModelSpeculator(object(), "m"), SamplingPredictor)  # type: ignore[arg-type]


# --- the arithmetic ---------------------------------------------------------------------------------

def test_revised_by_hand() -> None:
    votes = SampleVotes(((ToolCall("a", {}),), (ToolCall("b", {}),)), alpha=0.7)
    # odds 0.5 / 0.5 = 1, times 0.3 ** 2 = 0.09 -> p = 0.09 / 1.09
    assert votes.revised(0.5, 0) == pytest.approx(0.09 / 1.09)
    assert votes.revised(0.5, 1) == 0.5  # a guess some sample proposed keeps its prior
    assert SampleVotes((), 0.7).revised(0.4, 0) == 0.4  # no finished sample says nothing


@given(st.floats(0.0, 1.0), st.integers(0, 6), st.floats(0.0, 1.0), st.integers(0, 6))
def test_revised_never_raises_a_guess_nobody_sampled_and_falls_with_more_samples(
        prior: float, n: int, alpha: float, support: int) -> None:
    samples = tuple((ToolCall("x", {"i": i}),) for i in range(n))
    votes = SampleVotes(samples, alpha)
    p = votes.revised(prior, min(support, n))
    assert 0.0 <= p <= 1.0 and not math.isnan(p)
    if support:
        assert p == prior
    else:
        assert p <= prior
        more = SampleVotes((*samples, ()), alpha).revised(prior, 0)
        assert more <= p
    if prior in (0.0, 1.0):
        assert p == prior  # certainty is not argued with


@pytest.mark.parametrize("bad", [math.nan, -0.1, 1.5, math.inf])
def test_revised_leaves_nonsense_alone(bad: float) -> None:
    votes = SampleVotes(((),), 0.7)
    out = votes.revised(bad, 0)
    assert out is bad or (math.isnan(bad) and math.isnan(out))
    assert SampleVotes(((),), bad).revised(0.5, 0) == 0.5


# --- found in review ---------------------------------------------------------------------------------

def test_a_running_guess_is_priced_by_what_it_can_still_hide_and_still_waste() -> None:
    from forethought._core.pricing import worth

    fresh = worth(0.9, 1.0, 0.0, 1.0, 0.1)
    assert fresh.value < 0  # a new guess with no time left hides nothing
    running = worth(0.9, 1.0, 0.0, 1.0, 0.1, ran_s=0.6)
    assert running.hide_s == pytest.approx(0.6) and running.cost_s == pytest.approx(0.1 * 0.1 * 0.4)
    assert running.value > 0  # what it already ran is hidden on a hit; only the rest is at risk
    assert worth(0.0, 1.0, None, 1.0, 0.1, ran_s=2.0).cost_s == 0.0  # past its typical run: nothing left


@pytest.mark.parametrize("prior", [0.630859375, 0.1, 0.5, 0.999999])
def test_a_vanishing_alpha_never_lifts_a_guess_above_its_prior_by_rounding(prior: float) -> None:
    """Found by hypothesis: with alpha 1e-38 the odds round-trip came out one ulp above the prior."""
    for n in range(4):
        votes = SampleVotes(tuple(((),) * n), 1.175494351e-38)
        assert votes.revised(prior, 0) <= prior
