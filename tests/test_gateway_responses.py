"""The Responses API through the gateway with the engine-side cache, driven by the real ``openai`` SDK.

The scripted engine speaks the Responses wire format; a user's own loop streams
``AsyncOpenAI().responses.create(stream=True)`` through the gateway, posts its guesses to the response's
cache path, appends each ``response.output_item.done`` item and each served
``response.forethought_tool_result`` item to its input, and runs a tool itself only when the stream ends
with calls nobody served. Whatever was served, the transcript and every request the engine saw equal
those of the same loop talking to the engine directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urljoin

import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import redis_fixture
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.gateway.responses import RESULT_EVENT
from forethought.llm.tool_cache import (
    CACHE_CLIENT_HEADER,
    CACHE_CLIENT_VALUE,
    CACHE_PATH_HEADER,
    CONTINUATION_METADATA,
    RESPONSE_ID_HEADER,
    TOKEN_HEADER,
    CachedOutput,
    CacheTarget,
    HttpToolCachePoster,
)
from forethought.serve.http import EventStream, serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.0, "fragment_chars": 8, "responses": [
    {"text": "Let me look.", "calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
    {"calls": [{"name": "weather", "arguments": {"city": "Rome"}}, {"name": "clock", "arguments": {"tz": "CET"}}]},
    {"text": "Sunny in Paris, rain in Rome, and it is noon."},
]}
TOOLS = [{"type": "function", "name": "weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
         {"type": "function", "name": "clock", "parameters": {
             "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}]
INPUT = [{"role": "user", "content": "Weather in Paris and Rome, and the time?"}]
POST_WAIT_S = 0.5
redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures (replicas)


def run_tool(name: str, arguments: Mapping[str, Any]) -> str:
    """The user's own tool (deterministic)."""
    return json.dumps({"tool": name, **arguments, "answer": len(json.dumps(dict(arguments)))}, sort_keys=True)


def guesses(turn: int) -> list[CachedOutput]:
    """What a speculator posts for a model turn: the right outputs for the calls that turn will make."""
    return [CachedOutput(c["name"], run_tool(c["name"], c["arguments"]), c["arguments"])
            for c in SCRIPT["responses"][turn].get("calls", [])]  # type: ignore[index]


class Recorder:
    """ASGI middleware keeping the JSON body of every request to ``/v1/responses``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/responses":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        while not messages or messages[-1].get("more_body"):
            messages.append(await receive())
        self.bodies.append(json.loads(b"".join(m.get("body", b"") for m in messages)))
        replay = iter(messages)

        async def again() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, again, send)


@contextlib.asynccontextmanager
async def engine() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder(create_scripted_server(parse_script(SCRIPT)))
    async with serve_in_process(recorder) as url:
        yield recorder, url + "/v1"


async def converse(base_url: str, post: Sequence[int] = (),
                   post_to: Callable[[CacheTarget], CacheTarget] = lambda t: t) -> tuple[list[Any], int, list[str]]:
    """The user's loop; posts right guesses for the model turns in ``post`` (to ``post_to(target)``).

    Returns the transcript (input items, in order), the HTTP requests it made, and the event types seen.
    """
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    poster = HttpToolCachePoster()
    transcript: list[Any] = list(INPUT)
    turn, requests, kinds = 0, 0, []
    try:
        while True:
            announce = {CACHE_CLIENT_HEADER: CACHE_CLIENT_VALUE} if turn in post else {}  # it will post
            raw = await client.responses.with_raw_response.create(model="m", input=transcript, tools=TOOLS,
                                                                  stream=True, extra_headers=announce)
            requests += 1
            target = None
            if RESPONSE_ID_HEADER in raw.headers:
                target = post_to(CacheTarget(urljoin(base_url, raw.headers[CACHE_PATH_HEADER]),
                                             raw.headers[RESPONSE_ID_HEADER], raw.headers[TOKEN_HEADER]))
                if turn in post:
                    await poster.post(target, guesses(turn))
            calls: list[dict[str, Any]] = []
            results = 0
            async for event in raw.parse():
                kinds.append(event.type)
                if event.type == "response.output_item.done":
                    item = event.item.to_dict()
                    transcript.append(item)
                    calls += [item] if item["type"] == "function_call" else []
                elif event.type == RESULT_EVENT:
                    transcript.append(dict(event.item))  # type: ignore[attr-defined]
                    results += 1
                    if results == len(calls):  # the gateway continues with the next model turn
                        turn, calls, results = turn + 1, [], 0
                        if target is not None and turn in post:
                            await poster.post(target.next_segment(event.segment), guesses(turn))  # type: ignore[attr-defined]
            if not calls:
                return transcript, requests, kinds
            transcript += [{"type": "function_call_output", "call_id": c["call_id"],
                            "output": run_tool(c["name"], json.loads(c["arguments"]))} for c in calls]
            turn += 1
    finally:
        await poster.aclose()
        await client.close()


def engine_inputs(recorder: Recorder) -> list[Any]:
    """What the engine was asked, request by request (the gateway's continuation mark set aside)."""
    marks = [(b.get("metadata") or {}).get(CONTINUATION_METADATA) for b in recorder.bodies]
    assert all(m in (None, "true") for m in marks)
    return [b["input"] for b in recorder.bodies]


async def test_served_results_continue_the_response_and_the_transcript_equals_the_plain_loop() -> None:
    async with engine() as (plain_engine, plain_url):
        plain, plain_requests, _ = await converse(plain_url)
    for post, client_requests, continuations, served in (((0, 1), 1, 2, 3), ((0,), 2, 1, 1), ((1,), 2, 1, 2),
                                                         ((), 3, 0, 0)):
        async with engine() as (recorder, upstream):
            gateway = Gateway(upstream, GatewayConfig(post_wait_s=POST_WAIT_S))
            async with serve_in_process(gateway.app) as url:
                transcript, requests, kinds = await converse(url + "/v1", post)
            stats = gateway.stats()
            await gateway.aclose()
        assert transcript == plain, post
        assert engine_inputs(recorder) == engine_inputs(plain_engine), post  # the engine saw the same requests
        assert requests == client_requests and stats["continuations"] == continuations, post
        assert kinds.count(RESULT_EVENT) == stats["served_calls"] == served, post
        assert kinds.count("response.created") == requests and kinds.count("response.completed") == requests
    assert plain_requests == 3


async def test_a_wrong_guess_is_never_served_and_the_stream_ends_with_the_calls() -> None:
    async with engine() as (_, upstream):
        gateway = Gateway(upstream, GatewayConfig(post_wait_s=POST_WAIT_S))
        async with serve_in_process(gateway.app) as url:
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                                        default_headers={CACHE_CLIENT_HEADER: CACHE_CLIENT_VALUE})
            raw = await client.responses.with_raw_response.create(model="m", input=INPUT, tools=TOOLS, stream=True)
            target = CacheTarget(urljoin(url, raw.headers[CACHE_PATH_HEADER]), raw.headers[RESPONSE_ID_HEADER],
                                 raw.headers[TOKEN_HEADER])
            poster = HttpToolCachePoster()
            assert await poster.post(target, [CachedOutput("weather", "cloudy", {"city": "Lyon"})]) == 1
            events = [event async for event in raw.parse()]
            await poster.aclose()
            await client.close()
        stats = gateway.stats()
        await gateway.aclose()
    assert RESULT_EVENT not in [e.type for e in events]
    final = events[-1]
    assert final.type == "response.completed"
    assert [item.type for item in final.response.output] == ["message", "function_call"]  # type: ignore[union-attr]
    assert stats["continuations"] == 0 and stats["tool_call_endings"] == 1 and stats["open_responses"] == 0
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))


async def test_a_refused_continuation_a_failed_and_a_cut_response_end_the_stream_clearly() -> None:
    posted = asyncio.Event()

    async def responses(request: Request) -> Response:
        body = await request.json()
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in body["input"]):
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=500)
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
                "arguments": '{"city": "Paris"}', "status": "completed"}
        failed = body.get("metadata", {}).get("fail") == "yes"
        status = "incomplete" if body.get("metadata", {}).get("cut") == "yes" else "completed"

        async def events() -> AsyncIterator[bytes]:
            def event(kind: str, **fields: Any) -> bytes:
                return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()

            response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
            yield event("response.created", sequence_number=1, response=response)
            if failed:
                yield event("response.failed", sequence_number=2, response={**response, "status": "failed"})
                return
            yield event("response.output_item.done", sequence_number=2, output_index=0, item=call)
            if status != "completed":
                await posted.wait()  # the matching result is in the cache before the response ends
            yield event("response.completed", sequence_number=3,  # output left out: the items above count
                        response={**response, "status": status, "output": [] if status == "completed" else [call]})

        return EventStream(events())

    upstream = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    async with serve_in_process(upstream) as engine_url:
        gateway = Gateway(engine_url + "/v1", GatewayConfig(post_wait_s=POST_WAIT_S))
        async with serve_in_process(gateway.app) as url:
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0,
                                        default_headers={CACHE_CLIENT_HEADER: CACHE_CLIENT_VALUE})
            raw = await client.responses.with_raw_response.create(model="m", input="hi", tools=TOOLS, stream=True)
            target = CacheTarget(urljoin(url, raw.headers[CACHE_PATH_HEADER]), raw.headers[RESPONSE_ID_HEADER],
                                 raw.headers[TOKEN_HEADER])
            poster = HttpToolCachePoster()
            await poster.post(target, [CachedOutput("weather", "sunny", {"city": "Paris"})])
            await poster.aclose()
            seen = []
            try:
                async for event in raw.parse():
                    seen.append(event.type)
            except openai.APIError as exc:
                assert "continuation was refused" in str(exc)
            else:
                raise AssertionError("the refused continuation did not surface")
            assert seen == ["response.created", "response.output_item.done", RESULT_EVENT]
            failed = [e.type async for e in await client.responses.create(
                model="m", input="hi", tools=TOOLS, stream=True, metadata={"fail": "yes"})]
            assert failed == ["response.created", "response.failed"]
            raw = await client.responses.with_raw_response.create(model="m", input="hi", tools=TOOLS, stream=True,
                                                                  metadata={"cut": "yes"})
            target = CacheTarget(urljoin(url, raw.headers[CACHE_PATH_HEADER]), raw.headers[RESPONSE_ID_HEADER],
                                 raw.headers[TOKEN_HEADER])
            poster = HttpToolCachePoster()
            await poster.post(target, [CachedOutput("weather", "sunny", {"city": "Paris"})])
            await poster.aclose()
            posted.set()
            cut = [e async for e in raw.parse()]  # cut at its token limit (vLLM's "completed" + "incomplete")
            assert [e.type for e in cut] == ["response.created", "response.output_item.done", "response.completed"]
            assert cut[-1].response.status == "incomplete"  # type: ignore[union-attr]  # passed on, never continued
            await client.close()
        stats = gateway.stats()
        await gateway.aclose()
    assert stats["upstream_errors"] == 1 and stats["open_responses"] == 0


async def test_through_two_replicas_results_posted_to_one_continue_the_response_the_other_relays(
        redis_url: str) -> None:
    from test_gateway_replicas import replicas, via

    async with engine() as (plain_engine, plain_url):
        plain, _, _ = await converse(plain_url)
    async with engine() as (recorder, upstream), \
            replicas(upstream, redis_url, post_wait_s=POST_WAIT_S) as (gateways, urls):
        transcript, requests, _ = await converse(urls[0] + "/v1", (0, 1), lambda t: via(t, urls[0], urls[1]))
        stats = [g.stats() for g in gateways]
    assert transcript == plain and engine_inputs(recorder) == engine_inputs(plain_engine)
    assert requests == 1 and stats[0]["continuations"] == 2 and stats[1]["posts"] == 2 and stats[0]["posts"] == 0
