"""Gateway replicas sharing response scopes through a real redis-server: any replica takes any post.

Two (or three) gateways run on loopback ports in front of one engine, each with its own
:class:`RedisScopeStore` on the Redis the fixture starts. A response relayed by one replica is continued
with results posted to the other; tokens, segments, expiry and finished responses are judged the same on
every replica; values forged in Redis are never served; and with Redis down a gateway keeps serving
locally, answers 503 where it cannot know, and says so (events, stats). One test runs the replicas as two
real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import redis_fixture
from forethought.bench.engine_sim.model_server import ModelServer, SpeculatorConfig
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.gateway.replicas import RedisScopeStore, create_replica
from forethought.llm.events import MessageDone, ToolResultServed
from forethought.llm.tool_cache import CachedOutput, CacheTarget, HttpToolCachePoster
from forethought.serve.http import EventStream, serve_in_process
from forethought.serve.subprocess_server import serve_in_subprocess
from forethought.stores.events import StoreEvent
from forethought.stores.sealing import Sealer
from redis_fixture import RedisServer
from test_gateway import FAST, HIT_WAIT_S, TRAJECTORY, Stream, raw_post, served

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
SECRET = b"gateway-replica-secret-for-tests"
CD = [{"name": "cd", "params": {"folder": "docs"}, "output": "moved to docs"}]


class Clock:
    """A wall clock the test moves by hand, shared by the replicas (entry expiry)."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@contextlib.asynccontextmanager
async def replicas(upstream: str, url: str, n: int = 2, *, secrets: tuple[bytes, ...] = (),
                   events: list[StoreEvent] | None = None, clock: Any = time.time,
                   **config: Any) -> AsyncIterator[tuple[list[Gateway], list[str]]]:
    """``n`` gateways in front of ``upstream`` sharing Redis at ``url``; yields them and their base URLs."""
    async with contextlib.AsyncExitStack() as stack:
        gateways, urls = [], []
        for i in range(n):
            secret = secrets[i] if i < len(secrets) else SECRET
            store = RedisScopeStore.from_url(url, secret, clock=clock, retry_after_s=0.0,
                                             on_event=None if events is None else events.append)
            gateway = Gateway(upstream, GatewayConfig(**config), store)
            stack.push_async_callback(gateway.aclose)
            urls.append(await stack.enter_async_context(serve_in_process(gateway.app)))
            gateways.append(gateway)
        yield gateways, urls


def via(target: CacheTarget, relay: str, other: str) -> CacheTarget:
    """The same response's post address on another replica."""
    return dataclasses.replace(target, url=target.url.replace(relay, other, 1))


class GatedEngine:
    """An upstream whose first message (one ``cd`` call) closes only when the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.requests = 0

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests += 1
        continued = any(m.get("role") == "tool" for m in body["messages"])

        async def chunks() -> AsyncIterator[bytes]:
            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                data = {"id": "up", "object": "chat.completion.chunk", "created": 0, "model": "m",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                return b"data: " + json.dumps(data).encode() + b"\n\n"

            yield chunk({"role": "assistant", "content": ""})
            if continued:
                yield chunk({"content": "done"}, "stop")
            else:
                await self.gate.wait()
                yield chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {
                    "name": "cd", "arguments": json.dumps({"folder": "docs"})}}]}, "tool_calls")
            yield b"data: [DONE]\n\n"

        return EventStream(chunks())

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])


@contextlib.asynccontextmanager
async def gated() -> AsyncIterator[tuple[GatedEngine, str]]:
    engine = GatedEngine()
    async with serve_in_process(engine.app) as url:
        yield engine, url + "/v1"


async def finish(stream: Stream, engine: GatedEngine) -> list[Any]:
    engine.gate.set()
    return await stream.rest()


# --- any replica serves a continuation --------------------------------------------------------------


async def test_posts_alternating_between_replicas_continue_one_response_to_its_end(redis_url: str) -> None:
    engine = ModelServer([TRAJECTORY], FAST, SpeculatorConfig(timing=FAST))
    outputs = ["in docs", "/docs", "A", "B", "in x", "/x"]
    async with serve_in_process(engine.app) as engine_url, \
            replicas(engine_url + "/v1", redis_url, post_wait_s=HIT_WAIT_S) as (gateways, urls):
        for relay in (0, 1):  # each replica relays once; each message's posts go to the other replica in turn
            stream = Stream(urls[relay], conversation_id=f"r{relay}")
            target = await stream.start()
            poster = HttpToolCachePoster()
            posts = [[CachedOutput("cd", "in docs", {"folder": "docs"})], [CachedOutput("pwd", "/docs", {})],
                     [CachedOutput("grep", "A", {"file": "a.md"}), CachedOutput("grep", "B", {"file": "b.md"})],
                     [CachedOutput("cd", "in x", {"folder": "x"}), CachedOutput("pwd", "/x", {})]]

            def at(segment: int, relay: int = relay, target: CacheTarget = target) -> CacheTarget:
                return via(target, urls[relay], urls[(relay + 1 + segment) % 2]).next_segment(segment)

            assert await poster.post(at(0), posts[0])
            seen = 0
            async for event in stream._iter:
                stream.events.append(event)
                if isinstance(event, ToolResultServed):
                    seen += 1
                    if seen == sum(len(p) for p in posts[:event.segment]) and event.segment < len(posts):
                        # the last result of a message: post for the next one
                        assert await poster.post(at(event.segment), posts[event.segment])
            await poster.aclose()
            await stream.llm.aclose()
            assert [r.output for r in served(stream.events)] == outputs
            done = stream.events[-1]
            assert isinstance(done, MessageDone) and done.finish_reason == "stop"
        stats = [g.stats() for g in gateways]
    assert [s["continuations"] for s in stats] == [4, 4]
    assert sum(s["posts"] for s in stats) == 8 and all(s["posts"] == 4 for s in stats)  # half on each replica
    assert all(s["open_responses"] == 0 and s["store"]["kind"] == "redis" and not s["store"]["degraded"]
               for s in stats)


async def test_tokens_segments_and_endings_are_judged_the_same_on_every_replica(redis_url: str) -> None:
    async with gated() as (engine, upstream), replicas(upstream, redis_url, 3, post_wait_s=0.0,
                                                       secrets=(SECRET, SECRET, b"another-deployment-secret")) \
            as (gateways, urls):
        first, second = Stream(urls[0], conversation_id="one"), Stream(urls[1], conversation_id="two")
        a, b = await first.start(), await second.start()
        for url in urls[:2]:
            at_a = via(a, urls[0], url)
            assert (await raw_post(at_a, CD, token=b.token)).status_code == 403
            assert (await raw_post(at_a, CD, token=None)).status_code == 401
            assert (await raw_post(at_a, CD, response_id="ftg-nope")).status_code == 404
            assert (await raw_post(at_a, CD, segment="3")).status_code == 409
        assert (await raw_post(via(a, urls[0], urls[2]), CD)).status_code == 404  # another secret: not ours
        assert gateways[2].stats()["store"]["rejected"] == 1
        assert (await raw_post(via(a, urls[0], urls[1]), CD, segment="0")).json() == {"cached": 1}
        engine.gate.set()
        events_one, events_two = await asyncio.gather(first.rest(), second.rest())
        assert [r.output for r in served(events_one)] == ["moved to docs"]
        assert not served(events_two) and events_two[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]
        for url in urls[:2]:
            assert (await raw_post(via(a, urls[0], url), CD)).status_code == 410


async def test_entries_expire_on_the_shared_clock(redis_url: str) -> None:
    clock = Clock()
    async with gated() as (engine, upstream), \
            replicas(upstream, redis_url, post_wait_s=0.0, clock=clock) as (_, urls):
        stream = Stream(urls[0])
        target = await stream.start()
        keep = [{**CD[0], "keep_alive": 5}]
        assert (await raw_post(via(target, urls[0], urls[1]), keep)).json() == {"cached": 1}
        clock.t += 5.0  # exactly at its end: gone
        assert not served(await finish(stream, engine))
    async with gated() as (engine, upstream), \
            replicas(upstream, redis_url, post_wait_s=0.0, clock=clock) as (_, urls):
        stream = Stream(urls[0])
        target = await stream.start()
        assert (await raw_post(via(target, urls[0], urls[1]), keep)).json() == {"cached": 1}
        clock.t += 4.9
        assert [r.output for r in served(await finish(stream, engine))] == ["moved to docs"]


async def test_values_forged_in_redis_are_never_served(redis_url: str) -> None:
    import redis.asyncio

    async with gated() as (engine, upstream), replicas(upstream, redis_url, post_wait_s=0.0) as (gateways, urls):
        stream = Stream(urls[0])
        target = await stream.start()
        store = gateways[0].cache.store
        assert isinstance(store, RedisScopeStore)
        key = store._backend.key(target.response_id, "entries")
        entry = json.dumps({"name": "cd", "key": None, "output": "forged", "expires": time.time() + 60,
                            "exclusive": False, "segment": 0}, sort_keys=True, separators=(",", ":")).encode()
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.rpush(key, Sealer(b"not-the-deployment-secret").seal(key, entry), b"\0" * 32 + entry)
        await client.hincrby(store._backend.key(target.response_id, "state"), "posts", 1)
        await client.aclose()
        events = await finish(stream, engine)
        assert not served(events) and events[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]
        assert gateways[0].stats()["store"]["rejected"] == 2


@pytest.mark.parametrize("garbage", ["garbage", "1.5", "nan"])
async def test_a_post_count_garbled_in_redis_ends_the_message_as_a_miss(redis_url: str, garbage: str) -> None:
    """Before, a post count that is not a number raised out of the relay and dropped the client's stream."""
    import redis.asyncio

    async with gated() as (engine, upstream), replicas(upstream, redis_url, post_wait_s=0.5) as (gateways, urls):
        stream = Stream(urls[0])
        target = await stream.start()
        store = gateways[0].cache.store
        assert isinstance(store, RedisScopeStore)
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.hset(store._backend.key(target.response_id, "state"), "posts", garbage)
        await client.aclose()
        events = await finish(stream, engine)
        assert not served(events) and events[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]


# --- Redis away ---------------------------------------------------------------------------------------


async def test_with_redis_down_a_replica_serves_locally_answers_503_elsewhere_and_says_so(
        redis_server: RedisServer, redis_url: str) -> None:
    events: list[StoreEvent] = []
    async with gated() as (engine, upstream), \
            replicas(upstream, redis_url, post_wait_s=0.0, events=events) as (gateways, urls):
        shared = Stream(urls[0], conversation_id="shared")
        shared_target = await shared.start()  # opened while Redis was up: its entries live there
        redis_server.stop()
        for url in urls:  # Redis gone mid-response: nobody can take a post for it; a clear 503
            answer = await raw_post(via(shared_target, urls[0], url), CD)
            assert answer.status_code == 503 and "Redis" in answer.json()["error"]["message"]
        local = Stream(urls[0], conversation_id="local")
        local_target = await local.start()  # opened while Redis is down: kept on this replica alone
        assert (await raw_post(via(local_target, urls[0], urls[1]), CD)).status_code == 503
        assert (await raw_post(local_target, CD)).json() == {"cached": 1}
        engine.gate.set()
        missed, kept = await asyncio.gather(shared.rest(), local.rest())
        assert not served(missed) and missed[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]
        assert [r.output for r in served(kept)] == ["moved to docs"]
        down = [g.stats()["store"] for g in gateways]
        assert all(s["degraded"] and s["errors"] >= 1 for s in down) and down[0]["local_only"] == 1
        assert {e.kind for e in events} == {"degraded"} and all(e.store == "gateway-scopes" for e in events)
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(urls[0] + "/metrics")).text
        assert "forethought_gateway_store_degraded 1.0" in metrics

        redis_server.start()
        engine.gate.clear()
        again = Stream(urls[0], conversation_id="again")
        target = await again.start()  # Redis is back: shared again
        assert (await raw_post(via(target, urls[0], urls[1]), CD)).json() == {"cached": 1}
        assert [r.output for r in served(await finish(again, engine))] == ["moved to docs"]
        assert [e.kind for e in events].count("recovered") == 2
        assert not any(g.stats()["store"]["degraded"] for g in gateways)


# --- two real gateway processes -----------------------------------------------------------------------


async def test_replicas_in_two_processes_continue_each_others_responses(redis_url: str) -> None:
    engine = ModelServer([TRAJECTORY], FAST, SpeculatorConfig(timing=FAST))
    config = GatewayConfig(post_wait_s=HIT_WAIT_S)
    async with serve_in_process(engine.app) as engine_url, \
            serve_in_subprocess(create_replica, engine_url + "/v1", redis_url, SECRET, config) as child, \
            replicas(engine_url + "/v1", redis_url, 1, post_wait_s=HIT_WAIT_S) as (_, [here]):
        urls = [here, child]  # this process and another one
        for relay in (0, 1, 0, 1):
            stream = Stream(urls[relay], conversation_id=f"p{relay}")
            target = await stream.start()
            answer = await raw_post(via(target, urls[relay], urls[1 - relay]), CD)
            assert answer.json() == {"cached": 1}
            assert [r.output for r in served(await stream.rest())] == ["moved to docs"]
    assert engine.stats()["by_model"]["main"]["continuations"] == 4


def test_the_cli_refuses_redis_without_a_secret_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from forethought.cli import app

    base = ["gateway", "--upstream", "http://127.0.0.1:9/v1", "--no-check-upstream", "--redis", "redis://127.0.0.1:9/0"]
    short = tmp_path / "short"
    short.write_bytes(b"short")
    for extra, message in (([], "--secret-file"), (["--secret-file", str(short)], "at least 16")):
        result = CliRunner().invoke(app, [*base, *extra])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


def test_the_cli_checks_at_start_that_redis_answers(tmp_path: Path) -> None:
    import http.server
    import threading

    from typer.testing import CliRunner

    from forethought.cli import app

    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    class Quiet(http.server.BaseHTTPRequestHandler):  # answers every request 501, logs nothing
        def log_message(self, format: str, *args: Any) -> None:
            pass

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        result = CliRunner().invoke(app, ["gateway", "--upstream", f"http://127.0.0.1:{upstream.server_port}/v1",
                                          "--redis", "redis://127.0.0.1:9/0", "--secret-file", str(secret)])
    finally:
        upstream.shutdown()
        upstream.server_close()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "redis://127.0.0.1:9/0 does not answer" in lines[0], \
        result.output


@pytest.mark.parametrize("content", [b"short", b""])
def test_a_short_secret_is_refused(tmp_path: Path, content: bytes) -> None:
    from forethought.gateway.replicas import load_secret
    from forethought.stores.errors import StoreError

    path = tmp_path / "secret"
    path.write_bytes(content)
    with pytest.raises(StoreError, match="at least 16"):
        load_secret(path)


async def test_the_entry_bound_of_a_response_holds_across_replicas(redis_url: str) -> None:
    from forethought.gateway.cache import CacheLimits

    limits = CacheLimits(max_entries_per_response=2)
    async with gated() as (engine, upstream), \
            replicas(upstream, redis_url, post_wait_s=0.0, limits=limits) as (_, urls):
        stream = Stream(urls[0])
        target = await stream.start()
        assert (await raw_post(target, CD * 2)).json() == {"cached": 2}
        assert (await raw_post(via(target, urls[0], urls[1]), CD)).status_code == 413
        assert [r.output for r in served(await finish(stream, engine))] == ["moved to docs"]


async def test_a_response_never_relayed_to_its_end_is_forgotten_after_its_maximum_life(redis_url: str) -> None:
    from forethought.gateway.cache import ToolOutputCache

    clock = Clock()
    store = RedisScopeStore.from_url(redis_url, SECRET, clock=clock, max_response_s=60.0)
    cache = ToolOutputCache(store=store)
    abandoned = await cache.open([])  # its stream never started, so nothing will finish it
    assert len(cache) == 1
    clock.t += 61.0
    await cache.open([])
    assert len(cache) == 1 and abandoned.response_id not in store._mine
    await store.aclose()


@contextlib.asynccontextmanager
async def black_hole() -> AsyncIterator[str]:
    """A "Redis" on loopback that accepts connections and never answers (the slowest server there is)."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        yield f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_redis_that_never_answers_is_given_up_on_and_never_serves_wrongly() -> None:
    events: list[StoreEvent] = []
    async with gated() as (engine, upstream), black_hole() as silent, \
            replicas(upstream, silent, post_wait_s=0.0, events=events) as (gateways, urls):
        stream = Stream(urls[0])
        target = await stream.start()  # creating the scope timed out: it is local-only
        assert (await raw_post(via(target, urls[0], urls[1]), CD)).status_code == 503  # the lookup timed out
        assert (await raw_post(target, CD)).json() == {"cached": 1}
        assert [r.output for r in served(await finish(stream, engine))] == ["moved to docs"]
        assert gateways[0].stats()["store"]["local_only"] == 1
    assert [e.kind for e in events] == ["degraded", "degraded"] and "Timeout" in events[0].detail
