"""Odd but real streamed tool calls, read the same way by the gateway and the tap (an outside review found them
read wrongly): servers that number every parallel call 0, argument text that goes on after its object closed,
an id or a name that comes late, and a Responses output holding a call only the client can run.

The gateway is driven over loopback HTTP in front of an upstream that streams scripted chunks; a result is
posted for the first call only, so a message is served only if the gateway believes it has one well-formed
call. The tap is compared with the openai SDK's own accumulator on the same chunks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from forethought import Effect, Runtime, tool
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.integrations import tap
from forethought.llm.tool_cache import TOKEN_HEADER
from forethought.serve.http import serve_in_process

READ_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": READ_PARAMETERS}}]
POST = [{"name": "read", "params": {"path": "a"}, "output": "A-CONTENT"}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "up-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _call(index: int, fragment: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
    if call_id is not None:
        part["id"], part["type"] = call_id, "function"
    if name is not None:
        part["function"]["name"] = name
    return _chunk({"tool_calls": [part]})


CASES: dict[str, list[dict[str, Any]]] = {
    # two calls, both numbered 0: the second (its own id) is a call of its own, with no result posted
    "every_call_index_0": [_call(0, "", "call_A", "read"), _call(0, '{"path": "a"}'),
                           _call(0, "", "call_B", "read"), _call(0, '{"path": "b"}'), _chunk({}, "tool_calls")],
    # the object closes, then the text goes on: not one JSON object, so not a call the gateway may serve
    "text_after_the_object": [_call(0, "", "call_A", "read"), _call(0, '{"path": "a"}'),
                              _call(0, ', "path": "secret/b"}'), _chunk({}, "tool_calls")],
    "second_object_after_the_first": [_call(0, "", "call_A", "read"), _call(0, '{"path": "a"}{"path": "b"}'),
                                      _chunk({}, "tool_calls")],
}


def _sse(chunks: Sequence[dict[str, Any]]) -> list[bytes]:
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


class Upstream:
    """Streams the next script to each request (then a plain answer) and keeps every request body."""

    def __init__(self, scripts: list[list[bytes]]) -> None:
        self.scripts = scripts
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._answer, methods=["POST"]),
                                     Route("/v1/responses", self._answer, methods=["POST"])])

    async def _answer(self, request: Request) -> StreamingResponse:
        self.requests.append(await request.json())
        script = self.scripts.pop(0) if self.scripts else _sse([_chunk({"content": "done"}, "stop")])

        async def body() -> AsyncIterator[bytes]:
            await asyncio.sleep(0.3)  # time for the client's post
            for item in script:
                yield item

        return StreamingResponse(body(), media_type="text/event-stream")


async def _through_gateway(script: list[bytes], path: str = "/v1/chat/completions",
                           body: dict[str, Any] | None = None, post: Any = POST) -> tuple[bytes, Upstream]:
    upstream = Upstream([script])
    async with serve_in_process(upstream.app) as upstream_url:
        gateway = Gateway(upstream_url + "/v1", GatewayConfig(post_wait_s=0.5))
        try:
            async with serve_in_process(gateway.app) as url, httpx2.AsyncClient(timeout=20) as http:
                request = body or {"model": "m", "stream": True, "tools": TOOLS,
                                   "messages": [{"role": "user", "content": "read a"}]}
                async with http.stream("POST", url + path, json=request) as response:
                    response_id = response.headers["x-forethought-response-id"]
                    posted = await http.post(f"{url}/cache-tool-output/{response_id}", json=post,
                                             headers={TOKEN_HEADER: response.headers[TOKEN_HEADER]})
                    assert posted.status_code == 200, posted.text
                    raw = b"".join([part async for part in response.aiter_bytes()])
        finally:
            await gateway.aclose()
    return raw, upstream


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_gateway_never_serves_a_message_it_reads_differently_from_the_client(case: str) -> None:
    raw, upstream = await _through_gateway(_sse(CASES[case]))
    assert len(upstream.requests) == 1, "the gateway continued upstream"
    assert b"forethought_tool_result" not in raw
    assert b'"finish_reason": "tool_calls"' in raw or b'"finish_reason":"tool_calls"' in raw


async def test_the_gateway_serves_and_continues_with_the_id_that_came_after_the_name() -> None:
    script = _sse([_call(0, "", None, "read"), _call(0, '{"path": "a"}', "call_LATE"), _chunk({}, "tool_calls")])
    raw, upstream = await _through_gateway(script)
    assert b"forethought_tool_result" in raw and len(upstream.requests) == 2
    messages = upstream.requests[1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_LATE" and messages[2]["tool_call_id"] == "call_LATE"


def _response_event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


@pytest.mark.parametrize("other", ["custom_tool_call", "local_shell_call", "some_future_call"])
async def test_a_responses_output_with_a_call_only_the_client_runs_is_never_served(other: str) -> None:
    function_call = {"type": "function_call", "call_id": "call_R", "name": "read", "arguments": '{"path": "a"}',
                     "id": "fc_1", "status": "completed"}
    client_call = {"type": other, "call_id": "call_P", "name": "apply_patch", "input": "*** patch", "id": "ct_1"}
    completed = {"id": "resp_1", "object": "response", "status": "completed", "output": [function_call, client_call]}
    script = [_response_event("response.created", response={"id": "resp_1", "status": "in_progress", "output": []}),
              _response_event("response.output_item.done", output_index=0, item=function_call),
              _response_event("response.output_item.done", output_index=1, item=client_call),
              _response_event("response.completed", response=completed)]
    body = {"model": "m", "stream": True, "input": "patch and read", "tools": [
        {"type": "function", "name": "read", "parameters": READ_PARAMETERS}]}
    raw, upstream = await _through_gateway(script, "/v1/responses", body)
    assert len(upstream.requests) == 1 and b"forethought_tool_result" not in raw


TAP_CASES: dict[str, list[dict[str, Any]]] = {
    **CASES,
    "id_after_the_name": [_call(0, "", None, "read"), _call(0, '{"path": "a"}', "call_LATE"),
                          _chunk({}, "tool_calls")],
    "name_after_the_arguments": [_call(0, '{"path": "a"}', "call_X"), _call(0, "", None, "read"),
                                 _chunk({}, "tool_calls")],
}


def _sdk_calls(chunks: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, bool]]:
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for item in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(item))
    calls = state.get_final_completion().choices[0].message.tool_calls or []
    out = []
    for c in calls:
        try:
            ok = isinstance(json.loads(c.function.arguments), dict)
        except ValueError:
            ok = False
        out.append((c.id, c.function.name, c.function.arguments, ok))
    return out


@pytest.mark.parametrize("case", sorted(set(TAP_CASES) - {"every_call_index_0"}))
async def test_the_tap_reports_each_call_as_the_sdk_accumulates_it(case: str) -> None:
    @tool(effect=Effect.READ_ONLY)
    async def read(path: str) -> str:
        return f"content of {path}"

    runtime = Runtime()
    session = runtime.session(tools=[read])

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        for item in TAP_CASES[case]:
            await asyncio.sleep(0)
            yield item

    tapped = tap(chunks(), session)
    async for _ in tapped:
        pass
    got = [(c.id, c.name, c.raw, c.error is None and c.call is not None) for c in tapped.tool_calls]
    assert got == _sdk_calls(TAP_CASES[case])
    for call in tapped.calls:  # every call it reports well-formed runs as the real call
        assert await session.execute(call) == f"content of {call.arguments['path']}"
    await session.close()
    runtime.close()
