"""FallbackPatternStore on the in-memory fake: outages and lost replies never lose or double an update."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import FakeClock
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.store import MemoryPatternStore
from forethought.stores.events import StoreEvent
from forethought.stores.fallback import FallbackPatternStore
from forethought.stores.memory import MemoryIdempotentPatternStore

RETRY_S = 5.0
steps = st.lists(st.tuples(st.sampled_from(["merge", "down", "up", "lose", "load", "wait"]),
                           st.dictionaries(st.sampled_from(["a", "b", "~w"]), st.integers(1, 9).map(float),
                                           min_size=1)), max_size=30)


@settings(max_examples=80, deadline=None)
@given(steps)
def test_outages_and_lost_replies_never_lose_or_double_an_update(plan: list[tuple[str, dict[str, float]]]) -> None:
    clock, events = FakeClock(), []
    shared = MemoryIdempotentPatternStore()
    store = FallbackPatternStore(shared, events.append, clock, retry_after_s=RETRY_S)
    reference = MemoryPatternStore()
    for action, deltas in plan:
        if action == "merge":
            store.merge("fp", deltas, 1.0, 0.0, None)
            reference.merge("fp", deltas, 1.0, 0.0, None)
        elif action == "down":
            shared.available = False
        elif action == "up":
            shared.available, shared.lose_replies = True, False
        elif action == "lose":
            shared.lose_replies = True
        elif action == "load":
            assert store.load("fp") == reference.load("fp")  # local or shared, the same learning
        else:
            clock.advance(RETRY_S)
    shared.available, shared.lose_replies = True, False
    clock.advance(RETRY_S)
    assert store.load("fp") == reference.load("fp")
    assert store.queued == 0
    assert shared.load("fp") == reference.load("fp")  # every batch reached the shared store exactly once
    kinds = [e.kind for e in events]
    assert all(a != b for a, b in itertools.pairwise(kinds))  # degraded / recovered alternate


def test_a_predictor_keeps_learning_and_predicting_through_an_outage() -> None:
    clock, events = FakeClock(), list[StoreEvent]()
    shared = MemoryIdempotentPatternStore()
    first = PatternPredictor(FallbackPatternStore(shared, events.append, clock), "fp")
    first.counts.add("x", 2.0)
    first.counts.tick()
    first.flush()
    shared.available = False
    second = PatternPredictor(FallbackPatternStore(shared, events.append, clock), "fp")  # starts during the outage
    first.counts.add("x", 1.0)
    first.counts.tick()
    first.flush()  # never raises
    assert second.counts.state().values == {}  # nothing loaded yet: it learns locally meanwhile
    shared.available = True
    clock.advance(60.0)
    first.sync()
    second.sync()
    assert first.counts.state().values["x"] == second.counts.state().values["x"]
    assert [e.kind for e in events].count("degraded") == 2
