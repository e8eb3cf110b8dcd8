"""The daemon's model path: what the client receives is exactly what the upstream sent.

Real servers on loopback: the scripted model (Chat Completions, Responses, Anthropic Messages) behind a
recorder, the daemon, and clients on ``httpx2`` and on the real SDKs. Every body is compared byte for byte
with what the upstream sent, request headers (credentials, ``anthropic-beta`` / ``anthropic-version``) with
what the upstream received; errors, drops and malformed streams arrive as the upstream gave them, and the
daemon goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forethought.bench.loop.recording import RecordingApp, RecordingTransport
from forethought.daemon import Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.serve.http import EventStream, StreamCut, serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = parse_script({"ttft_s": 0.0, "chunk_s": 0.0, "fragment_chars": 5, "loop": True, "responses": [
    {"text": "Looking.", "calls": [{"name": "mcp__notes__read_note", "arguments": {"path": "a.md"}},
                                   {"name": "Bash", "arguments": {"command": "ls"}}]},
    {"text": "Done. ✓ — naïve ünïcode"}]})
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
MESSAGES = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
PATHS = {"chat": ("/openai/v1/chat/completions", CHAT), "responses": ("/openai/v1/responses", RESPONSES),
         "messages": ("/anthropic/v1/messages", MESSAGES)}


@contextlib.asynccontextmanager
async def stack(upstream: Any = None) -> AsyncIterator[tuple[RecordingApp, Daemon]]:
    recorder = RecordingApp(upstream if upstream is not None else create_scripted_server(SCRIPT))
    async with serve_in_process(recorder) as up, serve_daemon(DaemonConfig(Upstreams(up, up))) as daemon:
        yield recorder, daemon


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", sorted(PATHS))
async def test_every_body_arrives_byte_for_byte(api: str, stream: bool) -> None:
    path, body = PATHS[api]
    async with stack() as (recorder, daemon), httpx2.AsyncClient() as client:
        response = await client.post(daemon.url + path, json={**body, "stream": stream})
        sent = recorder.exchanges[-1]
        assert response.status_code == sent.status == 200
        assert response.content == sent.sent and sent.complete
        assert response.headers["content-type"].startswith("text/event-stream" if stream else "application/json")
        assert daemon.relay.counts.observed == 1  # the daemon read it beside the relay


async def test_the_sdks_see_the_upstreams_events_unchanged() -> None:
    async with stack() as (recorder, daemon):
        transports = [RecordingTransport() for _ in range(3)]
        a = anthropic.AsyncAnthropic(base_url=daemon.url + "/anthropic", api_key="k", max_retries=0,
                                     http_client=httpx2.AsyncClient(transport=transports[0]))
        o = openai.AsyncOpenAI(base_url=daemon.url + "/openai/v1", api_key="k", max_retries=0,
                               http_client=httpx2.AsyncClient(transport=transports[1]))
        c = openai.AsyncOpenAI(base_url=daemon.url + "/v1", api_key="k", max_retries=0,
                               http_client=httpx2.AsyncClient(transport=transports[2]))
        events = [e.type async for e in await a.messages.create(model="m", max_tokens=64, stream=True,
                                                                messages=[{"role": "user", "content": "hi"}])]
        kinds = [e.type async for e in await o.responses.create(model="m", input="hi", stream=True)]
        chunks = [c async for c in await c.chat.completions.create(model="m", stream=True,
                                                                   messages=[{"role": "user", "content": "hi"}])]
        assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_delta" in events
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        received = [b"".join(chunks) for t in transports for chunks in t.received]
        assert received == [e.sent for e in recorder.exchanges] and len(received) == 3
        for sdk in (a, o, c):
            await sdk.close()


async def test_credentials_and_anthropic_headers_reach_the_upstream_with_the_query() -> None:
    async with stack() as (recorder, daemon), httpx2.AsyncClient() as client:
        headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01",
                   "anthropic-beta": "interleaved-thinking-2025-05-14", "authorization": "Bearer tok"}
        await client.post(daemon.url + "/anthropic/v1/messages?beta=true", json=MESSAGES, headers=headers)
        seen = recorder.exchanges[-1]
        assert seen.path == "/v1/messages" and seen.query == "beta=true"
        for name, value in headers.items():
            assert seen.headers[name] == value
        assert seen.headers["accept-encoding"] == "identity" and json.loads(seen.body) == MESSAGES


async def test_count_tokens_and_other_paths_pass_through() -> None:
    async def count(request: Request) -> Response:
        body = await request.json()
        return Response(json.dumps({"input_tokens": len(json.dumps(body))}), media_type="application/json",
                        headers={"request-id": "req_1"})

    async def models(request: Request) -> Response:
        return Response(b'{"data":[]}', media_type="application/json")

    app = Starlette(routes=[Route("/v1/messages/count_tokens", count, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"])])
    async with stack(app) as (recorder, daemon), httpx2.AsyncClient() as client:
        counted = await client.post(daemon.url + "/v1/messages/count_tokens", json=MESSAGES,
                                    headers={"anthropic-version": "2023-06-01"})
        assert counted.status_code == 200 and counted.content == recorder.exchanges[-1].sent
        assert counted.headers["request-id"] == "req_1"
        assert recorder.exchanges[-1].headers["anthropic-version"] == "2023-06-01"
        listed = await client.get(daemon.url + "/openai/v1/models")
        assert listed.content == b'{"data":[]}'
        unknown = await client.get(daemon.url + "/v1/unknown")
        assert unknown.status_code == 404 and "/anthropic/v1/unknown" in unknown.json()["error"]["message"]


def _faulty(status: int, body: list[bytes | StreamCut], media: str = "text/event-stream",
            headers: dict[str, str] | None = None) -> Starlette:
    async def endpoint(request: Request) -> Response:
        await request.body()
        if status != 200:
            return Response(b"".join(b for b in body if isinstance(b, bytes)), status_code=status,
                            media_type="application/json", headers=headers)

        async def chunks() -> AsyncIterator[bytes | StreamCut]:
            for piece in body:
                yield piece
                await asyncio.sleep(0)

        stream = EventStream(chunks())
        stream.media_type = media
        return stream

    return Starlette(routes=[Route(p, endpoint, methods=["POST"])
                             for p in ("/v1/chat/completions", "/v1/responses", "/v1/messages")])


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("status", [400, 401, 429, 500, 529])
async def test_an_error_status_arrives_as_the_upstream_sent_it(api: str, status: int) -> None:
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "later"}}).encode()
    path, body = PATHS[api]
    async with stack(_faulty(status, [error], headers={"retry-after": "7", "x-request-id": "abc"})) as (_, daemon):
        async with httpx2.AsyncClient() as client:
            response = await client.post(daemon.url + path, json={**body, "stream": True})
        assert response.status_code == status and response.content == error
        assert response.headers["retry-after"] == "7" and response.headers["x-request-id"] == "abc"
        assert daemon.relay.counts.upstream_errors == 1


MALFORMED = [b"data: {not json\n\n", b"data: [1, 2]\n\n", b"event: error\ndata: {\"type\": \"error\", \"error\": "
             b"{\"message\": \"boom\"}}\n\n", b"\xff\xfe garbage without line ends", b"data: " + b"x" * 5000 + b"\n\n"]


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("garbage", MALFORMED)
async def test_a_malformed_stream_arrives_unchanged_and_the_daemon_assumes_anything(api: str, garbage: bytes) -> None:
    path, body = PATHS[api]
    async with stack(_faulty(200, [garbage])) as (recorder, daemon), httpx2.AsyncClient() as client:
        response = await client.post(daemon.url + path, json={**body, "stream": True})
        assert response.status_code == 200 and response.content == garbage == recorder.exchanges[-1].sent
        conversation = next(iter(daemon.conversations))
        for _ in range(100):  # the observer reads beside the relay: give it its turn
            if daemon.relay.counts.unreadable:
                break
            await asyncio.sleep(0.01)
        assert daemon.relay.counts.unreadable == 1 and conversation.unseen  # no read guessed now is served
        again = await client.post(daemon.url + path, json={**body, "stream": True})  # and it goes on serving
        assert again.content == garbage


@pytest.mark.parametrize("api", sorted(PATHS))
async def test_a_dropped_upstream_drops_the_client_after_the_same_bytes(api: str) -> None:
    head = b'data: {"type": "ping"}\n\n'
    path, body = PATHS[api]
    async with stack(_faulty(200, [head, StreamCut.DROP])) as (_, daemon), httpx2.AsyncClient() as client:
        got: list[bytes] = []
        with pytest.raises(httpx2.HTTPError):
            async with client.stream("POST", daemon.url + path, json={**body, "stream": True}) as response:
                async for chunk in response.aiter_raw():
                    got.append(chunk)
        assert b"".join(got) == head
        conversation = next(iter(daemon.conversations))
        for _ in range(100):
            if conversation.unseen:
                break
            await asyncio.sleep(0.01)
        assert conversation.unseen  # a message cut off may have held any call
        healthy = await client.get(daemon.url + "/health")
        assert healthy.status_code == 200


async def test_an_unreachable_upstream_is_a_clear_502_and_nothing_else_changes() -> None:
    async with serve_daemon(DaemonConfig(Upstreams("http://127.0.0.1:9", "http://127.0.0.1:9"))) as daemon:
        async with httpx2.AsyncClient() as client:
            response = await client.post(daemon.url + "/anthropic/v1/messages", json=MESSAGES)
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_unreachable"
        assert "anthropic upstream" in response.json()["error"]["message"]


async def test_a_body_over_the_limit_is_refused_and_never_sent() -> None:
    recorder = RecordingApp(create_scripted_server(SCRIPT))
    async with serve_in_process(recorder) as up:
        daemon = Daemon(DaemonConfig(Upstreams(up, up)))
        daemon.relay._max = 1000
        try:
            async with serve_in_process(daemon.app) as url, httpx2.AsyncClient() as client:
                response = await client.post(url + "/openai/v1/chat/completions",
                                             json={**CHAT, "padding": "x" * 2000})
                assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
                assert recorder.exchanges == []
        finally:
            await daemon.aclose()


@st.composite
def bodies(draw: st.DrawFn) -> list[bytes]:
    pieces = draw(st.lists(st.one_of(
        st.sampled_from([b"data: {}\n\n", b"data: [DONE]\n\n", b": ping\n\n", b"\r\n", b"event: x\n", b"data:",
                         b'data: {"type": "message_stop"}\n\n', b'data: {"choices": [{"delta": {}}]}\n\n']),
        st.binary(max_size=40)), max_size=12))
    return [p for p in pieces if p]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=bodies(), api=st.sampled_from(sorted(PATHS)))
def test_any_upstream_body_passes_through_unchanged(chunks: list[bytes], api: str) -> None:
    """Whatever an upstream streams, in whatever pieces, reaches the client byte for byte (in process)."""

    async def run() -> None:
        upstream = _faulty(200, list(chunks))
        daemon = Daemon(DaemonConfig(Upstreams("http://up", "http://up")),
                        http=httpx2.AsyncClient(transport=httpx2.ASGITransport(upstream)))
        try:
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(daemon.app)) as client:
                path, body = PATHS[api]
                response = await client.post("http://daemon" + path, json={**body, "stream": True})
                assert response.status_code == 200 and response.content == b"".join(chunks)
        finally:
            await daemon.aclose()

    asyncio.run(run())


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


_START = _event({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                      "content": [], "model": "m", "stop_reason": None,
                                                      "usage": {"input_tokens": 1, "output_tokens": 0}}})
_BASH = _event({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}})
_TEXT = _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})


@pytest.mark.parametrize(("head", "holds"), [(_TEXT, False), (_BASH, True)], ids=["text", "write-started"])
async def test_a_client_that_leaves_mid_message_holds_a_write_only_for_a_call_it_received(head: bytes,
                                                                                       holds: bool) -> None:
    """A client that leaves got only what the daemon read (each chunk is queued before it is sent): a message
    cut off there holds a write only if a call the daemon cannot see had begun, not for the rest it never got."""
    never = asyncio.Event()

    async def endpoint(request: Request) -> Response:
        await request.body()

        async def chunks() -> AsyncIterator[bytes | StreamCut]:
            yield _START + head
            await never.wait()  # the rest never comes: the client leaves first
            yield b""

        return EventStream(chunks())

    upstream = Starlette(routes=[Route("/v1/messages", endpoint, methods=["POST"])])
    path, body = PATHS["messages"]
    async with stack(upstream) as (_, daemon), httpx2.AsyncClient() as client:
        async with client.stream("POST", daemon.url + path, json={**body, "stream": True}) as response:
            async for chunk in response.aiter_raw():
                if chunk:
                    break  # the user interrupts: the client closes the response
        for _ in range(300):
            if daemon.relay.counts.left:
                break
            await asyncio.sleep(0.01)
        conversation = next(iter(daemon.conversations))
        assert daemon.relay.counts.left == 1 and daemon.relay.counts.unreadable == 0
        assert conversation.unseen is holds
        healthy = await client.get(daemon.url + "/health")
        assert healthy.status_code == 200
