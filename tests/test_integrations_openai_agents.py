"""OpenAI Agents SDK adapter: the framework's own Runner against the scripted loopback engine.

Serial (``speculate=False``) and speculative runs through the same framework code give the same final
output and tool outputs; in the speculative run the reads were started from the stream and claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (forethought[integrations])")

import openai  # noqa: E402
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel  # noqa: E402
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402

from adapter_tools import lookup_and_note_session  # noqa: E402
from forethought import Session  # noqa: E402
from forethought.integrations import ForethoughtModel, agents_tools  # noqa: E402
from forethought.serve.http import serve_in_process  # noqa: E402
from forethought.serve.scripted import create_scripted_server, parse_script  # noqa: E402

agents.set_tracing_disabled(True)

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.001, "fragment_chars": 6, "responses": [
    {"text": "", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}},
                           {"name": "lookup", "arguments": {"city": "Lima"}}]},
    {"text": "", "calls": [{"name": "note", "arguments": {"text": "both 24"}}]},
    {"text": "Oslo and Lima are both 24."}]}


def _session() -> tuple[Session, list[str]]:
    return lookup_and_note_session()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


async def _run(url: str, api: str, speculate: bool) -> tuple[str, list[Any], list[str], Any]:
    session, ran = _session()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    inner = (OpenAIResponsesModel("m", client) if api == "responses"
             else OpenAIChatCompletionsModel("m", client))
    agent = agents.Agent(name="weather", instructions="Be brief.", tools=agents_tools(session),
                         model=ForethoughtModel(inner, session, speculate=speculate))
    result = await agents.Runner.run(agent, "Weather in Oslo and Lima?")
    outputs = [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]
    stats = session.stats()
    await session.close()
    return str(result.final_output), outputs, ran, stats


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_runner_serial_equals_speculative(server: str, api: str) -> None:
    serial_text, serial_outputs, serial_ran, serial_stats = await _run(server, api, speculate=False)
    text, outputs, ran, stats = await _run(server, api, speculate=True)
    assert text == serial_text == "Oslo and Lima are both 24."
    assert outputs == serial_outputs
    assert len(outputs) == 3
    assert sorted(ran) == sorted(serial_ran) and ran.count("note:both 24") == 1
    assert serial_stats.hits == 0 and stats.hits == 2


async def test_streamed_run_passes_events_through(server: str) -> None:
    session, _ = _session()
    client = openai.AsyncOpenAI(base_url=server + "/v1", api_key="x", max_retries=0)
    agent = agents.Agent(name="weather", tools=agents_tools(session),
                         model=ForethoughtModel(OpenAIResponsesModel("m", client), session))
    result = agents.Runner.run_streamed(agent, "Weather?")
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds
    assert result.final_output == "Oslo and Lima are both 24."
    assert session.stats().hits == 2
    await session.close()
