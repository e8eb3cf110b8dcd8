"""The Agent with clients users already have (AsyncOpenAI for Chat and Responses, AsyncAnthropic), text streamed.

Against the scripted loopback server speaking all three wire formats: serial and speculative runs give the
same transcript and tool outputs, the streamed text is the model's text in order, and early dispatch
happens in every format.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from forethought import Agent, Effect, Runtime, tool
from forethought.errors import ForethoughtError, UpstreamError
from forethought.llm.anthropic import AnthropicMessagesClient, to_anthropic_messages
from forethought.llm.responses import OpenAIResponsesClient, to_responses_input
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.001, "fragment_chars": 6, "responses": [
    {"text": "Let me check.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}},
                                        {"name": "lookup", "arguments": {"city": "Lima"}}]},
    {"text": "Noting it.", "calls": [{"name": "note", "arguments": {"text": "Oslo 24, Lima 24"}}]},
    {"text": "Oslo and Lima are both 24."}]}


def _tools() -> tuple[list[Any], list[str]]:
    notes: list[str] = []

    @tool(effect=Effect.READ_ONLY)
    async def lookup(city: str) -> dict[str, Any]:
        """Temperature of a city."""
        await asyncio.sleep(0.005)
        return {"city": city, "temp": 20 + len(city)}

    @tool
    def note(text: str) -> str:
        """Write a note."""
        notes.append(text)
        return "ok"

    return [lookup, note], notes


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


def _client(kind: str, url: str) -> Any:
    if kind == "anthropic":
        return anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


async def _run(kind: str, url: str, speculate: bool) -> tuple[Any, list[str], list[str]]:
    tools, notes = _tools()
    agent = Agent(_client(kind, url), "m", tools, Runtime(), speculate=speculate,
                  api="responses" if kind == "responses" else "chat")
    pieces: list[str] = []
    result = await agent.run([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
                             on_text=pieces.append)
    await agent.close()
    return result, pieces, notes


def _without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript with the server's call ids (a counter, different per run) replaced by their position."""
    ids: dict[str, str] = {}
    out = []
    for message in messages:
        message = dict(message)
        if "tool_calls" in message:
            message["tool_calls"] = [{**c, "id": ids.setdefault(c["id"], f"#{len(ids)}")}
                                     for c in message["tool_calls"]]
        if "tool_call_id" in message:
            message["tool_call_id"] = ids[message["tool_call_id"]]
        out.append(message)
    return out


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_existing_sdk_clients_serial_equals_speculative(server: str, kind: str) -> None:
    serial, serial_pieces, serial_notes = await _run(kind, server, speculate=False)
    spec, pieces, notes = await _run(kind, server, speculate=True)
    assert _without_ids(spec.messages) == _without_ids(serial.messages)
    assert [r.output for r in spec.tool_records] == [r.output for r in serial.tool_records]
    assert [r.call for r in spec.tool_records] == [r.call for r in serial.tool_records]
    assert notes == serial_notes == ["Oslo 24, Lima 24"]
    assert spec.final_text == serial.final_text == "Oslo and Lima are both 24."
    assert "".join(pieces) == "".join(serial_pieces) == "Let me check.Noting it.Oslo and Lima are both 24."
    assert sum(s.early_dispatched for s in spec.steps) == 2 and sum(s.early_dispatched for s in serial.steps) == 0


async def test_agent_stream_yields_text_then_result(server: str) -> None:
    tools, _ = _tools()
    agent = Agent(_client("chat", server), "m", tools, Runtime())
    stream = agent.stream([{"role": "user", "content": "Weather?"}])
    with pytest.raises(ForethoughtError):
        _ = stream.result
    pieces = [piece async for piece in stream]
    assert "".join(pieces) == "Let me check.Noting it.Oslo and Lima are both 24."
    assert stream.result.final_text == "Oslo and Lima are both 24."
    await agent.close()


async def test_async_text_callback_is_awaited(server: str) -> None:
    tools, _ = _tools()
    agent = Agent(_client("anthropic", server), "m", tools, Runtime())
    seen: list[str] = []

    async def show(text: str) -> None:
        await asyncio.sleep(0)
        seen.append(text)

    result = await agent.run([{"role": "user", "content": "Weather?"}], on_text=show)
    assert "".join(seen).endswith(result.final_text)
    await agent.close()


async def test_a_script_past_its_end_is_an_upstream_error(server: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "x"}] + [
        {"role": "assistant", "content": "a"}, {"role": "user", "content": "y"}] * 3
    for client in (OpenAIResponsesClient(server + "/v1", max_retries=0),
                   AnthropicMessagesClient(server, max_retries=0)):
        with pytest.raises(UpstreamError, match="400"):
            async for _ in client.stream("m", messages, None):
                pass
        await client.aclose()


def test_unknown_client_types_are_refused() -> None:
    with pytest.raises(TypeError, match="LLM client"):
        Agent(object(), "m", [], Runtime())


def test_transcript_translation() -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{bad"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "r1"},
                {"role": "tool", "tool_call_id": "c2", "content": "r2"}]
    system, turns = to_anthropic_messages(messages)
    assert system == "S"
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][1] == {"type": "tool_use", "id": "c1", "name": "f", "input": {"x": 1}}
    assert turns[1]["content"][2]["input"] == {}
    assert [b["tool_use_id"] for b in turns[2]["content"]] == ["c1", "c2"]
    instructions, items = to_responses_input(messages)
    assert instructions == "S"
    assert [i.get("type", i.get("role")) for i in items] == ["user", "assistant", "function_call", "function_call",
                                                             "function_call_output", "function_call_output"]


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_closing_the_agent_leaves_the_callers_client_open(server: str, kind: str) -> None:
    tools, _ = _tools()
    client = _client(kind, server)
    agent = Agent(client, "m", tools, Runtime(), api="responses" if kind == "responses" else "chat")
    await agent.run([{"role": "user", "content": "Weather?"}])
    await agent.close()
    assert not client.is_closed()  # the caller's client is the caller's to close
    again = Agent(client, "m", tools, Runtime(), api="responses" if kind == "responses" else "chat")
    assert (await again.run([{"role": "user", "content": "Weather?"}])).final_text == "Oslo and Lima are both 24."
    await again.close()
    await client.close()
