"""Shared results and shared patterns keep their promises against what a writer to Redis can do.

* A sealed value put back after its expiry (with no TTL, or a fresh one) is never served: the seal covers
  the expiry, so Redis's TTL (which no MAC covers) no longer decides.
* A served value is the published one down to its JSON text: dict keys keep the tool's own order.
* Whatever is stored in the pattern counts (text, NaN, infinities, bytes that are not UTF-8), loading through
  the fallback store never raises: bad counters are left out, a bad clock falls back to the local mirror,
  and the next merge repairs what it touches.

Each runs over the in-memory backend and, where Redis is the point, over a real ``redis-server``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis_fixture
from forethought import Effect, FakeClock, Policy, Runtime, ToolCall, tool
from forethought.predictors.patterns.counts import CountsState
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.stores.errors import StoreExpiredError, StoreIntegrityError
from forethought.stores.events import StoreEvent
from forethought.stores.fallback import FallbackPatternStore
from forethought.stores.memory import MemoryIdempotentPatternStore
from forethought.stores.redis_patterns import RedisPatternStore, pattern_keys
from forethought.stores.redis_results import RedisSharedResults
from forethought.stores.results import MemorySharedResults, SharedResults
from forethought.stores.sealing import Sealer, decode, encode
from forethought.stores.shared_tools import SharedPolicy, SharedSpeculation, SharedTool

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
SECRET = b"promises-secret-0123456789abcdef"
WALL_START = 1_700_000_000.0


class Lookup:
    """A public lookup whose answer is set per query (any JSON value, keys in any order); counts its runs."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.runs: list[str] = []

    async def __call__(self, q: str) -> Any:
        self.runs.append(q)
        return json.loads(json.dumps(self.answers[q]))  # a fresh value with the same key order every run


def _worker(backend: SharedResults, lookup: Lookup, wall: FakeClock, ttl_s: float = 30.0,
            events: list[StoreEvent] | None = None, op_timeout_s: float = 0.05) -> tuple[SharedSpeculation, Any]:
    policy = SharedPolicy({"search": SharedTool(ttl_s=ttl_s)}, op_timeout_s=op_timeout_s)
    shared = SharedSpeculation(backend, SECRET, "acme", policy,
                               clock=FakeClock(), on_event=None if events is None else events.append,
                               wall_clock=wall)
    t = tool(lookup, name="search", effect=Effect.READ_ONLY, threaded=False,
             parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    return shared, Runtime([shared.wrap(t)], Policy()).session()


async def _guess_and_claim(shared: SharedSpeculation, session: Any, q: str) -> Any:
    call = ToolCall("search", {"q": q})
    assert shared.speculate(session, call).status == "launched"
    await session.wait_speculations(5.0)
    outcome = await session.execute_detailed(call)
    assert outcome.kind == "hit"
    return outcome.value


def _storage_key(shared: SharedSpeculation, q: str) -> str:
    return shared.storage_key("search\x1f" + json.dumps({"q": q}, separators=(",", ":")))


# --- expiry is sealed -----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ttl_s=st.floats(0.5, 3600.0), late_s=st.one_of(st.just(0.0), st.floats(0.0, 1e7)),
       replay_ttl_s=st.sampled_from([None, 1.0, 3600.0, 1e9]))
async def test_a_value_put_back_after_its_expiry_is_never_served(ttl_s: float, late_s: float,
                                                                 replay_ttl_s: float | None) -> None:
    backend_clock, wall = FakeClock(), FakeClock(WALL_START)
    backend = MemorySharedResults(backend_clock)
    lookup = Lookup({"q": {"v": 1}})
    first, session_a = _worker(backend, lookup, wall, ttl_s)
    await _guess_and_claim(first, session_a, "q")
    await first.drain()
    key = _storage_key(first, "q")
    sealed = backend.peek(key)
    assert sealed is not None
    backend_clock.advance(ttl_s + late_s)  # the backend drops it ...
    wall.advance(ttl_s + late_s)
    assert await backend.get(key) is None
    backend.tamper(key, sealed)  # ... and a writer without the secret puts the old bytes back
    if replay_ttl_s is not None:
        backend._values[key] = (sealed, backend_clock.monotonic() + replay_ttl_s)
    events: list[StoreEvent] = []
    second, session_b = _worker(backend, lookup, wall, ttl_s, events)
    assert await _guess_and_claim(second, session_b, "q") == {"v": 1}
    assert lookup.runs == ["q", "q"]  # run again, not served
    assert [(e.kind, e.detail) for e in events] == [("rejected", "StoreExpiredError")]
    assert second.stats.served == 0


async def test_a_live_value_is_served_until_the_last_moment_of_its_sealed_life() -> None:
    backend, wall = MemorySharedResults(FakeClock()), FakeClock(WALL_START)
    lookup = Lookup({"q": {"v": 1}})
    first, session_a = _worker(backend, lookup, wall, ttl_s=30.0)
    await _guess_and_claim(first, session_a, "q")
    await first.drain()
    wall.advance(29.999)
    second, session_b = _worker(backend, lookup, wall, ttl_s=30.0)
    await _guess_and_claim(second, session_b, "q")
    assert lookup.runs == ["q"] and second.stats.served == 1


@pytest.mark.parametrize("how", ["persist", "set-without-ttl", "set-with-new-ttl"])
async def test_redis_a_value_put_back_without_its_ttl_is_refused(redis_url: str, how: str) -> None:
    import redis

    wall = FakeClock(WALL_START)
    lookup = Lookup({"q": {"z": 1, "a": [2, {"y": 3, "b": 4}]}})
    first, session_a = _worker(RedisSharedResults.from_url(redis_url, 2.0), lookup, wall, 60.0, op_timeout_s=2.0)
    await _guess_and_claim(first, session_a, "q")
    await first.close()
    client = redis.Redis.from_url(redis_url)
    key = _storage_key(first, "q")
    sealed = client.get(key)
    assert sealed is not None and client.pttl(key) > 0
    if how == "persist":
        client.persist(key)
    elif how == "set-without-ttl":
        client.delete(key)
        client.set(key, sealed)
    else:
        client.set(key, sealed, ex=86_400)
    client.close()
    wall.advance(61.0)  # past the sealed expiry; Redis still holds the value
    events: list[StoreEvent] = []
    second, session_b = _worker(RedisSharedResults.from_url(redis_url, 2.0), lookup, wall, 60.0, events, 2.0)
    assert await _guess_and_claim(second, session_b, "q") == lookup.answers["q"]
    assert lookup.runs == ["q", "q"]
    assert [e.kind for e in events] == ["rejected"]
    await second.close()


@given(st.binary(max_size=40), st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_the_expiry_is_covered_by_the_mac(payload: bytes, expires_at: float, other: float) -> None:
    sealer = Sealer(SECRET)
    sealed = sealer.seal("k", payload, expires_at=expires_at)
    forged = sealer.seal("k", payload, expires_at=other)
    assert sealer.open("k", sealed) == payload
    spliced = sealed[:32] + forged[32:40] + sealed[40:]  # the old MAC with a new expiry
    if spliced != sealed:
        with pytest.raises(StoreIntegrityError):
            sealer.open("k", spliced)
    if expires_at <= WALL_START:
        with pytest.raises(StoreExpiredError):
            sealer.open("k", sealed, now=WALL_START)


# --- the JSON text of served values -------------------------------------------------------------------------

KEYS = st.text(min_size=1, max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, min_size=1, max_size=5),
    max_leaves=16)
json_objects = st.dictionaries(KEYS, json_values, min_size=2, max_size=6)


@settings(max_examples=60, deadline=None)
@given(json_objects)
async def test_a_served_value_has_the_json_text_serial_execution_gives(answer: dict[str, Any]) -> None:
    wall = FakeClock(WALL_START)
    backend, lookup = MemorySharedResults(FakeClock()), Lookup({"q": answer})
    serial = await lookup("q")
    first, session_a = _worker(backend, lookup, wall)
    second, session_b = _worker(backend, lookup, wall)
    led = await _guess_and_claim(first, session_a, "q")
    await first.drain()
    served = await _guess_and_claim(second, session_b, "q")
    assert second.stats.served == 1
    for value in (led, served):
        assert json.dumps(value) == json.dumps(serial)
        assert json.dumps(value, ensure_ascii=False, indent=1) == json.dumps(serial, ensure_ascii=False, indent=1)


@given(json_objects)
def test_encoding_keeps_the_key_order_at_every_depth(value: dict[str, Any]) -> None:
    assert json.dumps(decode(encode(value))) == json.dumps(value)


async def test_redis_serves_the_same_json_text_through_the_runtime_seam(redis_url: str) -> None:
    answer = {"zeta": 1, "alpha": {"m": [3, {"k": 1, "c": 2}], "b": None}, "mid": "x"}
    lookup, wall = Lookup({"q": answer}), FakeClock(WALL_START)
    outputs = []
    for _ in range(2):
        shared = SharedSpeculation(RedisSharedResults.from_url(redis_url, 2.0), SECRET, "acme",
                                   SharedPolicy({"search": SharedTool()}, op_timeout_s=2.0), wall_clock=wall)
        t = tool(lookup, name="search", effect=Effect.READ_ONLY, threaded=False,
                 parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
        session = Runtime([t], Policy(), shared=shared.runs()).session()
        call = ToolCall("search", {"q": "q"})
        session.speculate(call)
        await session.wait_speculations(5.0)
        outputs.append(await session.execute(call))
        await shared.close()
        await session.close()
    assert lookup.runs == ["q"]
    assert [json.dumps(o) for o in outputs] == [json.dumps(answer)] * 2


# --- what the pattern counts hold ---------------------------------------------------------------------------

BAD_NUMBERS = [b"abc", b"", b" ", b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"1e999", b"-1e999", b"0x10",
               b"1,5", b"\xff\xfe", b"1 2", b"--1", b"\x00", b"1_0", b" 7 ", b"+3", b".5", b"5e", b"1e+"]


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_a_counter_that_is_not_a_number_is_left_out_and_never_raises(redis_url: str, bad: bytes) -> None:
    import redis

    store = RedisPatternStore.from_url(redis_url)
    store.merge("fp", {"good": 2.0, "also": 1.5}, 1.0, 0.0, None)
    _, counts, _, _ = pattern_keys("fp")
    client = redis.Redis.from_url(redis_url)
    client.hset(counts, mapping={"broken": bad, b"\xff\xfename": b"1.0"})
    client.close()
    events: list[StoreEvent] = []
    fallback = FallbackPatternStore(store, events.append, FakeClock())
    state = fallback.load("fp")
    assert state == CountsState(1.0, 0.0, {"good": 2.0, "also": 1.5})
    assert store.skipped == 2 and events == []  # the rest of the shared state is used, not the mirror
    fallback.merge("fp", {"broken": 4.0}, 1.0, 0.0, None)  # the merge reads the bad counter as 0: repaired
    assert store.load("fp").values["broken"] == 4.0
    fallback.close()


@pytest.mark.parametrize("field", ["clock", "epoch"])
@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_a_clock_that_is_not_a_number_falls_back_to_the_mirror(redis_url: str, field: str, bad: bytes) -> None:
    import redis

    store = RedisPatternStore.from_url(redis_url)
    clock, events = FakeClock(), []
    fallback = FallbackPatternStore(store, events.append, clock, retry_after_s=5.0)
    fallback.merge("fp", {"a": 1.0}, 1.0, 0.0, None)
    assert fallback.load("fp") == CountsState(1.0, 0.0, {"a": 1.0})
    meta, _, _, _ = pattern_keys("fp")
    client = redis.Redis.from_url(redis_url)
    client.hset(meta, field, bad)
    client.close()
    assert fallback.load("fp") == CountsState(1.0, 0.0, {"a": 1.0})  # the last state loaded
    assert [e.kind for e in events] == ["degraded"]
    PatternPredictor(fallback, "fp")  # a predictor on it starts (its first sync loads) without raising
    clock.advance(5.0)
    fallback.merge("fp", {"a": 1.0}, 1.0, 0.0, None)  # a merge starts the clock afresh: shared again
    assert store.load("fp").clock == 1.0
    assert fallback.load("fp").values["a"] == 2.0
    assert [e.kind for e in events] == ["degraded", "recovered"]
    fallback.close()


class _Raising(MemoryIdempotentPatternStore):
    """A shared store whose calls raise what no store should (a bug below, a decoding error)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.raising = True

    def load(self, fingerprint: str) -> CountsState:
        if self.raising:
            raise self.error
        return super().load(fingerprint)

    def merge(self, fingerprint: str, deltas: Any, ticks: float, epoch: float, half_life: float | None,
              merge_id: str | None = None) -> None:
        if self.raising:
            raise self.error
        super().merge(fingerprint, deltas, ticks, epoch, half_life, merge_id)


@pytest.mark.parametrize("error", [ValueError("could not convert string to float: 'abc'"), TypeError("x"),
                                   UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"), KeyError("clock"),
                                   OverflowError("big"), ZeroDivisionError()])
def test_no_error_of_the_shared_store_reaches_the_predictor(error: Exception) -> None:
    clock, events = FakeClock(), []
    shared = _Raising(error)
    fallback = FallbackPatternStore(shared, events.append, clock, retry_after_s=5.0)
    predictor = PatternPredictor(fallback, "fp")  # loads
    predictor.counts.add("x", 1.0)
    predictor.counts.tick()
    predictor.flush()  # merges: queued locally
    assert fallback.load("fp").values == {"x": 1.0}
    assert fallback.queued == 1 and [e.kind for e in events] == ["degraded"]
    shared.raising = False
    clock.advance(5.0)
    assert fallback.load("fp").values == {"x": 1.0}  # replayed once, then loaded from the shared store
    assert shared.load("fp").values == {"x": 1.0}
    assert [e.kind for e in events] == ["degraded", "recovered"]
