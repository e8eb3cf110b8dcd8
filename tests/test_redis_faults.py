"""Redis restarted, unreachable or slow: pattern learning degrades to local, says so, and catches up."""

from __future__ import annotations

import time

import redis

import redis_fixture
from forethought import FakeClock
from forethought.predictors.patterns.counts import CountsState
from forethought.predictors.patterns.store import MemoryPatternStore
from forethought.stores.fallback import FallbackPatternStore, StoreEvent
from forethought.stores.redis_patterns import RedisPatternStore
from redis_fixture import RedisServer, free_port

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
RETRY_S = 5.0


def _store(url: str, clock: FakeClock, events: list[StoreEvent], timeout_s: float = 0.3) -> FallbackPatternStore:
    return FallbackPatternStore(RedisPatternStore.from_url(url, socket_timeout_s=timeout_s), events.append, clock,
                                retry_after_s=RETRY_S)


def test_a_restart_mid_run_degrades_to_local_and_replays_once_back(redis_server: RedisServer, redis_url: str) -> None:
    clock, events = FakeClock(), []
    store = _store(redis_url, clock, events)
    reference = MemoryPatternStore()
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    reference.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    redis_server.stop()
    for i in range(3):
        store.merge("fp", {"a": 1.0, "b": float(i)}, 1.0, 0.0, None)
        reference.merge("fp", {"a": 1.0, "b": float(i)}, 1.0, 0.0, None)
    assert [e.kind for e in events] == ["degraded"]
    assert store.queued == 3
    assert store.load("fp") == reference.load("fp")  # served from the local mirror meanwhile
    redis_server.start()  # an empty server, like a failover to a replica that lost the keys
    assert store.load("fp") == reference.load("fp")  # still inside the retry period: no call to Redis
    clock.advance(RETRY_S)
    state = store.load("fp")
    assert [e.kind for e in events] == ["degraded", "recovered"]
    assert store.queued == 0
    assert state == CountsState(3.0, 0.0, {"a": 3.0, "b": 3.0})  # the queued batches, each applied once
    store.close()


def test_an_unreachable_store_costs_one_attempt_per_retry_period() -> None:
    clock, events = FakeClock(), []
    dead = RedisPatternStore.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_s=0.3)
    calls = 0
    original = dead.load

    def counting(fingerprint: str) -> CountsState:
        nonlocal calls
        calls += 1
        return original(fingerprint)

    dead.load = counting  # type: ignore[method-assign]
    store = FallbackPatternStore(dead, events.append, clock, retry_after_s=RETRY_S)
    for i in range(10):
        assert store.load("fp") == (CountsState(0.0, 0.0, {}) if i == 0 else CountsState(i, 0.0, {"a": i}))
        store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    assert calls == 1
    assert [e.kind for e in events] == ["degraded"]
    assert store.load("fp").values == {"a": 10.0}
    clock.advance(RETRY_S)
    store.load("fp")
    assert calls == 1  # the queue replay failed first, so load was not even tried
    assert store.queued == 10
    store.close()


def test_a_slow_store_times_out_once_and_is_not_retried(redis_server: RedisServer, redis_url: str) -> None:
    clock, events = FakeClock(), []
    store = _store(redis_url, clock, events, timeout_s=0.2)
    store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
    try:
        started = time.monotonic()
        for _ in range(5):
            store.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
        blocked_s = time.monotonic() - started
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    assert [e.kind for e in events] == ["degraded"]
    assert blocked_s < 1.0  # one socket timeout (0.2 s), not five, nor the 1.5 s pause
    assert store.load("fp").values == {"a": 6.0}  # mirror; the timed-out batch is queued with its id
    clock.advance(RETRY_S)
    assert store.load("fp").values == {"a": 6.0}  # shared again: replay did not double the timed-out batch
    assert [e.kind for e in events] == ["degraded", "recovered"]
    store.close()


def test_a_batch_redis_refuses_is_dropped_with_an_event_and_never_retried(redis_url: str) -> None:
    clock, events = FakeClock(), []
    store = _store(redis_url, clock, events)
    store.merge("fp", {"a": float("nan")}, 1.0, 0.0, None)  # the script cannot add it: Redis refuses the batch
    store.merge("fp", {"b": 1.0}, 1.0, 0.0, None)
    assert [e.kind for e in events] == ["dropped"]
    assert store.queued == 0 and store.dropped == 1
    assert store.load("fp") == CountsState(1.0, 0.0, {"b": 1.0})
    store.close()


def test_a_counter_name_no_utf8_encodes_never_degrades_the_store(redis_url: str) -> None:
    """A name holding a lone surrogate (a model's "\\ud83d" escape, learnt) is left out of the batch: the rest
    reaches Redis, and the store never degrades for it."""
    clock, events = FakeClock(), []
    store = _store(redis_url, clock, events)
    store.merge("fp", {"a": 1.0, "q\x1fsmile \ud83d": 1.0}, 1.0, 0.0, None)
    clock.advance(RETRY_S)
    store.merge("fp", {"b": 1.0}, 1.0, 0.0, None)
    assert events == [] and store.queued == 0 and not store.degraded
    reader = RedisPatternStore.from_url(redis_url)
    assert reader.load("fp") == CountsState(2.0, 0.0, {"a": 1.0, "b": 1.0})
    reader.close()
    store.close()
