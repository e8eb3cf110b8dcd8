"""Circuit breaker: opens on waste or errors over a sliding window, closes after the cool-down."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import FakeClock
from forethought._core.breaker import CircuitBreaker, Outcome
from forethought._core.policy import BreakerPolicy

POLICY = BreakerPolicy(window=10, min_samples=4, max_waste_rate=0.5, max_error_rate=0.25, cooldown_s=30)


def test_opens_on_waste_and_closes_after_the_cool_down(clock: FakeClock) -> None:
    breaker = CircuitBreaker(POLICY, clock=clock)
    for outcome in (Outcome.WASTED, Outcome.USEFUL, Outcome.WASTED):
        breaker.record("t", outcome)
    assert breaker.allows("t")  # fewer samples than min_samples
    breaker.record("t", Outcome.WASTED)  # 3/4 wasted > 0.5
    assert not breaker.allows("t") and breaker.trips("t") == 1
    clock.advance(29.999)
    assert not breaker.allows("t")
    clock.advance(0.002)
    assert breaker.allows("t")
    breaker.record("t", Outcome.WASTED)  # an empty window again: it must earn its way back
    assert breaker.allows("t")


def test_opens_on_errors(clock: FakeClock) -> None:
    breaker = CircuitBreaker(POLICY, clock=clock)
    for outcome in (Outcome.USEFUL, Outcome.USEFUL, Outcome.ERROR, Outcome.ERROR):
        breaker.record("t", outcome)
    assert not breaker.allows("t")


def test_a_useful_outcome_that_completes_the_sample_still_trips(clock: FakeClock) -> None:
    breaker = CircuitBreaker(POLICY, clock=clock)
    for _ in range(3):
        breaker.record("t", Outcome.ERROR)
    assert breaker.allows("t")
    breaker.record("t", Outcome.USEFUL)  # 3/4 errors once the sample is big enough
    assert not breaker.allows("t")


def test_the_window_slides(clock: FakeClock) -> None:
    breaker = CircuitBreaker(BreakerPolicy(window=4, min_samples=4, max_waste_rate=0.5), clock=clock)
    for outcome in (Outcome.WASTED, Outcome.WASTED, Outcome.USEFUL, Outcome.USEFUL):
        breaker.record("t", outcome)  # 2/4: not above 0.5
    assert breaker.allows("t")
    breaker.record("t", Outcome.USEFUL)  # the oldest waste falls out
    breaker.record("t", Outcome.WASTED)
    breaker.record("t", Outcome.WASTED)  # window: U U W W -> still 0.5
    assert breaker.allows("t")
    breaker.record("t", Outcome.WASTED)  # U W W W -> 0.75
    assert not breaker.allows("t")


def test_scopes_are_independent_and_forgettable(clock: FakeClock) -> None:
    breaker = CircuitBreaker(POLICY, clock=clock)
    for _ in range(4):
        breaker.record("tool:a", Outcome.WASTED)
    assert not breaker.allows("tool:a") and breaker.allows("tool:b")
    breaker.forget("tool:a")
    assert breaker.allows("tool:a") and breaker.trips("tool:a") == 0


@given(st.lists(st.sampled_from(list(Outcome)), max_size=60))
def test_running_counts_match_a_recount_of_the_window(outcomes: list[Outcome]) -> None:
    clock = FakeClock()
    policy = BreakerPolicy(window=7, min_samples=5, max_waste_rate=0.6, max_error_rate=0.4, cooldown_s=1)
    breaker = CircuitBreaker(policy, clock=clock)
    window: list[Outcome] = []
    open_until = 0.0
    for outcome in outcomes:
        if open_until and clock() >= open_until:
            assert breaker.allows("s")
            window, open_until = [], 0.0
        breaker.record("s", outcome)
        window = [*window, outcome][-7:]
        n = len(window)
        if not open_until and n >= 5 and (window.count(Outcome.WASTED) / n > 0.6
                                          or window.count(Outcome.ERROR) / n > 0.4):
            open_until = clock() + 1
        assert breaker.allows("s") == (open_until == 0.0)
        clock.advance(0.3)
