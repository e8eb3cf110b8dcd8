"""RedisPatternStore against a real redis-server: same arithmetic as SQLite, no lost update, idempotent."""

from __future__ import annotations

import math
import multiprocessing
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis_fixture
from forethought.predictors.patterns.counts import CountsState, rescale
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.store import MemoryPatternStore, PatternStore, SqlitePatternStore
from forethought.stores.redis_patterns import RedisPatternStore, pattern_keys

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
WRITERS = 8
BATCHES = 40
KEYS = ("a", "b", "~w", "flow:x>y", "arg:q")


def _batch(rng: random.Random) -> dict[str, float]:
    return {key: float(rng.randint(1, 5)) for key in rng.sample(KEYS, rng.randint(1, len(KEYS)))}


def _writer(url: str, sqlite_path: str, seed: int, half_life: float | None) -> None:
    rng = random.Random(seed)
    shared = RedisPatternStore.from_url(url)
    local = SqlitePatternStore(sqlite_path)
    for i in range(BATCHES):
        deltas, ticks, epoch = _batch(rng), float(rng.randint(0, 3)), float(i * 2)
        shared.merge("fp", deltas, ticks, epoch, half_life)
        local.merge("fp", deltas, ticks, epoch, half_life)
    shared.close()
    local.close()


def _at(state: CountsState, scale: float, half_life: float | None) -> dict[str, float]:
    return {key: (value if key.startswith("~") else rescale(value, state.epoch, scale, half_life))
            for key, value in state.values.items()}


@pytest.mark.parametrize("half_life", [None, 7.0])
def test_eight_writer_processes_lose_no_update_against_sqlite(redis_url: str, tmp_path: Path,
                                                              half_life: float | None) -> None:
    sqlite_path = str(tmp_path / "patterns.db")
    SqlitePatternStore(sqlite_path).close()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(redis_url, sqlite_path, seed, half_life)) for seed in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    shared = RedisPatternStore.from_url(redis_url).load("fp")
    local = SqlitePatternStore(sqlite_path).load("fp")
    assert shared.clock == local.clock
    if half_life is None:
        expected: dict[str, float] = {}
        for seed in range(WRITERS):
            rng = random.Random(seed)
            for _ in range(BATCHES):
                for key, delta in _batch(rng).items():
                    expected[key] = expected.get(key, 0.0) + delta
                rng.randint(0, 3)
        assert shared.values == local.values == expected
    else:
        assert shared.clock / half_life > 64  # rebases happened on the way
        ours, theirs = _at(shared, shared.clock, half_life), _at(local, local.clock, half_life)
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert math.isclose(ours[key], theirs[key], rel_tol=1e-9), key


batches = st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), st.floats(0.0, 1e6), min_size=1),
                             st.floats(0.0, 50.0), st.floats(0.0, 500.0)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, half_life=st.sampled_from([None, 3.0, 1000.0]))
def test_same_arithmetic_as_the_memory_store(redis_url: str, batches: list[tuple[dict[str, float], float, float]],
                                             half_life: float | None) -> None:
    shared = RedisPatternStore.from_url(redis_url, prefix="hyp")
    shared._client.flushall()
    memory = MemoryPatternStore()
    for deltas, ticks, epoch in batches:
        shared.merge("fp", deltas, ticks, epoch, half_life)
        memory.merge("fp", deltas, ticks, epoch, half_life)
    ours, theirs = shared.load("fp"), memory.load("fp")
    assert ours.clock == pytest.approx(theirs.clock)
    assert ours.epoch == pytest.approx(theirs.epoch)
    assert ours.values.keys() == theirs.values.keys()
    for key, value in ours.values.items():
        assert value == pytest.approx(theirs.values[key], rel=1e-9, abs=1e-9)
    shared.close()


def test_a_repeated_merge_id_counts_once(redis_url: str) -> None:
    store = RedisPatternStore.from_url(redis_url)
    for _ in range(3):
        store.merge("fp", {"a": 1.0}, 1.0, 0.0, None, merge_id="batch-1")
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None, merge_id="batch-2")
    assert store.load("fp") == CountsState(2.0, 0.0, {"a": 2.0})
    assert store.load("other") == CountsState(0.0, 0.0, {})
    store.close()


def test_keys_of_one_fingerprint_share_a_cluster_hash_slot() -> None:
    meta, counts, done, changes = pattern_keys("abc")
    tags = {key[key.index("{") + 1:key.index("}")] for key in (meta, counts, done + "id", changes)}
    assert tags == {"ft:pat:abc"}


def test_predictors_in_two_processes_learn_into_one_model(redis_url: str) -> None:
    store = RedisPatternStore.from_url(redis_url)
    assert isinstance(store, PatternStore)
    first = PatternPredictor(store, "fp")
    first.counts.add("x", 3.0)
    first.counts.tick(2.0)
    first.flush()
    second = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp")
    assert second.counts.state().values.get("x") == pytest.approx(first.counts.state().values["x"])
    first.close()
    second.close()


def test_tiny_decayed_numbers_keep_their_precision(redis_url: str) -> None:
    store, reference = RedisPatternStore.from_url(redis_url), MemoryPatternStore()
    for deltas in ({"a": 8.0543264625003e-15}, {"a": 1.2345678901234567e-300}, {"b": 3.0}):
        store.merge("fp", deltas, 1.0, 0.0, None)
        reference.merge("fp", deltas, 1.0, 0.0, None)
    assert store.load("fp") == reference.load("fp")  # exact: HINCRBYFLOAT would have rounded them away
    store.close()
