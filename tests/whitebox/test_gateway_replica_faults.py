"""Gateway scopes when a post is late, a Redis round trip fails, or one response grows large.

Each test drives :class:`~forethought.gateway.cache.ToolOutputCache` on a real redis-server (the fixture's)
the way the app does (authorize on a post's headers, post when its body has arrived, snapshot, advance and
finish as the relay does), with faults put into the Redis backend, so every interleaving is forced, not
waited for. Each defect was found by an outside review (2026-12-05) and reproduced on the code before by
its scripts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

import redis_fixture
from forethought import ToolCall
from forethought.gateway.cache import CacheLimits, ToolOutputCache, match
from forethought.gateway.replicas import RedisScopeStore, replica_store
from forethought.gateway.scope import ResponseScope
from forethought.gateway.state import PostRejected
from forethought.stores.errors import StoreUnavailableError

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
SECRET = b"gateway-replica-secret-for-tests"
TOOLS = [{"type": "function", "function": {"name": "cd", "parameters": {
    "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}}]
CALL = ToolCall("cd", {"folder": "docs"})
REPAIRED_WITHIN_S = 10.0
"""Bound on waiting for the store's background repair (it runs within REPAIR_MIN_S of Redis answering)."""


def entry(output: str) -> list[dict[str, Any]]:
    return [{"name": "cd", "params": {"folder": "docs"}, "output": output}]


async def served(cache: ToolOutputCache, scope: ResponseScope) -> list[str] | None:
    """What the relay would serve for one ``cd(docs)`` message now."""
    _, entries = await cache.store.snapshot(scope)
    return match(scope, entries, [CALL], cache.store.now())


@asynccontextmanager
async def two_replicas(url: str, limits: CacheLimits | None = None
                       ) -> AsyncIterator[tuple[ToolOutputCache, ToolOutputCache]]:
    """The relaying replica's cache and another replica's, on one Redis (retried at once after a failure)."""
    stores = [RedisScopeStore.from_url(url, SECRET, retry_after_s=0.0) for _ in range(2)]
    try:
        yield ToolOutputCache(limits, store=stores[0]), ToolOutputCache(limits, store=stores[1])
    finally:
        for store in stores:
            await store.aclose()


def fail_once(store: RedisScopeStore, name: str, *, after: bool = False) -> list[int]:
    """Make the backend's ``name`` fail its next call (``after``: once it has run in Redis, as a lost answer);
    returns the list of calls made (for counting)."""
    real: Callable[..., Awaitable[Any]] = getattr(store._backend, name)
    calls: list[int] = []

    async def flaky(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            if after:
                await real(*args)
                raise TimeoutError
            raise StoreUnavailableError(f"{name}: connection reset (injected)")
        return await real(*args)

    setattr(store._backend, name, flaky)
    return calls


async def until_repaired(store: RedisScopeStore) -> None:
    """Wait for the store's background repair to end (it ends once Redis is owed nothing)."""
    repair = store._repair
    assert repair is not None
    await asyncio.wait_for(asyncio.shield(repair), REPAIRED_WITHIN_S)
    assert store.stats()["owed"] == 0


# --- a post whose body arrives after the response moved on ---------------------------------------------


@pytest.mark.parametrize("where", ["local", "relaying replica", "other replica"])
@pytest.mark.parametrize("header", ["0", None])
async def test_a_post_let_in_before_the_response_moved_on_is_refused_not_served_later(
        redis_url: str, where: str, header: str | None) -> None:
    """Before, the post was stored for the segment the response had reached when its body came, and served to
    the next message (a result computed for an earlier conversation state)."""
    if where == "local":
        relay = poster = ToolOutputCache()
    else:
        relay_store = RedisScopeStore.from_url(redis_url, SECRET, retry_after_s=0.0)
        relay = ToolOutputCache(store=relay_store)
        poster = relay if where == "relaying replica" else ToolOutputCache(
            store=RedisScopeStore.from_url(redis_url, SECRET, retry_after_s=0.0))
    try:
        scope = await relay.open(TOOLS, expects_posts=True)
        late = await poster.authorize(scope.response_id, scope.token, header)  # its headers: segment 0
        assert await relay.post(await relay.authorize(scope.response_id, scope.token, "0"), entry("fresh")) == 1
        assert await served(relay, scope) == ["fresh"]
        assert await relay.advance(scope) == 1  # served: the response moves on
        with pytest.raises(PostRejected) as refused:
            await poster.post(late, entry("stale"))  # its body, at last
        assert refused.value.status == 409 and "moved on from segment 0" in str(refused.value)
        assert await served(relay, scope) is None  # nothing for the next message
        assert await relay.post(await poster.authorize(scope.response_id, scope.token, "1"), entry("new")) == 1
        assert await served(relay, scope) == ["new"]
    finally:
        for cache in {id(relay): relay, id(poster): poster}.values():
            await cache.store.aclose()


# --- Redis round trips that fail ----------------------------------------------------------------------


async def test_an_advance_that_failed_in_redis_is_sent_again_before_the_relay_reads(redis_url: str) -> None:
    """Before, Redis's segment stayed behind the relay's for the rest of the response: posts for the real
    message were refused (409) everywhere, and posts another replica accepted were never served."""
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        await other.post(await other.authorize(scope.response_id, scope.token, "0"), entry("first"))
        fail_once(store, "advance")
        assert await relay.advance(scope) == 1
        assert store.stats()["owed"] == 1 and store.degraded
        assert await served(relay, scope) is None  # the relay's next read sends the advance first
        assert store.stats()["owed"] == 0
        for cache in (relay, other):  # both replicas take a post for the message the response is at
            assert await cache.post(await cache.authorize(scope.response_id, scope.token, "1"), entry("second"))
        with pytest.raises(PostRejected) as stale:
            await other.authorize(scope.response_id, scope.token, "0")
        assert stale.value.status == 409
        assert await served(relay, scope) == ["second"]


async def test_an_advance_that_failed_is_repaired_in_the_background(redis_url: str) -> None:
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        calls = fail_once(store, "advance")
        await relay.advance(scope)
        await until_repaired(store)  # no read of the relay needed
        assert len(calls) == 2
        grant = await other.authorize(scope.response_id, scope.token, "1")
        assert await other.post(grant, entry("second")) == 1
        assert await served(relay, scope) == ["second"]


async def test_a_finish_that_failed_answers_410_here_and_everywhere_once_repaired(redis_url: str) -> None:
    """Before, a finish whose Redis call failed left the scope in Redis for its whole life: late posts were
    accepted (200) on every replica, the relaying one included, and never served."""
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        fail_once(store, "finish")
        await relay.close(scope)
        with pytest.raises(PostRejected) as here:
            await relay.authorize(scope.response_id, scope.token, None)
        assert here.value.status == 410
        await until_repaired(store)
        with pytest.raises(PostRejected) as there:
            await other.authorize(scope.response_id, scope.token, None)
        assert there.value.status == 410


async def test_a_create_whose_answer_was_lost_is_undone_so_only_its_relay_takes_posts(redis_url: str) -> None:
    """Before, a create that ran in Redis but answered late left the response both local-only here and valid
    in Redis: other replicas accepted posts (200) that the relay never read."""
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        fail_once(store, "create", after=True)
        scope = await relay.open(TOOLS, expects_posts=True)
        assert store.stats()["local_only"] == 1
        await until_repaired(store)
        with pytest.raises(PostRejected) as elsewhere:
            await other.authorize(scope.response_id, scope.token, None)
        assert elsewhere.value.status == 404  # as for any local-only response
        assert await relay.post(await relay.authorize(scope.response_id, scope.token, "0"), entry("local")) == 1
        assert await served(relay, scope) == ["local"]


async def test_a_create_cancelled_after_it_landed_is_undone(redis_url: str) -> None:
    """Before, a create cancelled on its way (the client hung up) was neither kept nor owed: if it had landed,
    other replicas accepted posts (200) for a response nobody relays, until its TTL ran out (a later review)."""
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        real = store._backend.create
        landed = asyncio.Event()

        async def landed_then_hang(*args: Any) -> Any:
            await real(*args)
            landed.set()
            await asyncio.Event().wait()  # the answer never comes: the request is cancelled meanwhile

        store._backend.create = landed_then_hang  # type: ignore[method-assign]
        scope = ResponseScope("ftg-cancelled", "token", TOOLS, store.now(), expects_posts=True)
        creating = asyncio.create_task(store.create(scope))
        await landed.wait()
        creating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creating
        await until_repaired(store)
        with pytest.raises(PostRejected) as elsewhere:
            await other.authorize(scope.response_id, scope.token, None)
        assert elsewhere.value.status == 404


@pytest.mark.parametrize("garbage", ["garbage", "1.5"])
async def test_a_garbled_post_count_costs_its_response_a_miss_and_never_marks_redis_down(
        redis_url: str, garbage: str) -> None:
    import redis.asyncio

    async with two_replicas(redis_url) as (relay, _):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.hset(store._backend.key(scope.response_id, "state"), "posts", garbage)
        await client.aclose()
        await store.wait_post(scope, 0, 0.01)  # reads the garbled count: a miss for this response
        assert not store.degraded and store.errors == 0
        healthy = await relay.open(TOOLS)  # other responses keep Redis
        assert healthy.response_id in store._mine


async def test_a_state_hash_gone_from_redis_is_never_recreated_without_an_expiry(redis_url: str) -> None:
    import redis.asyncio

    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        client = redis.asyncio.Redis.from_url(redis_url)
        state = store._backend.key(scope.response_id, "state")
        await client.delete(state)  # evicted (a volatile-* policy), or deleted by hand
        grant = await other.authorize(scope.response_id, scope.token, None)
        with pytest.raises(PostRejected) as unknown:
            await other.post(grant, entry("x"))
        assert unknown.value.status == 404
        await relay.advance(scope)
        assert await client.pttl(state) > 0
        await client.aclose()


# --- how much one response may hold ---------------------------------------------------------------------


def named(output: str) -> list[dict[str, Any]]:
    """An entry without ``params`` (matched by name): its bytes are its output's."""
    return [{"name": "cd", "output": output}]


@pytest.mark.parametrize("where", ["local", "redis"])
async def test_the_bytes_of_a_message_are_bounded_the_same_in_every_store(redis_url: str, where: str) -> None:
    """Before, one response could hold 256 entries of 256 KiB in Redis (64 MiB), and reading them back took the
    relay past its operation timeout, which marked Redis down for every response of the replica. Arguments
    count as well as outputs (a first bound that counted outputs only was passed by large ``params``)."""
    limits = CacheLimits(max_bytes_per_response=40)
    if where == "local":
        caches = [ToolOutputCache(limits)] * 2
    else:
        caches = [ToolOutputCache(limits, store=RedisScopeStore.from_url(redis_url, SECRET)) for _ in range(2)]
    relay, other = caches

    async def post(cache: ToolOutputCache, body: list[dict[str, Any]]) -> int:
        return await cache.post(await cache.authorize(scope.response_id, scope.token, None), body)

    try:
        scope = await relay.open(TOOLS, expects_posts=True)
        assert await post(relay, named("x" * 24)) == 1
        with pytest.raises(PostRejected) as big:
            await post(other, named("x" * 17))
        assert big.value.status == 413 and "at most 40" in str(big.value)
        assert await post(other, named("x" * 16)) == 1  # 40 bytes: the bound exactly
        await relay.advance(scope)  # a new message starts with nothing held
        with pytest.raises(PostRejected) as wide:  # a one-byte output, wide arguments
            await post(other, [{"name": "cd", "params": {"folder": "d" * 40}, "output": "x"}])
        assert wide.value.status == 413
        assert await post(relay, [{"name": "cd", "params": {"folder": "docs"}, "output": "x"}]) == 1
    finally:
        for cache in {id(c): c for c in caches}.values():
            await cache.store.aclose()


def test_the_byte_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size limits"):
        CacheLimits(max_bytes_per_response=0)


async def test_a_replica_keeps_the_gateways_limits(redis_url: str) -> None:
    """Before, a replica's store took the default maximum life and memory of finished responses whatever the
    gateway's limits said (the local store took them)."""
    store = replica_store(redis_url, SECRET, CacheLimits(max_response_s=120.0, finished_memory=7))
    assert store._max_response_s == 120.0 and store._finished_memory == 7
    await store.aclose()
    default = replica_store(redis_url, SECRET)
    assert default._max_response_s == CacheLimits().max_response_s
    await default.aclose()


# --- a second review of the fixes (2026-12-05) ----------------------------------------------------------


async def test_a_finish_cancelled_on_its_way_to_redis_is_still_sent(redis_url: str) -> None:
    """A client that hangs up as the response ends cancels the relay inside its finish: before, the finish
    stayed owed with no repair scheduled, and other replicas took posts for the finished response."""
    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        real = store._backend.finish
        entered, never = asyncio.Event(), asyncio.Event()

        async def hanging(*args: Any) -> None:
            entered.set()
            await never.wait()

        store._backend.finish = hanging  # type: ignore[method-assign]
        closing = asyncio.create_task(relay.close(scope))
        await entered.wait()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        store._backend.finish = real  # type: ignore[method-assign]
        await until_repaired(store)
        with pytest.raises(PostRejected) as there:
            await other.authorize(scope.response_id, scope.token, None)
        assert there.value.status == 410


@pytest.mark.parametrize(("field", "garbage"), [("posts", "garbage"), ("posts", "1.5"), ("bytes", "x"),
                                                ("seg", "nan"), ("posts", "-2"), ("posts", "-3"), ("posts", "-4"),
                                                ("posts", "-5"), ("posts", "-7"), ("bytes", "-1"), ("seg", "-1"),
                                                ("posts", "1e300")])
async def test_a_garbled_count_refuses_the_post_whole_and_never_marks_redis_down(
        redis_url: str, field: str, garbage: str) -> None:
    """Before, the append pushed the entries and then failed on the garbled count (Redis does not roll a
    script back): the poster got 503, the entries were served all the same, and Redis was marked down. A
    negative count was taken as a count: the post was stored, then refused with a result code (404 for -2,
    410, 409, 413) that its count plus one spelled, and served all the same (a later review)."""
    import redis.asyncio

    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        scope = await relay.open(TOOLS, expects_posts=True)
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.hset(store._backend.key(scope.response_id, "state"), field, garbage)
        with pytest.raises(PostRejected) as refused:
            await relay.post(await relay.authorize(scope.response_id, scope.token, None), entry("RESULT"))
        assert refused.value.status == 503 and "garbled" in str(refused.value)
        assert await client.llen(store._backend.key(scope.response_id, "entries")) == 0
        await client.aclose()
        assert await served(relay, scope) is None
        assert not store.degraded and store.errors == 0 and other.store.stats()["errors"] == 0
        assert (await relay.open(TOOLS)).response_id in store._mine  # Redis serves the others


async def test_a_key_of_the_wrong_type_drops_its_owed_write_and_spares_the_others(redis_url: str) -> None:
    """Before, an owed move refused with WRONGTYPE was sent again and again, each time marking Redis down for
    the whole replica, and the repair never got past it to the other responses' writes."""
    import redis.asyncio

    async with two_replicas(redis_url) as (relay, other):
        store = relay.store
        assert isinstance(store, RedisScopeStore)
        broken, fine = await relay.open(TOOLS, expects_posts=True), await relay.open(TOOLS, expects_posts=True)
        client = redis.asyncio.Redis.from_url(redis_url)
        state = store._backend.key(broken.response_id, "state")
        await client.delete(state)
        await client.set(state, "not a hash")
        await relay.advance(broken)  # refused: dropped, never retried
        assert store.stats()["owed"] == 0 and not store.degraded and store.errors == 0
        fail_once(store, "advance")
        await relay.advance(fine)
        await until_repaired(store)
        grant = await other.authorize(fine.response_id, fine.token, "1")
        assert await other.post(grant, entry("next")) == 1
        assert await served(relay, fine) == ["next"]
        await client.aclose()


async def test_the_bound_on_owed_writes_never_drops_a_relayed_responses_move(redis_url: str) -> None:
    store = RedisScopeStore.from_url(redis_url, SECRET, retry_after_s=60.0, finished_memory=2)
    relay = ToolOutputCache(store=store)
    try:
        live = await relay.open(TOOLS, expects_posts=True)
        ended = [await relay.open(TOOLS) for _ in range(3)]
        fail_once(store, "advance")
        await relay.advance(live)  # owed; Redis is now skipped for a minute
        for scope in ended:
            await relay.close(scope)  # owed too, past the bound
        assert store._owed.get(live.response_id, ("",))[0] == "advance"
        assert len(store._owed) == 2
    finally:
        await store.aclose()
