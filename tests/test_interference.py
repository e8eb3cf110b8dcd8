"""The interference meter: does drawing speculator samples slow the main model, and by how much."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought.predictors.interference import MIN_SAMPLES, InterferenceMeter
from forethought.predictors.model import ModelSpeculator


def test_no_verdict_until_both_sides_are_measured() -> None:
    meter = InterferenceMeter()
    for _ in range(10):
        meter.note(2.0, 10, sampled=True)
    assert meter.ratio is None and meter.level() == 0.0
    for _ in range(MIN_SAMPLES):
        meter.note(1.0, 10, sampled=False)
    assert meter.ratio == pytest.approx(2.0) and meter.level() == 1.0


def test_a_small_slowdown_is_tolerated_and_a_large_one_stops_sampling() -> None:
    meter = InterferenceMeter(low=1.15, high=1.6)
    for _ in range(5):
        meter.note(1.1, 10, sampled=True)
        meter.note(1.0, 10, sampled=False)
    assert meter.level() == 0.0
    speculator = ModelSpeculator(object(), "speculator", samples=4, interference=meter)  # type: ignore[arg-type]
    assert speculator.samples_under(0.0) == 4
    for _ in range(30):
        meter.note(1.4, 10, sampled=True)
    assert 0.0 < meter.level() < 1.0
    assert 0 < speculator.samples_under(0.0) < 4
    for _ in range(30):
        meter.note(3.0, 10, sampled=True)
    assert speculator.samples_under(0.0) == 0


def test_probes_come_often_at_first_then_rarely() -> None:
    meter = InterferenceMeter(probe_every=4, settled_probe_every=20)
    early = [meter.probe_now() for _ in range(8)]
    assert early.count(True) == 2
    for _ in range(2 * MIN_SAMPLES):
        meter.note(1.0, 1, sampled=False)
    later = [meter.probe_now() for _ in range(40)]
    assert later.count(True) == 2


@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.booleans())
def test_bad_samples_are_ignored(seconds: float, tokens: int, sampled: bool) -> None:
    meter = InterferenceMeter()
    meter.note(seconds, tokens, sampled)
    side = meter.with_samples if sampled else meter.without
    assert side.count == (1 if tokens > 0 and seconds >= 0 and seconds != float("inf") else 0)


def test_bad_settings_are_refused() -> None:
    for kwargs in ({"low": 0.5}, {"low": 2.0, "high": 1.5}, {"probe_every": 1}, {"settled_probe_every": 2}):
        with pytest.raises(ValueError):
            InterferenceMeter(**kwargs)  # type: ignore[arg-type]


def test_decode_time_is_compared_not_the_time_to_first_token() -> None:
    """Short sampled steps and long unsampled ones at the same decode speed: no harm, once the first token's
    time is known; the whole-step figure alone would call it a 2x slowdown."""
    known, whole = InterferenceMeter(), InterferenceMeter()
    for _ in range(10):
        # sampled: a 10-token call after a 1 s wait; unsampled: a 100-token answer after the same wait
        known.note(1.0 + 9 * 0.01, 10, sampled=True, first_token_s=1.0)
        known.note(1.0 + 99 * 0.01, 100, sampled=False, first_token_s=1.0)
        whole.note(1.0 + 9 * 0.01, 10, sampled=True)
        whole.note(1.0 + 99 * 0.01, 100, sampled=False)
    assert known.ratio == pytest.approx(1.0) and known.level() == 0.0
    assert whole.level() == 1.0


def test_noise_alone_seldom_stops_sampling() -> None:
    """Both sides drawn from one wide distribution (a busy machine): the averages differ, but not clearly."""
    import random

    rng = random.Random(7)
    meter = InterferenceMeter()
    levels = []
    for _ in range(200):
        meter.note(rng.choice((0.5, 1.0, 3.0)) * 10, 10, sampled=True)
        if rng.random() < 0.3:
            meter.note(rng.choice((0.5, 1.0, 3.0)) * 10, 10, sampled=False)
        levels.append(meter.level())
    assert sum(level > 0 for level in levels) <= len(levels) // 20  # at most 5% of steps


def test_a_clear_slowdown_is_seen_through_noise() -> None:
    import random

    rng = random.Random(3)
    meter = InterferenceMeter()
    for _ in range(100):
        meter.note(rng.uniform(0.9, 1.1) * 30, 10, sampled=True)  # 3x slower while sampling
        meter.note(rng.uniform(0.9, 1.1) * 10, 10, sampled=False)
    assert meter.level() == 1.0


def test_a_one_token_step_with_a_known_first_token_has_no_decode_time() -> None:
    meter = InterferenceMeter()
    meter.note(0.5, 1, sampled=True, first_token_s=0.5)
    meter.note(0.5, 3, sampled=True, first_token_s=0.6)  # first token after the end: not believed, whole step
    assert meter.with_samples.count == 1 and meter.with_samples.value == pytest.approx(0.5 / 3)
