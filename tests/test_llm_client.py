"""The OpenAI-compatible client over real loopback HTTP against the simulated engine, and its assembler."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from forethought import ToolCall
from forethought.bench.engine_sim.model_server import ModelServer, SpeculatorConfig, TimingConfig
from forethought.errors import StreamDroppedError, UpstreamError
from forethought.llm.chat import OpenAIChatClient, ToolCallAssembler
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
)
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = (
    {"type": "function", "function": {"name": "ls", "parameters": {
        "type": "object", "properties": {"folder": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "cat", "parameters": {
        "type": "object", "properties": {"file": {"type": "string"}, "lines": {"type": "integer"}},
        "required": ["file"]}}},
)
PARALLEL = (ToolCall("ls", {"folder": "docs/{weird}"}), ToolCall("cat", {"file": 'a "quoted" }name', "lines": 30}))
TRAJECTORY = Trajectory("t-client", (Turn("look", (PARALLEL,), "Here it is."),), TOOLS)
USER = [{"role": "user", "content": "look"}]
FAST = TimingConfig(ttft_s=0.0, decode_tokens_per_s=1000.0, reasoning_tokens=4, fragment_tokens=1, time_scale=0.0)


@pytest.fixture
async def client() -> AsyncIterator[OpenAIChatClient]:
    server = ModelServer([TRAJECTORY], FAST, SpeculatorConfig(timing=FAST))
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        yield llm


async def collect(llm: OpenAIChatClient, messages: list[dict[str, Any]] = USER, **metadata: str) -> list[LLMEvent]:
    return [e async for e in llm.stream("main", messages, list(TOOLS),
                                        metadata={"trajectory_id": TRAJECTORY.id, **metadata})]


def position(events: list[LLMEvent], wanted: type, index: int | None = None) -> int:
    for i, event in enumerate(events):
        if isinstance(event, wanted) and (index is None or getattr(event, "index", None) == index):
            return i
    raise AssertionError(f"no {wanted.__name__} for index {index}")


async def test_parallel_calls_close_one_by_one_mid_stream(client: OpenAIChatClient) -> None:
    events = await collect(client)
    closed = [e for e in events if isinstance(e, ToolCallClosed)]
    assert [(c.name, c.arguments) for c in closed] == [(c.name, dict(c.arguments)) for c in PARALLEL]
    assert all(c.ok for c in closed)
    # index 0 is closed (and could be dispatched) before any argument text of index 1 has been looked at
    assert position(events, ToolCallClosed, 0) < position(events, ToolCallStarted, 1)
    assert position(events, ToolCallClosed, 0) < position(events, ToolCallArgumentsDelta, 1)
    assert position(events, ToolCallClosed, 1) < position(events, MessageDone)
    assert isinstance(events[0], TextDelta)
    done = events[-1]
    assert isinstance(done, MessageDone) and done.finish_reason == "tool_calls"
    assert done.usage is not None and done.usage.completion_tokens > 0 and done.response_id
    deltas = "".join(e.text for e in events if isinstance(e, ToolCallArgumentsDelta) and e.index == 1)
    assert deltas == closed[1].raw


async def test_started_ids_match_closed_ids(client: OpenAIChatClient) -> None:
    events = await collect(client)
    started = {e.index: e.id for e in events if isinstance(e, ToolCallStarted)}
    closed = {e.index: e.id for e in events if isinstance(e, ToolCallClosed)}
    assert started == closed and len(set(started.values())) == 2


async def test_final_answer_is_text_with_stop(client: OpenAIChatClient) -> None:
    messages: list[dict[str, Any]] = [*USER, {"role": "assistant", "content": "", "tool_calls": []}]
    events = await collect(client, messages)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Here it is."
    assert isinstance(events[-1], MessageDone) and events[-1].finish_reason == "stop"


async def test_malformed_arguments_give_an_error_for_that_call_only(client: OpenAIChatClient) -> None:
    events = await collect(client, fault="malformed_arguments")
    first, second = (e for e in events if isinstance(e, ToolCallClosed))
    assert first.arguments is None and first.error is not None and "ls" in first.error
    assert first.raw.endswith(",}")
    assert second.ok and second.arguments == dict(PARALLEL[1].arguments)
    # the malformed call is reported when it closes, not at message end
    assert position(events, ToolCallClosed, 0) < position(events, ToolCallStarted, 1)


async def test_truncated_arguments_are_reported_at_message_end(client: OpenAIChatClient) -> None:
    events = await collect(client, fault="truncated_arguments", fault_call="1")
    first, second = sorted((e for e in events if isinstance(e, ToolCallClosed)), key=lambda e: e.index)
    assert first.ok
    assert second.arguments is None and second.error is not None
    assert "cat" in second.error and "cut off" in second.error
    assert position(events, ToolCallClosed, 1) == len(events) - 2  # just before MessageDone


@pytest.mark.parametrize("fault", ["drop_stream", "stream_ends_early"])
async def test_a_broken_stream_raises_stream_dropped(client: OpenAIChatClient, fault: str) -> None:
    seen: list[LLMEvent] = []
    with pytest.raises(StreamDroppedError):
        async for event in client.stream("main", USER, list(TOOLS),
                                          metadata={"trajectory_id": TRAJECTORY.id, "fault": fault}):
            seen.append(event)
    assert any(isinstance(e, ToolCallStarted) for e in seen)
    assert not any(isinstance(e, MessageDone) for e in seen)


async def test_unknown_trajectory_is_an_upstream_error(client: OpenAIChatClient) -> None:
    with pytest.raises(UpstreamError, match=r"404.*unknown trajectory"):
        async for _ in client.stream("main", USER, None, metadata={"trajectory_id": "nope"}):
            pass


async def test_an_unreachable_endpoint_is_an_upstream_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with OpenAIChatClient(f"http://127.0.0.1:{port}/v1", max_retries=0) as llm:
        with pytest.raises(UpstreamError, match="cannot reach"):
            async for _ in llm.stream("main", USER, None):
                pass


async def test_usage_is_omitted_when_not_asked_for() -> None:
    server = ModelServer([TRAJECTORY], FAST)
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", include_usage=False) as llm:
        events = [e async for e in llm.stream("main", USER, list(TOOLS), metadata={"trajectory_id": TRAJECTORY.id})]
    done = events[-1]
    assert isinstance(done, MessageDone) and done.usage is None


# --- odd servers ---------------------------------------------------------------------------------


def sse_app(body: str) -> Starlette:
    async def completions(request: Request) -> Response:
        return Response(body, media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return ": keep-alive comment\nevent: message\ndata: " + json.dumps(data) + "\n\n"


@pytest.mark.parametrize(("body", "error", "match"), [
    ('data: {"error": {"message": "engine overloaded"}}\n\n', UpstreamError, "engine overloaded"),
    ("data: {not json\n\n", UpstreamError, "unparsable"),
    ('data: {"choices": [{"delta": {"tool_calls": [{"function": {}}]}}]}\n\n', UpstreamError, "unparsable"),
    (chunk({"content": "hi"}), StreamDroppedError, "without a finish reason"),
])
async def test_broken_servers_give_typed_errors(body: str, error: type[Exception], match: str) -> None:
    async with serve_in_process(sse_app(body)) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        with pytest.raises(error, match=match):
            async for _ in llm.stream("m", USER, None):
                pass


async def test_a_server_without_done_or_usage_still_completes() -> None:
    body = chunk({"role": "assistant", "content": "he"}) + chunk({"content": "llo"}) + chunk({}, "stop")
    async with serve_in_process(sse_app(body)) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        events = [e async for e in llm.stream("m", USER, None)]
    assert events == [TextDelta("he"), TextDelta("llo"), MessageDone("stop", None, "x")]


async def test_line_separators_inside_a_json_string_do_not_split_the_chunk() -> None:
    # JSON written with ensure_ascii=False (as the gateway writes) may hold U+2028 or U+0085 unescaped;
    # a text-level splitlines() would cut the chunk there and fail to parse it
    text = "a\u2028b\u2029c\x85d"
    data = {"id": "x", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    body = "data: " + json.dumps(data, ensure_ascii=False) + "\r\n\r\n" + chunk({}, "stop")
    async with serve_in_process(sse_app(body)) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        events = [e async for e in llm.stream("m", USER, None)]
    assert events == [TextDelta(text), MessageDone("stop", None, "x")]


@pytest.mark.parametrize("tail", ["", ": trailing comment\n\n"])
async def test_consecutive_streams_reuse_one_connection(tail: str) -> None:
    """What follows ``[DONE]`` is read, so the connection goes back to the pool: a speculator's samples do not
    each pay a new connection."""
    clients: list[tuple[str, int]] = []
    body = chunk({"content": "hi"}) + chunk({}, "stop") + "data: [DONE]\n\n" + tail
    inner = sse_app(body)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            clients.append(tuple(scope["client"]))
        await inner(scope, receive, send)

    async with serve_in_process(app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        for _ in range(4):
            events = [e async for e in llm.stream("m", USER, None)]
            assert events[-1] == MessageDone("stop", None, "x")
    assert len(clients) == 4 and len(set(clients)) == 1


async def test_a_server_that_keeps_the_body_open_after_done_is_left_at_once() -> None:
    """``[DONE]`` ends the message even when the server never ends its body (reading the rest is bounded)."""
    async def completions(request: Request) -> Any:
        async def forever() -> AsyncIterator[bytes]:
            yield (chunk({"content": "hi"}) + chunk({}, "stop") + "data: [DONE]\n\n").encode()
            while True:
                await asyncio.sleep(0.05)
                yield b": still here\n\n"

        return StreamingResponse(forever(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_in_process(app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        async with asyncio.timeout(10):
            events = [e async for e in llm.stream("m", USER, None)]
    assert events[-1] == MessageDone("stop", None, "x")


# --- the assembler alone (no I/O) ----------------------------------------------------------------


def test_assembler_arguments_in_the_first_delta_close_at_once() -> None:
    assembler = ToolCallAssembler()
    events = assembler.add_tool_delta(0, "c1", "ls", '{"folder": "x"}')
    assert events == [ToolCallStarted(0, "c1", "ls"), ToolCallArgumentsDelta(0, '{"folder": "x"}'),
                      ToolCallClosed(0, "c1", "ls", {"folder": "x"}, '{"folder": "x"}')]
    assert assembler.finish("tool_calls") == []


def test_assembler_text_before_the_name_is_replayed_after_start() -> None:
    assembler = ToolCallAssembler()
    assert assembler.add_tool_delta(0, None, None, '{"a"') == []
    events = assembler.add_tool_delta(0, None, "f", ": 1}")
    assert events == [ToolCallStarted(0, "call_0", "f"), ToolCallArgumentsDelta(0, '{"a"'),
                      ToolCallArgumentsDelta(0, ": 1}"), ToolCallClosed(0, "call_0", "f", {"a": 1}, '{"a": 1}')]


def test_assembler_empty_arguments_close_at_message_end_as_empty_object() -> None:
    assembler = ToolCallAssembler()
    assert assembler.add_tool_delta(0, "c", "pwd", "") == [ToolCallStarted(0, "c", "pwd")]
    assert assembler.finish("tool_calls") == [ToolCallClosed(0, "c", "pwd", {}, "")]


def test_assembler_closes_each_call_once_and_ignores_text_after_the_brace() -> None:
    assembler = ToolCallAssembler()
    assembler.add_tool_delta(0, "a", "f", "{}")
    assert assembler.add_tool_delta(0, None, None, "  ") == []
    assembler.add_tool_delta(1, "b", "g", '{"x": [')
    tail = assembler.finish("length")
    assert len(tail) == 1 and isinstance(tail[0], ToolCallClosed) and tail[0].index == 1
    assert tail[0].error is not None and "'length'" in tail[0].error
