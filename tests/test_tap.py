"""The stream tap: real SDK streams (Chat Completions, Responses, Anthropic Messages) from a loopback server.

The tap must hand the SDK's own event objects through unchanged, find the message's calls, start the
speculable ones early so the caller's own ``session.execute`` claims them (each tool runs once), and give
the same results as the untapped, serial loop. Broken, abandoned and malformed streams drop speculation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, ToolCall, tool
from forethought.integrations import StreamTap, tap
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.002, "fragment_chars": 7, "responses": [
    {"text": "Looking both up.", "calls": [{"name": "lookup", "arguments": {"city": "Paris"}},
                                           {"name": "lookup", "arguments": {"city": "Rome"}},
                                           {"name": "log_visit", "arguments": {"city": "Paris"}}]},
    {"text": "Paris 21, Rome 25."}]}
EXPECTED = [ToolCall("lookup", {"city": "Paris"}), ToolCall("lookup", {"city": "Rome"}),
            ToolCall("log_visit", {"city": "Paris"})]


class World:
    """The tools and a record of every real execution."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.visits: list[str] = []

        @tool(effect=Effect.READ_ONLY)
        async def lookup(city: str) -> dict[str, Any]:
            """Temperature of a city."""
            self.ran.append(f"lookup:{city}")
            await asyncio.sleep(0.01)
            return {"city": city, "temp": 20 + len(city)}

        @tool(effect=Effect.DESTRUCTIVE)
        def log_visit(city: str) -> str:
            """Record a visit (a write: never run early)."""
            self.ran.append(f"log_visit:{city}")
            self.visits.append(city)
            return f"logged {city}"

        self.tools = [lookup, log_visit]


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


async def _chat(url: str, clients: list[Any]) -> Any:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    clients.append(client)
    return await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "weather?"}],
                                                stream=True)


async def _responses(url: str, clients: list[Any]) -> Any:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    clients.append(client)
    return await client.responses.create(model="m", input="weather?", stream=True)


async def _anthropic(url: str, clients: list[Any]) -> Any:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    clients.append(client)
    return await client.messages.create(model="m", max_tokens=100, stream=True,
                                        messages=[{"role": "user", "content": "weather?"}])


FORMATS: dict[str, Callable[[str, list[Any]], Any]] = {"chat": _chat, "responses": _responses,
                                                       "anthropic": _anthropic}


class Recorder:
    """Passes a stream through and keeps what it produced, to compare with what the tap yielded."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.seen: list[Any] = []

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self.stream:
            self.seen.append(event)
            yield event


async def _run(url: str, fmt: str, speculate: bool) -> tuple[list[Any], list[str], World, StreamTap, list[Any]]:
    world = World()
    session = Runtime().session(tools=world.tools)
    clients: list[Any] = []
    recorder = Recorder(await FORMATS[fmt](url, clients))
    tapped = tap(recorder, session, speculate=speculate)
    yielded = [event async for event in tapped]
    for client in clients:
        await client.close()
    assert len(yielded) == len(recorder.seen)
    assert all(a is b for a, b in zip(yielded, recorder.seen, strict=True))  # the SDK's own objects
    outcomes = [await session.execute_detailed(call) for call in tapped.calls]
    await session.close()
    return [o.value for o in outcomes], [o.kind for o in outcomes], world, tapped, yielded


@pytest.mark.parametrize("fmt", sorted(FORMATS))
async def test_tap_passes_sdk_events_and_claims_early_runs(server: str, fmt: str) -> None:
    _, kinds, world, tapped, _ = await _run(server, fmt, speculate=True)
    assert tapped.calls == EXPECTED
    assert tapped.finished and tapped.text == "Looking both up."
    assert kinds == ["hit", "hit", "miss"]  # reads started early and were claimed; the write ran at its turn
    assert sorted(world.ran) == ["log_visit:Paris", "lookup:Paris", "lookup:Rome"]  # each tool ran once
    assert world.ran[-1] == "log_visit:Paris"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
async def test_tap_results_equal_the_serial_loop(server: str, fmt: str) -> None:
    serial_values, serial_kinds, serial_world, serial_tap, serial_events = await _run(server, fmt, speculate=False)
    values, _, world, tapped, events = await _run(server, fmt, speculate=True)
    assert serial_kinds == ["miss", "miss", "miss"]
    assert values == serial_values
    assert world.visits == serial_world.visits == ["Paris"]
    assert [type(e).__name__ for e in events] == [type(e).__name__ for e in serial_events]
    assert [c.id for c in tapped.tool_calls] != [] and serial_tap.calls == tapped.calls


async def test_tap_over_sdk_helper_streams(server: str) -> None:
    """The SDKs' helper streams (``messages.stream()``, ``chat.completions.stream()``) work as well."""
    world = World()
    session = Runtime().session(tools=world.tools)
    client = anthropic.AsyncAnthropic(base_url=server, api_key="x", max_retries=0)
    async with client.messages.stream(model="m", max_tokens=100,
                                      messages=[{"role": "user", "content": "weather?"}]) as stream:
        tapped = tap(stream, session)
        async for _ in tapped:
            pass
    assert tapped.calls == EXPECTED
    oa = openai.AsyncOpenAI(base_url=server + "/v1", api_key="x", max_retries=0)
    async with oa.chat.completions.stream(model="m", messages=[{"role": "user", "content": "weather?"}]) as chat:
        chat_tap = tap(chat, session)
        async for _ in chat_tap:
            pass
    assert chat_tap.calls == EXPECTED
    await session.close()
    await client.close()
    await oa.close()


# --- plain dict streams: breakage and adversarial fragmentation --------------------------------------------


def _chat_chunks(calls: list[ToolCall], cuts: list[int], finish: bool = True) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": "hi"}}]}]
    for index, call in enumerate(calls):
        raw = json.dumps(dict(call.arguments))
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": f"c{index}", "function": {"name": call.name, "arguments": ""}}]}}]})
        points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        for a, b in itertools.pairwise(points):
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": index, "function": {"arguments": raw[a:b]}}]}}]})
    if finish:
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return chunks


def _anthropic_events(calls: list[ToolCall], cuts: list[int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 3}}}]
    for index, call in enumerate(calls):
        raw = json.dumps(dict(call.arguments))
        events.append({"type": "content_block_start", "index": index,
                       "content_block": {"type": "tool_use", "id": f"t{index}", "name": call.name, "input": {}}})
        points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        events += [{"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": raw[a:b]}}
                   for a, b in itertools.pairwise(points)]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
               {"type": "message_stop"}]
    return events


def _responses_events(calls: list[ToolCall], cuts: list[int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "r1"}}]
    for index, call in enumerate(calls):
        raw = json.dumps(dict(call.arguments))
        events.append({"type": "response.output_item.added", "output_index": index,
                       "item": {"type": "function_call", "id": f"fc{index}", "call_id": f"c{index}",
                                "name": call.name, "arguments": ""}})
        points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        events += [{"type": "response.function_call_arguments.delta", "item_id": f"fc{index}", "output_index": index,
                    "delta": raw[a:b]} for a, b in itertools.pairwise(points)]
    events.append({"type": "response.completed", "response": {"id": "r1", "usage": None}})
    return events


async def _events(items: list[Any], fail_after: int | None = None) -> AsyncIterator[Any]:
    for n, item in enumerate(items):
        if fail_after is not None and n == fail_after:
            raise ConnectionError("stream broke")
        await asyncio.sleep(0)
        yield item


ARGUMENTS = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), st.text(max_size=6),
                                                                        st.lists(st.booleans(), max_size=3)),
                            max_size=3)


@settings(max_examples=40, deadline=None)
@given(st.lists(ARGUMENTS, min_size=1, max_size=3), st.lists(st.integers(0, 64), max_size=6),
       st.sampled_from(["chat", "anthropic", "responses"]))
async def test_any_fragmentation_gives_the_same_calls(arguments: list[dict[str, Any]], cuts: list[int],
                                                      fmt: str) -> None:
    calls = [ToolCall("lookup", a) for a in arguments]
    build = {"chat": _chat_chunks, "anthropic": _anthropic_events, "responses": _responses_events}[fmt]
    items = build(calls, cuts)
    session = Runtime().session(tools=World().tools)
    tapped = tap(_events(items), session, speculate=False)
    assert [e async for e in tapped] == items
    assert tapped.calls == calls
    assert tapped.finished
    await session.close()


async def test_a_broken_stream_drops_every_speculation() -> None:
    world = World()
    session = Runtime().session(tools=world.tools)
    items = _chat_chunks(EXPECTED[:2], [3])
    tapped = tap(_events(items, fail_after=len(items) - 1), session)
    with pytest.raises(ConnectionError):
        async for _ in tapped:
            pass
    assert len(tapped.calls) == 2 and not tapped.finished
    assert session.speculation_count() == 0
    await session.close()


async def test_a_stream_without_finish_reason_or_left_early_drops_speculation() -> None:
    session = Runtime().session(tools=World().tools)
    tapped = tap(_events(_chat_chunks(EXPECTED[:2], [], finish=False)), session)
    async for _ in tapped:
        pass
    assert not tapped.finished and session.speculation_count() == 0
    left = tap(_events(_chat_chunks(EXPECTED[:2], [])), session)
    iterator = aiter(left)
    while not left.calls:
        await anext(iterator)
    await iterator.aclose()  # type: ignore[attr-defined]
    assert session.speculation_count() == 0
    await session.close()


async def test_malformed_arguments_are_reported_not_run() -> None:
    world = World()
    session = Runtime().session(tools=world.tools)
    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "id": "c0", "function": {"name": "lookup", "arguments": '{"city": "Pa",}'}}]}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    tapped = tap(_events(chunks), session)
    async for _ in tapped:
        pass
    assert tapped.calls == [] and tapped.tool_calls[0].error is not None
    assert world.ran == []
    await session.close()
