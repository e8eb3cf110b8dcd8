"""Gateway operations and hardening over real loopback HTTP.

Deep or huge JSON answers 400/413 (never a 500), a body that never finishes answers 408, a connection
that never finishes its headers is closed, connections past the bound get 503, /metrics speaks the
Prometheus text format, a policy keeps denied tools out of the cache, the Responses API is proxied (and a
runaway upstream line ends its stream with an error event), and a dead upstream is refused at start.
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
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from forethought import Policy, ToolPolicy
from forethought.errors import UpstreamError
from forethought.gateway.app import Gateway, GatewayConfig, json_depth, probe_upstream
from forethought.llm.tool_cache import TOKEN_HEADER
from forethought.serve.http import ServerLimits, serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = parse_script({"ttft_s": 0.0, "chunk_s": 0.0, "responses": [
    {"text": "Checking.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}}]}, {"text": "24 C."}]})
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "secret", "parameters": {"type": "object", "properties": {}}}}]


@contextlib.asynccontextmanager
async def _gateway(config: GatewayConfig | None = None, limits: ServerLimits | None = None,
                   upstream_app: Any = None) -> AsyncIterator[tuple[str, Gateway]]:
    async with serve_in_process(upstream_app or create_scripted_server(SCRIPT)) as upstream:
        gateway = Gateway(upstream + "/v1", config or GatewayConfig())
        try:
            async with serve_in_process(gateway.app, limits=limits) as url:
                yield url, gateway
        finally:
            await gateway.aclose()


def _nested(depth: int) -> bytes:
    return b'{"a": ' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", [65, 5000, 200_000])
async def test_deep_json_answers_400_on_both_endpoints(depth: int) -> None:
    async with _gateway() as (url, gateway), httpx2.AsyncClient(base_url=url) as http:
        reply = await http.post("/v1/chat/completions", content=_nested(depth))
        assert reply.status_code == 400 and "nests deeper" in reply.json()["error"]["message"]
        reply = await http.post("/v1/responses", content=_nested(depth))
        assert reply.status_code == 400
        opened = await http.post("/v1/chat/completions", json={"model": "m", "stream": True, "tools": TOOLS,
                                                               "messages": [{"role": "user", "content": "x"}]})
        response_id = opened.headers["x-forethought-response-id"]
        reply = await http.post(f"/cache-tool-output/{response_id}", content=b"[" + _nested(depth) + b"]",
                                headers={TOKEN_HEADER: opened.headers[TOKEN_HEADER]})
        assert reply.status_code in (400, 410)  # 410 when the short response has already finished
        assert (await http.get("/health")).status_code == 200
        assert gateway.stats()["open_responses"] == 0


async def test_shallow_json_is_accepted_and_size_is_capped() -> None:
    config = GatewayConfig(max_request_bytes=4096)
    async with _gateway(config) as (url, _), httpx2.AsyncClient(base_url=url) as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
        huge = {**body, "pad": "x" * 10_000}
        reply = await http.post("/v1/chat/completions", json=huge)
        assert reply.status_code == 413


@given(st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=2), inner, max_size=3), max_leaves=20))
def test_json_depth_counts_nesting(value: Any) -> None:
    def depth(v: Any) -> int:
        children = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max((depth(c) for c in children), default=0)

    assert json_depth(value) == depth(value)


async def _raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def test_a_body_that_never_finishes_answers_408() -> None:
    async with _gateway(GatewayConfig(body_timeout_s=0.2)) as (url, _):
        reader, writer = await _raw(url)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"model\":")
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 10)
        assert b" 408 " in head
        writer.close()


async def test_unfinished_headers_are_disconnected_and_others_still_served() -> None:
    async with _gateway(limits=ServerLimits(header_timeout_s=0.2)) as (url, _):
        idle = [await _raw(url) for _ in range(5)]
        for _, writer in idle[:3]:
            writer.write(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # headers never finished
            await writer.drain()
        for reader, _ in idle:
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
        async with httpx2.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).status_code == 200


async def test_connections_past_the_bound_get_503() -> None:
    async with _gateway(limits=ServerLimits(limit_concurrency=3)) as (url, _):
        held = [await _raw(url) for _ in range(3)]
        await asyncio.sleep(0.05)
        async with httpx2.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).status_code == 503
        for _, writer in held:
            writer.close()


async def test_metrics_speak_prometheus_text() -> None:
    async with _gateway() as (url, _), httpx2.AsyncClient(base_url=url) as http:
        await http.post("/cache-tool-output/ftg-nope", json=[])
        reply = await http.get("/metrics")
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
        text = reply.text
        assert "# TYPE forethought_gateway_posts_total counter" in text
        assert 'forethought_gateway_posts_rejected_total{status="404"} 1.0' in text
        assert "forethought_gateway_open_responses 0.0" in text


async def test_the_policy_keeps_denied_tools_out_of_the_cache() -> None:
    policy = Policy(tools={"secret": ToolPolicy(private=True), "lookup": ToolPolicy(speculate=False)})
    slow = parse_script({"ttft_s": 2.0, "responses": [{"text": "x"}]})
    body = {"model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "x"}]}
    async with (_gateway(GatewayConfig(policy=policy), upstream_app=create_scripted_server(slow)) as (url, gateway),
                httpx2.AsyncClient(base_url=url, timeout=10) as http,
                http.stream("POST", "/v1/chat/completions", json=body) as opened):
        response_id = opened.headers["x-forethought-response-id"]
        token = {TOKEN_HEADER: opened.headers[TOKEN_HEADER]}
        for name, reason in (("secret", "private"), ("lookup", "speculate = false")):
            reply = await http.post(f"/cache-tool-output/{response_id}", headers=token,
                                    json=[{"name": name, "output": "x"}])
            assert reply.status_code == 403 and reason in reply.json()["error"]["message"]
        assert gateway.cache.entries_cached == 0


async def test_the_responses_api_is_proxied_streamed_and_whole() -> None:
    async with _gateway() as (url, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        kinds = [event.type async for event in await client.responses.create(model="m", input="x", stream=True)]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in kinds
        whole = await client.responses.create(model="m", input="x")
        assert [item.type for item in whole.output] == ["message", "function_call"]
        await client.close()


async def test_a_runaway_upstream_line_ends_the_stream_with_an_error_event() -> None:
    async def endless(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b'event: response.created\ndata: {"type": "response.created", "response": {"id": "r"}}\n\n'
            for _ in range(64):
                yield b"x" * 4096  # never a newline
        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/responses", endless, methods=["POST"])])
    async with _gateway(GatewayConfig(max_line_bytes=64 * 1024), upstream_app=upstream) as (url, _):
        async with httpx2.AsyncClient(base_url=url) as http:
            reply = await http.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
        events = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "error" and events[-1]["code"] == "upstream_line_too_long"
        assert len(reply.content) < 128 * 1024


def test_a_dead_or_malformed_upstream_is_refused_at_start() -> None:
    with pytest.raises(UpstreamError, match="not an http"):
        probe_upstream("localhost:9999")
    with pytest.raises(UpstreamError, match="does not answer"):
        probe_upstream("http://127.0.0.1:9/v1", timeout_s=2.0)


async def test_a_runaway_chat_line_ends_the_relayed_stream_with_an_error_chunk() -> None:
    async def endless(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
            for _ in range(64):
                yield b"data: " + b"x" * 4096  # never a newline
        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/chat/completions", endless, methods=["POST"])])
    async with _gateway(GatewayConfig(max_line_bytes=64 * 1024), upstream_app=upstream) as (url, gateway):
        async with httpx2.AsyncClient(base_url=url) as http:
            reply = await http.post("/v1/chat/completions", json={"model": "m", "stream": True, "messages": []})
        chunks = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
        assert chunks[0]["choices"][0]["delta"]["content"] == "hi"
        assert "longer than 65536 bytes" in chunks[-1]["error"]["message"]
        assert len(reply.content) < 128 * 1024
        assert gateway.stats()["upstream_errors"] == 1 and gateway.stats()["open_responses"] == 0
