"""The tap never raises where plain iteration of the SDK's stream does not, and never loses a call.

Servers send what the openai SDK passes through without a complaint: tool-call indices that are not
integers, arguments sent whole as an object, ``tool_calls`` as one object instead of a list, every call
numbered 0 with its own id, Responses ``error`` and ``response.failed`` events, and plain garbage. For each,
the tapped stream yields exactly the events plain iteration yields, raises nothing plain iteration does
not raise, reports every call (a malformed one with its error), and drops every speculation of a message
that did not finish. The same streams also go through the real ``openai`` SDK from a loopback server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from forethought import Effect, Runtime, ToolCall, tool
from forethought.integrations import tap
from forethought.serve.http import serve_in_process


def _session() -> tuple[Any, list[str]]:
    ran: list[str] = []

    @tool(effect=Effect.READ_ONLY)
    async def lookup(city: str) -> dict[str, Any]:
        """Temperature of a city."""
        ran.append(city)
        await asyncio.sleep(0)
        return {"city": city, "temp": len(city)}

    return Runtime().session(tools=[lookup]), ran


async def _events(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        await asyncio.sleep(0)
        yield item


def _chunk(tool_calls: Any = None, content: Any = None, finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    if content is not None:
        delta["content"] = content
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _tapped(items: list[Any]) -> tuple[Any, Any, list[Any]]:
    session, ran = _session()
    tapped = tap(_events(items), session)
    yielded = [event async for event in tapped]
    assert yielded == items and all(a is b for a, b in zip(yielded, items, strict=True))
    return tapped, session, ran


# --- indices that are not integers ------------------------------------------------------------------------

ODD_INDICES = ["0", "1", 1.0, 1.5, True, False, -1, -7, {"i": 1}, [1], "x", "", 2**70, float("inf")]


@pytest.mark.parametrize("odd", ODD_INDICES, ids=repr)
async def test_an_index_that_is_not_an_integer_names_its_own_call(odd: Any) -> None:
    items = [_chunk([{"index": 0, "id": "a", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}]),
             _chunk([{"index": odd, "id": "b", "function": {"name": "lookup", "arguments": '{"city": '}}]),
             _chunk([{"index": odd, "function": {"arguments": '"Lima"}'}}]),
             _chunk(finish="tool_calls")]
    tapped, session, _ = await _tapped(items)
    assert tapped.error is None and tapped.finished
    assert tapped.calls == [ToolCall("lookup", {"city": "Oslo"}), ToolCall("lookup", {"city": "Lima"})]
    assert [c.id for c in tapped.tool_calls] == ["a", "b"]
    outcomes = [await session.execute_detailed(call) for call in tapped.calls]
    assert [o.kind for o in outcomes] == ["hit", "hit"]
    await session.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(-3, 6), st.text(max_size=2), st.floats(allow_nan=False), st.booleans(),
                          st.none()), min_size=1, max_size=5, unique_by=lambda v: json.dumps(v)))
async def test_any_indices_lose_no_call(indices: list[Any]) -> None:
    cities = [f"C{n}" for n in range(len(indices))]
    items = [_chunk([{"index": i, "id": f"id{n}", "function": {"name": "lookup",
                                                               "arguments": json.dumps({"city": c})}}])
             for n, (i, c) in enumerate(zip(indices, cities, strict=True))] + [_chunk(finish="tool_calls")]
    tapped, session, _ = await _tapped(items)
    assert tapped.error is None
    assert sorted(c.arguments["city"] for c in tapped.calls) == sorted(cities)
    await session.close()


# --- arguments as an object, tool_calls as one object --------------------------------------------------------

@pytest.mark.parametrize("arguments", [{"city": "Oslo"}, {"city": "Oslo", "z": 1, "a": [1, {"k": None}]}, {}])
async def test_arguments_sent_as_an_object_are_that_object(arguments: dict[str, Any]) -> None:
    items = [_chunk([{"index": 0, "id": "a", "function": {"name": "lookup", "arguments": arguments}}]),
             _chunk(finish="tool_calls")]
    tapped, session, _ = await _tapped(items)
    (found,) = tapped.tool_calls
    assert found.call is not None and dict(found.call.arguments) == arguments
    assert list(found.call.arguments) == list(arguments)  # the object's own key order
    assert found.raw == json.dumps(arguments, ensure_ascii=False)
    await session.close()


@pytest.mark.parametrize("arguments", [["Oslo"], 7, 1.5, True, "Oslo", [{"city": "Oslo"}]], ids=repr)
async def test_arguments_that_are_no_object_make_a_malformed_call_not_an_exception(arguments: Any) -> None:
    items = [_chunk([{"index": 0, "id": "a", "function": {"name": "lookup", "arguments": arguments}}]),
             _chunk(finish="tool_calls")]
    tapped, session, ran = await _tapped(items)
    (found,) = tapped.tool_calls
    assert found.call is None and found.error
    assert tapped.calls == [] and ran == []
    await session.close()


@pytest.mark.parametrize("shape", ["object", "object-per-chunk", "tuple"])
async def test_tool_calls_as_one_object_is_one_delta(shape: str) -> None:
    delta = {"index": 0, "id": "a", "function": {"name": "lookup", "arguments": '{"city": "Rome"}'}}
    if shape == "object":
        items = [_chunk(delta)]
    elif shape == "object-per-chunk":
        items = [_chunk({"index": 0, "id": "a", "function": {"name": "lookup", "arguments": '{"city": '}}),
                 _chunk({"index": 0, "function": {"arguments": '"Rome"}'}})]
    else:
        items = [_chunk((delta,))]
    tapped, session, _ = await _tapped([*items, _chunk(finish="tool_calls")])
    assert tapped.calls == [ToolCall("lookup", {"city": "Rome"})]
    assert (await session.execute_detailed(tapped.calls[0])).kind == "hit"
    await session.close()


# --- every call numbered 0 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [2, 3, 5])
@pytest.mark.parametrize("fragments", [1, 3])
async def test_a_repeated_index_with_a_new_id_is_a_new_call(count: int, fragments: int) -> None:
    items = []
    for n in range(count):
        raw = json.dumps({"city": f"City{n}"})
        cut = max(1, len(raw) // fragments)
        pieces = [raw[i:i + cut] for i in range(0, len(raw), cut)]
        items.append(_chunk([{"index": 0, "id": f"call-{n}", "function": {"name": "lookup", "arguments": pieces[0]}}]))
        items += [_chunk([{"index": 0, "function": {"arguments": piece}}]) for piece in pieces[1:]]
    tapped, session, ran = await _tapped([*items, _chunk(finish="tool_calls")])
    assert [c.id for c in tapped.tool_calls] == [f"call-{n}" for n in range(count)]
    assert tapped.calls == [ToolCall("lookup", {"city": f"City{n}"}) for n in range(count)]
    assert [(await session.execute_detailed(c)).kind for c in tapped.calls] == ["hit"] * count
    assert sorted(ran) == sorted(f"City{n}" for n in range(count))  # each ran once
    await session.close()


async def test_the_same_id_repeated_on_every_chunk_is_one_call() -> None:
    items = [_chunk([{"index": 0, "id": "same", "function": {"name": "lookup", "arguments": p}}])
             for p in ('{"ci', 'ty": "Ab', 'u"}')]
    tapped, session, _ = await _tapped([*items, _chunk(finish="tool_calls")])
    assert tapped.calls == [ToolCall("lookup", {"city": "Abu"})]
    await session.close()


async def test_a_new_id_before_the_first_call_closed_keeps_both() -> None:
    items = [_chunk([{"index": 0, "id": "a", "function": {"name": "lookup", "arguments": '{"city": "Pa'}}]),
             _chunk([{"index": 0, "id": "b", "function": {"name": "lookup", "arguments": '{"city": "Rome"}'}}]),
             _chunk(finish="tool_calls")]
    tapped, session, _ = await _tapped(items)
    assert [(c.id, c.call is not None) for c in tapped.tool_calls] == [("a", False), ("b", True)]
    assert tapped.tool_calls[0].error  # cut off: reported, never run
    await session.close()


# --- error events are passed on ----------------------------------------------------------------------------

def _responses(calls: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "r1"}}]
    for n in range(calls):
        events += [{"type": "response.output_item.added", "output_index": n,
                    "item": {"type": "function_call", "id": f"fc{n}", "call_id": f"c{n}", "name": "lookup",
                             "arguments": ""}},
                   {"type": "response.function_call_arguments.delta", "item_id": f"fc{n}", "output_index": n,
                    "delta": json.dumps({"city": f"C{n}"})}]
    return events


ERRORS = [{"type": "error", "code": "server_error", "message": "The server had an error", "param": None,
           "sequence_number": 9},
          {"type": "error", "message": None},
          {"type": "error", "message": ["odd"], "code": 5},
          {"type": "error"},
          {"type": "response.failed", "response": {"id": "r1", "status": "failed",
                                                   "error": {"code": "server_error", "message": "boom"}}},
          {"type": "response.failed", "response": None}]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: f"{e['type']}-{len(e)}")
@pytest.mark.parametrize("calls", [0, 1, 2])
@pytest.mark.parametrize("after", ["then-ends", "then-more"])
async def test_a_responses_error_event_is_passed_on_and_drops_speculation(error: dict[str, Any], calls: int,
                                                                          after: str) -> None:
    items: list[Any] = [*_responses(calls), error]
    if after == "then-more":
        items += [{"type": "response.output_text.delta", "delta": "x"},
                  {"type": "response.completed", "response": {"id": "r1", "usage": None}}]
    tapped, session, _ = await _tapped(items)
    assert tapped.error is not None and error["type"] in tapped.error
    assert not tapped.finished
    assert session.speculation_count() == 0  # the message failed: nothing of it is claimable
    assert len(tapped.calls) == calls
    await session.close()


async def test_an_anthropic_error_event_in_a_plain_stream_is_passed_on() -> None:
    items = [{"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 3}}},
             {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
    tapped, session, _ = await _tapped(items)
    assert tapped.error == "error: Overloaded" and not tapped.finished
    await session.close()


# --- anything else ----------------------------------------------------------------------------------------

GARBAGE = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.sampled_from(["choices", "type", "delta", "index", "tool_calls"]),
                                    st.one_of(st.none(), st.integers(), st.text(max_size=3),
                                              st.lists(st.none(), max_size=2),
                                              st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
                                    max_size=3))


@settings(max_examples=100, deadline=None)
@given(st.lists(GARBAGE, max_size=6), st.sampled_from(["chat", "responses", "anthropic"]))
async def test_garbage_anywhere_never_raises(garbage: list[Any], first: str) -> None:
    head: list[Any] = {"chat": [_chunk(content="hi")], "responses": _responses(1),
                       "anthropic": [{"type": "message_start", "message": {"id": "m"}}]}[first]
    tapped, session, _ = await _tapped([*head, *garbage, _chunk(finish="tool_calls")])
    assert tapped.error is None or "could not decode" in tapped.error or tapped.error.startswith(("error", "resp"))
    await session.close()


# --- through the real openai SDK ---------------------------------------------------------------------------

def _sse_server(chat: list[Any], responses: list[Any]) -> Starlette:
    async def stream(events: list[Any]) -> AsyncIterator[bytes]:
        for event in events:
            kind = event.get("type") if isinstance(event, dict) else None
            yield (f"event: {kind}\n" if kind else "").encode() + b"data: " + json.dumps(event).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def chat_route(request: Request) -> Response:
        return StreamingResponse(stream(chat), media_type="text/event-stream")

    async def responses_route(request: Request) -> Response:
        return StreamingResponse(stream(responses), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat_route, methods=["POST"]),
                             Route("/v1/responses", responses_route, methods=["POST"])])


def _call(index: Any, call_id: str, arguments: Any) -> dict[str, Any]:
    return {"index": index, "id": call_id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}


HOSTILE_CHAT = [_chunk([_call("0", "a", {"city": "Oslo"})]), _chunk(_call(0, "b", '{"city": "Lima"}')),
                _chunk([_call(1.5, "c", '{"city": "X"}')]), _chunk(finish="tool_calls")]
HOSTILE_RESPONSES = [*_responses(1), ERRORS[0]]


async def test_through_the_openai_sdk_the_tap_yields_what_plain_iteration_yields() -> None:
    async with serve_in_process(_sse_server(HOSTILE_CHAT, HOSTILE_RESPONSES)) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        async def open_stream(api: str) -> Any:
            if api == "chat":
                return await client.chat.completions.create(model="m", messages=[], stream=True)
            return await client.responses.create(model="m", input="x", stream=True)

        for api in ("chat", "responses"):
            plain = [event async for event in await open_stream(api)]  # the SDK itself raises nothing here
            session, _ = _session()
            tapped = tap(await open_stream(api), session)
            through = [event async for event in tapped]
            assert [e.model_dump(warnings=False) for e in through] == [e.model_dump(warnings=False) for e in plain]
            if api == "chat":
                assert tapped.error is None
                cities = [c.call.arguments["city"] if c.call else None for c in tapped.tool_calls]
                assert cities == ["Oslo", "Lima", "X"]
                assert [c.id for c in tapped.tool_calls] == ["a", "b", "c"]
            else:
                assert tapped.error == "error: The server had an error" and session.speculation_count() == 0
            await session.close()
        await client.close()
