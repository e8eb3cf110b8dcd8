"""The Responses API, Anthropic Messages and streamed Chat chunk decoders: the same events as the Chat client.

Fed plain event dicts (as the clients are) or the SDKs' objects (as the tap is): calls close the moment
their arguments do, malformed or cut-off arguments become a ``ToolCallClosed`` with ``error``, terminal
events give ``MessageDone`` with usage and the mapped finish reason, and error events raise
:class:`UpstreamError`. Streams that end early are a :class:`StreamDroppedError` in the clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from forethought.errors import StreamDroppedError, UpstreamError
from forethought.llm.anthropic import AnthropicDecoder, AnthropicMessagesClient
from forethought.llm.chat_chunks import ChatChunkDecoder
from forethought.llm.events import (
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    Usage,
)
from forethought.llm.responses import OpenAIResponsesClient, ResponsesDecoder
from forethought.serve.http import serve_in_process


def _feed(decoder: Any, events: list[dict[str, Any]]) -> list[Any]:
    return [out for event in events for out in decoder.feed(event)]


def test_responses_decoder_closes_calls_mid_stream_and_reports_usage() -> None:
    decoder = ResponsesDecoder()
    events = [{"type": "response.created", "response": {"id": "r1"}},
              {"type": "response.output_text.delta", "delta": "Hi"},
              {"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "f", "arguments": ""}},
              {"type": "response.function_call_arguments.delta", "item_id": "fc1", "output_index": 1, "delta": '{"a"'}]
    out = _feed(decoder, events)
    assert out[:2] == [TextDelta("Hi"), ToolCallStarted(0, "c1", "f")]
    assert not any(isinstance(e, ToolCallClosed) for e in out)
    closed = decoder.feed({"type": "response.function_call_arguments.delta", "item_id": "fc1", "delta": ": 1}"})
    assert [e for e in closed if isinstance(e, ToolCallClosed)] == [ToolCallClosed(0, "c1", "f", {"a": 1}, '{"a": 1}')]
    done = decoder.feed({"type": "response.completed", "response": {"id": "r1", "usage": {
        "input_tokens": 5, "output_tokens": 7, "total_tokens": 12, "input_tokens_details": {"cached_tokens": 2}}}})
    assert isinstance(done[-1], MessageDone) and done[-1].finish_reason == "tool_calls"
    assert done[-1].usage is not None and done[-1].usage.cached_tokens == 2 and decoder.done


def test_responses_decoder_cut_off_and_error_events() -> None:
    decoder = ResponsesDecoder()
    _feed(decoder, [{"type": "response.output_item.added", "output_index": 0,
                     "item": {"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": ""}},
                    {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"a": '}])
    done = decoder.feed({"type": "response.incomplete", "response": {"id": "r"}})
    closed = [e for e in done if isinstance(e, ToolCallClosed)]
    assert closed[0].error is not None and "cut off" in closed[0].error and closed[0].arguments is None
    assert isinstance(done[-1], MessageDone) and done[-1].finish_reason == "length"
    with pytest.raises(UpstreamError, match="quota"):
        ResponsesDecoder().feed({"type": "response.failed", "response": {"error": {"message": "quota"}}})
    with pytest.raises(UpstreamError, match="boom"):
        ResponsesDecoder().feed({"type": "error", "message": "boom"})


def test_anthropic_decoder_closes_at_the_brace_and_empty_input_is_an_empty_object() -> None:
    decoder = AnthropicDecoder()
    out = _feed(decoder, [
        {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 4, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"x": [1'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "]}"}}])
    assert [e for e in out if isinstance(e, ToolCallClosed)] == [ToolCallClosed(0, "t1", "f", {"x": [1]}, '{"x": [1]}')]
    out = _feed(decoder, [
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t2", "name": "g"}},
        {"type": "content_block_stop", "index": 2},
        {"type": "text", "text": "ok"},  # a helper-stream event repeating a raw one: ignored
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"}])
    assert [e for e in out if isinstance(e, ToolCallClosed)] == [ToolCallClosed(1, "t2", "g", {}, "")]
    done = out[-1]
    assert isinstance(done, MessageDone) and done.finish_reason == "tool_calls"
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens) == (4, 9)
    with pytest.raises(UpstreamError, match="overloaded"):
        AnthropicDecoder().feed({"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}})


def _chat(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


CHAT_CHUNKS = [_chat({"content": "Hi"}),
               _chat({"tool_calls": [{"index": 0, "id": "t0", "function": {"name": "f", "arguments": '{"a"'}}]}),
               _chat({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
               _chat({"tool_calls": [{"index": 1, "id": "t1", "function": {"name": "g", "arguments": ""}}]}),
               _chat({}, "tool_calls"),
               {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}]


@pytest.mark.parametrize("close_at_finish", [False, True])
def test_chat_chunk_decoder_closes_calls_mid_stream_and_the_rest_at_the_finish(close_at_finish: bool) -> None:
    decoder = ChatChunkDecoder(close_at_finish=close_at_finish)
    out = _feed(decoder, CHAT_CHUNKS[:3])
    assert out == [TextDelta("Hi"), ToolCallStarted(0, "t0", "f"), ToolCallArgumentsDelta(0, '{"a"'),
                   ToolCallArgumentsDelta(0, ": 1}"), ToolCallClosed(0, "t0", "f", {"a": 1}, '{"a": 1}')]
    assert _feed(decoder, CHAT_CHUNKS[3:4]) == [ToolCallStarted(1, "t1", "g")]
    at_finish = _feed(decoder, CHAT_CHUNKS[4:])
    closed_g = ToolCallClosed(1, "t1", "g", {}, "")
    assert at_finish == ([closed_g] if close_at_finish else [])  # the daemon acts before the usage chunk
    done = MessageDone("tool_calls", Usage(3, 4, 7), "c1")
    assert decoder.end() == ([done] if close_at_finish else [closed_g, done]) and decoder.done
    assert decoder.end() == []


def test_chat_chunk_decoder_needs_a_finish_reason_and_reads_sdk_objects_alike() -> None:
    decoder = ChatChunkDecoder()
    _feed(decoder, CHAT_CHUNKS[:3])
    assert decoder.end() == [] and not decoder.done  # no finish reason: the message did not end

    class Obj:
        def __init__(self, **fields: Any) -> None:
            self.__dict__.update(fields)

    def sdk(value: Any) -> Any:
        if isinstance(value, dict):
            return Obj(**{k: sdk(v) for k, v in value.items()})
        return [sdk(v) for v in value] if isinstance(value, list) else value

    plain, objects = ChatChunkDecoder(), ChatChunkDecoder()
    from_plain = _feed(plain, CHAT_CHUNKS) + plain.end()
    from_objects = [e for chunk in CHAT_CHUNKS for e in objects.feed(sdk(chunk))] + objects.end()
    assert from_objects[:-1] == from_plain[:-1] and isinstance(from_objects[-1], MessageDone)


def test_anthropic_malformed_input_is_an_error_for_that_call_only() -> None:
    decoder = AnthropicDecoder()
    out = _feed(decoder, [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a":1,}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_stop"}])
    closed = [e for e in out if isinstance(e, ToolCallClosed)]
    assert len(closed) == 1 and closed[0].error is not None and closed[0].arguments is None
    assert isinstance(out[-1], MessageDone) and out[-1].finish_reason == "stop"


def _server(path: str, body: bytes, status: int = 200) -> Starlette:
    async def answer(request: Request) -> Response:
        if status != 200:
            return Response(b'{"error": {"message": "nope", "type": "invalid_request_error"}}', status_code=status,
                            media_type="application/json")

        async def chunks() -> AsyncIterator[bytes]:
            yield body
        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route(path, answer, methods=["POST"])])


@pytest.mark.parametrize("kind", ["responses", "anthropic"])
async def test_clients_map_early_ends_and_status_errors(kind: str) -> None:
    path = "/v1/responses" if kind == "responses" else "/v1/messages"
    early = (b'event: response.created\ndata: {"type": "response.created", "response": {"id": "r"}}\n\n'
             if kind == "responses" else
             b'event: message_start\ndata: {"type": "message_start", "message": {"id": "m"}}\n\n')

    def client(url: str) -> Any:
        if kind == "responses":
            return OpenAIResponsesClient(url + "/v1", max_retries=0)
        return AnthropicMessagesClient(url, max_retries=0)

    async with serve_in_process(_server(path, early)) as url:
        llm = client(url)
        with pytest.raises(StreamDroppedError):
            async for _ in llm.stream("m", [{"role": "user", "content": "x"}], None):
                pass
        await llm.aclose()
    async with serve_in_process(_server(path, b"", status=400)) as url:
        llm = client(url)
        with pytest.raises(UpstreamError, match="400"):
            async for _ in llm.stream("m", [{"role": "user", "content": "x"}], None):
                pass
        await llm.aclose()
