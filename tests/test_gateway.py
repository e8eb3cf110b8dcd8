"""The tool-cache gateway over real HTTP in front of the simulated engine.

Each test starts the engine and a gateway on loopback ports, opens streamed completions through the
gateway with the real client (``response_events=True`` exposes the response id and token), and posts to
``/cache-tool-output/{id}`` with httpx2: hits continue in the same response, misses end normally, and every
bad post gets its 4xx without disturbing anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forethought import ToolCall
from forethought.bench.engine_sim.model_server import ModelServer, SpeculatorConfig, TimingConfig
from forethought.errors import StreamDroppedError, UpstreamError
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.gateway.cache import CacheLimits
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    ResponseStarted,
    ToolCallClosed,
    ToolCallStarted,
    ToolResultServed,
)
from forethought.llm.tool_cache import SEGMENT_HEADER, TOKEN_HEADER, CachedOutput, CacheTarget, HttpToolCachePoster
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = (
    {"type": "function", "function": {"name": "cd", "parameters": {
        "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}},
    {"type": "function", "function": {"name": "grep", "parameters": {
        "type": "object", "properties": {"file": {"type": "string"}, "n": {"type": "integer", "default": 1}},
        "required": ["file"]}}},
    {"type": "function", "function": {"name": "pwd", "parameters": {"type": "object", "properties": {}}}},
)
GREP_A, GREP_B = ToolCall("grep", {"file": "a.md"}), ToolCall("grep", {"file": "b.md"})
TRAJECTORY = Trajectory("t-gw", (Turn("go", (
    (ToolCall("cd", {"folder": "docs"}),),
    (ToolCall("pwd"),),
    (GREP_A, GREP_B),
    (ToolCall("cd", {"folder": "x"}), ToolCall("pwd")),
), "Done."),), TOOLS)
USER = [{"role": "user", "content": "go"}]
FAST = TimingConfig(ttft_s=0.0, decode_tokens_per_s=2000.0, reasoning_tokens=3, time_scale=0.0)
SLOW = TimingConfig(ttft_s=0.4, decode_tokens_per_s=2000.0, reasoning_tokens=3)
HIT_WAIT_S = 0.5
"""Posts here are sent as the response starts; this bounds how late one may arrive (and what a message
without a post waits)."""


@contextlib.asynccontextmanager
async def stack(timing: TimingConfig = FAST, **config: Any) -> AsyncIterator[tuple[ModelServer, Gateway, str]]:
    """The engine and a gateway in front of it; yields them and the gateway's base URL."""
    engine = ModelServer([TRAJECTORY], timing, SpeculatorConfig(timing=FAST))
    async with serve_in_process(engine.app) as engine_url:
        gateway = Gateway(engine_url + "/v1", GatewayConfig(**config))
        try:
            async with serve_in_process(gateway.app) as url:
                yield engine, gateway, url
        finally:
            await gateway.aclose()


def messages_at(step: int) -> list[dict[str, Any]]:
    """The conversation before ``step`` (assistant placeholders count as steps for the engine)."""
    out: list[dict[str, Any]] = list(USER)
    for i in range(step):
        out += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"p{i}", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"p{i}", "content": "ok"}]
    return out


class Stream:
    """One streamed completion through the gateway, read event by event."""

    def __init__(self, url: str, step: int = 0, **metadata: str) -> None:
        self.llm = OpenAIChatClient.for_gateway(url + "/v1", max_retries=0)
        self.events: list[LLMEvent] = []
        self._iter = self.llm.stream("main", messages_at(step), list(TOOLS),
                                     metadata={"trajectory_id": TRAJECTORY.id, **metadata})

    async def start(self) -> CacheTarget:
        first = await anext(self._iter)
        assert isinstance(first, ResponseStarted)
        target = CacheTarget.from_response(first)
        assert target is not None
        return target

    async def rest(self) -> list[LLMEvent]:
        async for event in self._iter:
            self.events.append(event)
        await self.llm.aclose()
        return self.events


async def raw_post(target: CacheTarget, body: Any, *, token: str | None = "same", segment: str | None = None,
                   response_id: str | None = None, content: bytes | None = None,
                   client: httpx2.AsyncClient | None = None) -> httpx2.Response:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers[TOKEN_HEADER] = target.token if token == "same" else token
    if segment is not None:
        headers[SEGMENT_HEADER] = segment
    url = target.url if response_id is None else target.url.replace(target.response_id, response_id)
    payload = content if content is not None else json.dumps(body).encode()
    if client is not None:
        return await client.post(url, content=payload, headers=headers)
    async with httpx2.AsyncClient() as fresh:
        return await fresh.post(url, content=payload, headers=headers)


def served(events: list[LLMEvent]) -> list[ToolResultServed]:
    return [e for e in events if isinstance(e, ToolResultServed)]


# --- hits and misses -----------------------------------------------------------------------------


async def test_a_hit_continues_server_side_in_the_same_response() -> None:
    async with stack(post_wait_s=HIT_WAIT_S) as (engine, gateway, url):
        stream = Stream(url)
        target = await stream.start()
        poster = HttpToolCachePoster()
        assert await poster.post(target, [CachedOutput("cd", "moved to docs", {"folder": "docs"})]) == 1
        await poster.aclose()
        events = await stream.rest()
    result = served(events)
    assert [(r.name, r.output, r.segment) for r in result] == [("cd", "moved to docs", 1)]
    started = [e.name for e in events if isinstance(e, ToolCallStarted)]
    assert started == ["cd", "pwd"]  # the call, then the continuation's next call, in one response
    served_at = events.index(result[0])
    assert any(isinstance(e, ToolCallClosed) and e.name == "pwd" for e in events[served_at:])
    done = events[-1]
    assert isinstance(done, MessageDone) and done.finish_reason == "tool_calls"
    assert done.usage is not None and done.usage.cached_tokens > 0
    stats = engine.stats()["by_model"]["main"]
    assert stats["requests"] == 2 and stats["continuations"] == 1
    assert gateway.stats()["continuations"] == 1 and gateway.stats()["open_responses"] == 0


async def test_a_miss_ends_with_tool_calls_as_usual() -> None:
    async with stack(post_wait_s=0.01) as (engine, gateway, url):
        stream = Stream(url)
        target = await stream.start()
        await raw_post(target, [{"name": "cd", "params": {"folder": "elsewhere"}, "output": "wrong guess"}])
        events = await stream.rest()
    assert not served(events)
    assert isinstance(events[-1], MessageDone) and events[-1].finish_reason == "tool_calls"
    assert engine.stats()["requests"] == 1 and gateway.stats()["tool_call_endings"] == 1


async def test_canonical_keys_match_defaults_and_key_order() -> None:
    async with stack(post_wait_s=HIT_WAIT_S) as (_, _, url):
        stream = Stream(url, step=2)  # grep a.md and grep b.md in one message
        target = await stream.start()
        await raw_post(target, [{"name": "grep", "params": {"n": 1, "file": "b.md"}, "output": "B"},
                                {"name": "grep", "params": {"file": "a.md", "n": 1}, "output": "A"}])
        events = await stream.rest()
    assert [(r.index, r.output) for r in served(events)] == [(0, "A"), (1, "B")]


async def test_all_calls_of_a_message_must_match_or_none_is_served() -> None:
    async with stack(post_wait_s=0.05) as (_, gateway, url):
        stream = Stream(url, step=2)
        target = await stream.start()
        await raw_post(target, [{"name": "grep", "params": {"file": "a.md"}, "output": "A"}])
        events = await stream.rest()
    assert not served(events) and events[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]
    assert gateway.stats()["served_calls"] == 0


async def test_a_params_less_entry_matches_by_name_only_when_that_name_is_unique() -> None:
    async with stack(post_wait_s=0.05) as (_, _, url):
        twice = Stream(url, step=2)  # two grep calls: a name alone is ambiguous
        target = await twice.start()
        await raw_post(target, [{"name": "grep", "output": "?"}, {"name": "grep", "output": "?"}])
        assert not served(await twice.rest())
    async with stack(post_wait_s=HIT_WAIT_S) as (_, _, url):
        once = Stream(url, step=1)  # one pwd call
        target = await once.start()
        await raw_post(target, [{"name": "pwd", "output": "/docs"}])
        assert [r.output for r in served(await once.rest())] == ["/docs"]


async def test_an_exclusive_entry_serves_only_a_single_call_message() -> None:
    async with stack(post_wait_s=0.05) as (_, _, url):
        pair = Stream(url, step=3)  # cd x and pwd in one message
        target = await pair.start()
        await raw_post(target, [{"name": "cd", "params": {"folder": "x"}, "output": "in x", "exclusive": True},
                                {"name": "pwd", "params": {}, "output": "/x"}])
        assert not served(await pair.rest())
    async with stack(post_wait_s=HIT_WAIT_S) as (_, _, url):
        single = Stream(url, step=0)
        target = await single.start()
        await raw_post(target, [{"name": "cd", "params": {"folder": "docs"}, "output": "ok", "exclusive": True}])
        assert [r.output for r in served(await single.rest())] == ["ok"]


async def test_expired_entries_are_not_served() -> None:
    async with stack(SLOW, post_wait_s=0.0) as (_, _, url):
        stream = Stream(url)
        target = await stream.start()
        answer = await raw_post(target, [{"name": "cd", "params": {"folder": "docs"}, "output": "ok",
                                          "keep_alive": 0.05}])
        assert answer.json() == {"cached": 1}
        events = await stream.rest()  # the call closes ~0.4 s later, long after the entry expired
    assert not served(events) and events[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]


async def test_keep_alive_is_capped_by_the_server_maximum() -> None:
    limits = CacheLimits(default_keep_alive_s=0.05, max_keep_alive_s=0.05)
    async with stack(SLOW, post_wait_s=0.0, limits=limits) as (_, _, url):
        stream = Stream(url)
        target = await stream.start()
        await raw_post(target, [{"name": "cd", "params": {"folder": "docs"}, "output": "ok", "keep_alive": 3600}])
        assert not served(await stream.rest())


# --- who may post, and what ----------------------------------------------------------------------


async def test_two_conversations_never_see_each_others_entries_or_tokens() -> None:
    async with stack(SLOW, post_wait_s=0.2) as (_, _, url):
        first, second = Stream(url, conversation_id="one"), Stream(url, conversation_id="two")
        a, b = await first.start(), await second.start()
        assert a.response_id != b.response_id and a.token != b.token
        foreign = await raw_post(a, [{"name": "cd", "params": {"folder": "docs"}, "output": "x"}], token=b.token)
        assert foreign.status_code == 403
        missing = await raw_post(a, [{"name": "cd", "params": {"folder": "docs"}, "output": "x"}], token=None)
        assert missing.status_code == 401
        ok = await raw_post(a, [{"name": "cd", "params": {"folder": "docs"}, "output": "for one"}])
        assert ok.status_code == 200
        events_one, events_two = await asyncio.gather(first.rest(), second.rest())
    assert [r.output for r in served(events_one)] == ["for one"]
    assert not served(events_two) and events_two[-1].finish_reason == "tool_calls"  # type: ignore[union-attr]


async def test_unknown_and_finished_responses_are_rejected() -> None:
    async with stack(post_wait_s=0.0) as (_, gateway, url):
        stream = Stream(url)
        target = await stream.start()
        await stream.rest()
        body = [{"name": "cd", "output": "late"}]
        assert (await raw_post(target, body)).status_code == 410
        assert (await raw_post(target, body, response_id="ftg-nope")).status_code == 404
        assert gateway.stats()["posts_rejected"] == {"404": 1, "410": 1}


MALFORMED: list[tuple[str, Any, int]] = [
    ("not an array", {"name": "cd", "output": "x"}, 400),
    ("entry not an object", ["cd"], 400),
    ("missing name", [{"output": "x"}], 400),
    ("empty name", [{"name": "", "output": "x"}], 400),
    ("missing output", [{"name": "cd"}], 400),
    ("output not a string", [{"name": "cd", "output": {"dir": "docs"}}], 400),
    ("unknown field", [{"name": "cd", "output": "x", "parms": {}}], 400),
    ("params not an object", [{"name": "cd", "params": ["docs"], "output": "x"}], 400),
    ("params against the schema", [{"name": "cd", "params": {"folder": 3}, "output": "x"}], 400),
    ("unknown tool", [{"name": "rm", "output": "x"}], 400),
    ("keep_alive negative", [{"name": "cd", "output": "x", "keep_alive": -1}], 400),
    ("keep_alive a string", [{"name": "cd", "output": "x", "keep_alive": "10"}], 400),
    ("keep_alive a boolean", [{"name": "cd", "output": "x", "keep_alive": True}], 400),
    ("exclusive not a boolean", [{"name": "cd", "output": "x", "exclusive": "yes"}], 400),
    ("too many entries", [{"name": "pwd", "output": "x"}] * 9, 413),
    ("output too large", [{"name": "pwd", "output": "x" * 2000}], 413),
]


async def test_bad_posts_get_clear_4xx_and_disturb_nothing() -> None:
    limits = CacheLimits(max_body_bytes=4096, max_output_bytes=1024, max_entries_per_post=8)
    async with stack(SLOW, post_wait_s=HIT_WAIT_S, limits=limits) as (_, gateway, url):
        stream = Stream(url)
        target = await stream.start()
        async with httpx2.AsyncClient() as client:
            for label, body, status in MALFORMED:
                answer = await raw_post(target, body, client=client)
                assert answer.status_code == status, label
                assert answer.json()["error"]["message"], label
            assert (await raw_post(target, None, content=b"{not json", client=client)).status_code == 400
            oversize = b"[" + b" " * 5000 + b"]"
            assert (await raw_post(target, None, content=oversize, client=client)).status_code == 413
            pwd = [{"name": "pwd", "output": "x"}]
            assert (await raw_post(target, pwd, segment="7", client=client)).status_code == 409
            assert (await raw_post(target, pwd, segment="zero", client=client)).status_code == 409
            good = await raw_post(target, [{"name": "cd", "params": {"folder": "docs"}, "output": "fine"}],
                                  segment="0", client=client)
            assert good.json() == {"cached": 1}
        events = await stream.rest()
    assert [r.output for r in served(events)] == ["fine"]  # the response itself was never affected
    rejected = gateway.stats()["posts_rejected"]
    assert sum(rejected.values()) == len(MALFORMED) + 4 and gateway.stats()["posts"] == 1


async def test_a_post_is_stored_whole_or_not_at_all() -> None:
    async with stack(SLOW, post_wait_s=0.2) as (_, _, url):
        stream = Stream(url)
        target = await stream.start()
        mixed = [{"name": "cd", "params": {"folder": "docs"}, "output": "good"}, {"name": "cd", "output": 5}]
        assert (await raw_post(target, mixed)).status_code == 400
        assert not served(await stream.rest())


# --- the proxy itself ----------------------------------------------------------------------------


async def test_upstream_errors_pass_through_with_their_status() -> None:
    async with stack() as (_, _, url):
        llm = OpenAIChatClient(url + "/v1", response_events=True, max_retries=0)
        with pytest.raises(UpstreamError, match=r"404.*unknown trajectory"):
            async for _ in llm.stream("main", USER, list(TOOLS), metadata={"trajectory_id": "nope"}):
                pass
        await llm.aclose()


async def test_a_dropped_upstream_drops_the_client_stream_and_frees_the_response() -> None:
    async with stack() as (_, gateway, url):
        stream = Stream(url, fault="drop_stream")
        await stream.start()
        with pytest.raises(StreamDroppedError):
            await stream.rest()
        await stream.llm.aclose()
        assert gateway.stats()["open_responses"] == 0 and gateway.stats()["upstream_dropped"] == 1


@pytest.mark.parametrize(("body", "match"), [
    ("data: {not json\n\n", "upstream stream: unparsable stream chunk"),
    ("data: [1]\n\n", "upstream stream: stream chunk is not a JSON object"),
])
async def test_an_unparsable_upstream_stream_becomes_an_error_chunk(body: str, match: str) -> None:
    async def completions(request: Request) -> Response:
        return Response(body, media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_in_process(upstream) as upstream_url:
        gateway = Gateway(upstream_url + "/v1", GatewayConfig())
        try:
            async with serve_in_process(gateway.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
                with pytest.raises(UpstreamError, match=match):
                    async for _ in llm.stream("m", USER, None):
                        pass
            assert gateway.stats()["upstream_errors"] == 1 and gateway.stats()["open_responses"] == 0
        finally:
            await gateway.aclose()


async def test_non_streaming_requests_and_models_are_proxied() -> None:
    async with stack() as (_, _, url):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as raw:
            completion = await raw.chat.completions.create(
                model="main", messages=USER, tools=list(TOOLS),  # type: ignore[arg-type]
                extra_body={"metadata": {"trajectory_id": TRAJECTORY.id}})
            models = await raw.models.list()
        assert completion.choices[0].finish_reason == "tool_calls"
        assert [m.id for m in models.data] == ["main", "speculator"]
        async with httpx2.AsyncClient() as client:
            health = (await client.get(url + "/health")).json()
            bad = await client.post(url + "/v1/chat/completions", content=b"[1, 2]")
        assert health["status"] == "ok" and bad.status_code == 400


def test_config_rejects_impossible_values() -> None:
    with pytest.raises(ValueError):
        GatewayConfig(post_wait_s=-1)
    with pytest.raises(ValueError):
        CacheLimits(default_keep_alive_s=10, max_keep_alive_s=5)
    with pytest.raises(ValueError):
        CacheLimits(max_body_bytes=0)
