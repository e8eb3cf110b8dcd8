"""Syncing by changes: a predictor that takes only what changed since its last sync ends with exactly the
counters (and clock and epoch) of a whole load, whatever the interleaving of the other writers, rebases,
a store started empty again, marks too old to answer, or numbers Redis no longer holds; the async sync
loses nothing learned while its round trips run."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis_fixture
from forethought import FakeClock
from forethought.predictors.patterns.counts import PLAIN_PREFIX, CountsState
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.store import (
    KEPT_CHANGES_SLACK,
    CountsChanges,
    IncrementalStore,
    MemoryPatternStore,
    PatternStore,
    SqlitePatternStore,
)
from forethought.stores import redis_patterns
from forethought.stores.fallback import FallbackPatternStore
from forethought.stores.redis_patterns import RedisPatternStore, pattern_keys

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures

KEYS = ("a", "b", "c", "d", PLAIN_PREFIX + "w", PLAIN_PREFIX + "v")
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.sampled_from(KEYS), st.floats(-3, 5, allow_nan=False)),
    st.tuples(st.just("tick"), st.integers(0, 2), st.floats(0, 60, allow_nan=False)),
    st.tuples(st.just("flush"), st.integers(0, 2)),
    st.tuples(st.just("sync"), st.integers(0, 2)),
), max_size=40)
CONFIG = PatternConfig(half_life=2.0)  # 64 half-lives are 128 ticks: rebases happen within a run
NO_DECAY = PatternConfig(half_life=None)


def _whole(store: PatternStore, fingerprint: str) -> CountsState:
    state = store.load(fingerprint)
    return CountsState(state.clock, state.epoch, dict(state.values))


class _Recording(PatternPredictor):
    """A predictor that records whether each answer it took in was complete."""

    answers: list[bool]

    def _take_in(self, changes: CountsChanges) -> bool:
        self.answers = [*getattr(self, "answers", []), changes.complete]
        return super()._take_in(changes)


def _run(stores: list[PatternStore], reference: PatternStore, ops: list[tuple[object, ...]]) -> bool:
    """Apply ``ops`` to three predictors on ``stores``; after each sync the predictor must hold exactly the
    whole stored state. Returns whether every answer after each predictor's first was changes only."""
    fingerprint = uuid.uuid4().hex
    reference.merge(fingerprint, {"a": 1.0}, 1.0, 0.0, CONFIG.half_life)  # a store never written answers whole
    predictors = [_Recording(store, fingerprint, CONFIG) for store in stores]
    for op in [*ops, ("sync", 0), ("sync", 1), ("sync", 2)]:
        who = predictors[int(op[1])]  # type: ignore[call-overload]
        if op[0] == "add":
            who.counts.add(str(op[2]), float(op[3]))  # type: ignore[arg-type]
        elif op[0] == "tick":
            who.counts.tick(float(op[2]))  # type: ignore[arg-type]
        elif op[0] == "flush":
            who.flush()
        else:
            who.sync()
            assert who.counts.state() == _whole(reference, fingerprint)
    return not any(complete for p in predictors for complete in p.answers[1:])


def _rebases(ops: list[tuple[object, ...]]) -> bool:
    """Whether the clock may pass 64 half-lives (128 ticks, the seed merge's one included), so that a store
    or a predictor rebases."""
    ticks = [float(str(op[2])) for op in ops if op[0] == "tick"]
    return 1.0 + sum(ticks) > 126.0


@given(OPS)
@settings(max_examples=150, deadline=None)
def test_syncing_by_changes_ends_with_the_whole_state_in_memory(ops: list[tuple[object, ...]]) -> None:
    store = MemoryPatternStore()
    assert _run([store, store, store], store, ops) or _rebases(ops)  # by changes, but after a rebase


@given(OPS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_syncing_by_changes_ends_with_the_whole_state_in_redis(redis_url: str, ops: list[tuple[object, ...]]) -> None:
    stores: list[PatternStore] = [RedisPatternStore.from_url(redis_url) for _ in range(2)]
    stores.append(FallbackPatternStore(RedisPatternStore.from_url(redis_url), clock=FakeClock()))
    assert _run(stores, RedisPatternStore.from_url(redis_url), ops) or _rebases(ops)


def test_a_sync_takes_only_what_changed_and_says_so(redis_url: str) -> None:
    reader, writer = RedisPatternStore.from_url(redis_url), RedisPatternStore.from_url(redis_url)
    for store in (reader, writer):
        assert isinstance(store, IncrementalStore)
    writer.merge("fp", {f"k{i}": 1.0 for i in range(50)}, 1.0, 0.0, None)
    first = reader.load_since("fp", None)
    assert first.complete and len(first.values) == 50
    writer.merge("fp", {"k1": 2.0, "new": 4.0}, 1.0, 0.0, None)
    second = reader.load_since("fp", first.mark)
    assert not second.complete and second.values == {"k1": 3.0, "new": 4.0} and second.clock == 2.0
    assert reader.load_since("fp", second.mark).values == {}


@pytest.mark.parametrize("mark", [None, "", "nonsense", "gen:", "gen:x", "gen:-1", ":5", "a:b:c", "0" * 40 + ":1",
                                  "gen:99999999999999999999"])
def test_a_mark_the_store_did_not_give_gets_everything(redis_url: str, mark: str | None) -> None:
    store = RedisPatternStore.from_url(redis_url)
    store.merge("fp", {"a": 1.0, "b": 2.0}, 1.0, 0.0, None)
    for answering in (store, MemoryPatternStore()):
        if isinstance(answering, MemoryPatternStore):
            answering.merge("fp", {"a": 1.0, "b": 2.0}, 1.0, 0.0, None)
        changes = answering.load_since("fp", mark)
        assert changes.complete and changes.values == {"a": 1.0, "b": 2.0}


def test_a_store_started_empty_again_is_loaded_whole(redis_url: str) -> None:
    import redis

    reader = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp")
    writer = RedisPatternStore.from_url(redis_url)
    writer.merge("fp", {"a": 5.0, "b": 1.0}, 3.0, 0.0, None)
    reader.sync()
    client = redis.Redis.from_url(redis_url)
    client.flushall()  # the server restarted empty: the marks' generation is gone
    client.close()
    writer.merge("fp", {"c": 1.0}, 1.0, 0.0, None)
    reader.sync()
    assert reader.counts.state() == CountsState(1.0, 0.0, {"c": 1.0})


def test_a_mark_older_than_the_kept_changes_gets_everything(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_patterns, "KEPT_MERGES", 3)
    store = RedisPatternStore.from_url(redis_url)
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    old = store.load_since("fp", None).mark
    for i in range(64):
        store.merge("fp", {f"k{i}": 1.0}, 1.0, 0.0, None)
    assert store.load_since("fp", old).complete
    recent = store.load_since("fp", None).mark
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    assert store.load_since("fp", recent).values == {"a": 2.0}
    import redis

    client = redis.Redis.from_url(redis_url)
    assert client.zcard(pattern_keys("fp")[3]) <= 66  # trimmed at the 64th merge: the marks stay bounded
    client.close()


def test_a_memory_store_forgets_the_oldest_marks_and_answers_them_whole() -> None:
    store = MemoryPatternStore()
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    old = store.load_since("fp", None).mark
    store.merge("fp", {f"k{i}": 1.0 for i in range(KEPT_CHANGES_SLACK + 10)}, 1.0, 0.0, None)
    store.discard("fp", [f"k{i}" for i in range(KEPT_CHANGES_SLACK + 10)])
    store.merge("fp", {"b": 1.0}, 1.0, 0.0, None)
    assert store.load_since("fp", old).complete
    changes = store.load_since("fp", store.load_since("fp", None).mark)
    assert changes.values == {} and not changes.complete


@pytest.mark.parametrize("bad", [b"abc", b"nan", b"inf", b"0x10", b" 7 ", b""])
def test_a_changed_counter_redis_holds_no_number_for_is_dropped_as_a_whole_load_drops_it(
        redis_url: str, bad: bytes) -> None:
    import redis

    reader = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp")
    writer = RedisPatternStore.from_url(redis_url)
    writer.merge("fp", {"a": 1.0, "b": 1.0}, 1.0, 0.0, None)
    reader.sync()
    writer.merge("fp", {"a": 1.0, "b": 1.0}, 1.0, 0.0, None)
    client = redis.Redis.from_url(redis_url)
    client.hset(pattern_keys("fp")[1], "a", bad)
    client.close()
    reader.sync()
    whole = RedisPatternStore.from_url(redis_url).load("fp")
    assert reader.counts.state() == CountsState(2.0, 0.0, {"b": 2.0}) == whole
    assert isinstance(reader.store, RedisPatternStore) and reader.store.skipped >= 1


def test_a_rebase_in_the_store_makes_older_marks_load_whole(redis_url: str) -> None:
    fast = PatternConfig(half_life=1.0)
    reader = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp", fast)
    writer = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp", fast)
    writer.counts.add("a", 1.0)
    writer.flush()
    reader.sync()
    writer.counts.tick(100.0)  # past 64 half-lives: the writer rebases, then the store does
    writer.counts.add("a", 1.0)
    writer.flush()
    reader.sync()
    assert reader.counts.state() == RedisPatternStore.from_url(redis_url).load("fp")
    assert reader.counts.epoch > 0


class _Held(MemoryPatternStore):
    """A memory store whose loads wait for a signal (a round trip still on its way)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail_merges = False

    def load_since(self, fingerprint: str, mark: str | None) -> CountsChanges:
        self.entered.set()
        self.release.wait(5.0)
        return super().load_since(fingerprint, mark)

    def merge(self, fingerprint: str, deltas: Mapping[str, float], ticks: float, epoch: float,
              half_life: float | None) -> None:
        if self.fail_merges:
            raise ConnectionError("the store is away")
        super().merge(fingerprint, deltas, ticks, epoch, half_life)


def test_learning_while_an_async_sync_is_on_its_way_is_kept_and_saved_next() -> None:
    store = _Held()
    store.release.set()
    predictor = PatternPredictor(store, "fp", NO_DECAY)
    other = PatternPredictor(MemoryPatternStore(), "fp", NO_DECAY)
    other.store = store
    other.counts.add("theirs", 2.0)
    other.flush()
    store.release.clear()
    store.entered.clear()

    async def scenario() -> None:
        predictor.counts.add("mine", 1.0)
        syncing = asyncio.create_task(predictor.sync_async())
        await asyncio.to_thread(store.entered.wait, 5.0)
        predictor.counts.add("mine", 10.0)  # learnt while the round trip is on its way
        predictor.counts.add("theirs", 1.0)
        predictor.counts.tick(1.0)
        store.release.set()
        await syncing

    asyncio.run(scenario())
    assert predictor.counts.get("mine") == 11.0 and predictor.counts.get("theirs") == 3.0
    assert store.load("fp").values == {"mine": 1.0, "theirs": 2.0}  # the rest is pending
    predictor.flush()
    assert store.load("fp").values == {"mine": 11.0, "theirs": 3.0}
    assert predictor.counts.clock == store.load("fp").clock


def test_an_async_sync_that_fails_puts_back_what_it_took() -> None:
    store = _Held()
    store.release.set()
    predictor = PatternPredictor(store, "fp", NO_DECAY)
    predictor.counts.add("mine", 1.0)
    predictor.counts.tick(2.0)
    store.fail_merges = True
    with pytest.raises(ConnectionError):
        asyncio.run(predictor.sync_async())
    store.fail_merges = False
    asyncio.run(predictor.sync_async())
    assert store.load("fp") == CountsState(2.0, 0.0, {"mine": 1.0}) == predictor.counts.state()


def test_a_store_that_cannot_tell_what_changed_is_loaded_whole(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "p.sqlite"
    first, second = SqlitePatternStore(path), SqlitePatternStore(path)
    assert not isinstance(first, IncrementalStore)
    reader = PatternPredictor(first, "fp")
    second.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    asyncio.run(reader.sync_async())
    assert reader.counts.state() == CountsState(1.0, 0.0, {"a": 1.0})
    assert reader._store_mark == ""


def test_the_sync_bench_reports_both_arms_per_size(redis_url: str) -> None:
    from forethought.bench import store_sync

    results = store_sync.run(redis_url, sizes=(40, 80), changed=5, rounds=2)
    assert set(results) == {"40", "80"}
    for arms in results.values():
        assert set(arms) == {"changes", "whole"}
        assert all(a["min_ms"] <= a["p50_ms"] <= a["max_ms"] for a in arms.values())
    with pytest.raises(SystemExit):
        store_sync.main(["--sizes", "0"])


@pytest.mark.parametrize(("field", "bad"), [
    ("seq", b"abc"), ("seq", b"1.5"), ("seq", b"nan"), ("seq", b"inf"), ("seq", b"-3"), ("seq", b"1e300"),
    ("seq", b""), ("floor", b"x"), ("floor", b"nan"), ("floor", b"-1"), ("floor", b"2.5"), ("gen", None),
    ("seq", None), ("changes", b"a string where the marks were")])
def test_change_marks_redis_holds_garbage_for_start_afresh_and_nothing_is_lost(
        redis_url: str, field: str, bad: bytes | None) -> None:
    import redis

    reader = PatternPredictor(RedisPatternStore.from_url(redis_url), "fp", NO_DECAY)
    writer = RedisPatternStore.from_url(redis_url)
    writer.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    reader.sync()
    meta, _, _, changes = pattern_keys("fp")
    client = redis.Redis.from_url(redis_url)
    if field == "changes":
        client.delete(changes)
        client.set(changes, bad or b"")
    elif bad is None:
        client.hdel(meta, field)
    else:
        client.hset(meta, field, bad)
    client.close()
    reader.sync()  # answered whole, never raising
    assert reader.counts.state() == CountsState(1.0, 0.0, {"a": 1.0})
    writer.merge("fp", {"a": 1.0, "b": 2.0}, 1.0, 0.0, None)  # applied: the marks start afresh, nothing lost
    reader.sync()
    assert reader.counts.state() == RedisPatternStore.from_url(redis_url).load("fp") == CountsState(
        2.0, 0.0, {"a": 2.0, "b": 2.0})
    writer.merge("fp", {"c": 1.0}, 1.0, 0.0, None)
    changes_now = writer.load_since("fp", reader._store_mark)
    assert not changes_now.complete and changes_now.values == {"c": 1.0}  # and by changes again
