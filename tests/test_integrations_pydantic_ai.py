"""pydantic-ai adapter: the framework's own Agent, TappedModel and ForethoughtToolset against loopback.

Serial (``speculate=False``) and speculative runs through the same framework code give the same output
and tool returns; in the speculative run the reads were started from the stream and claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (forethought[integrations])")

import openai  # noqa: E402
from pydantic_ai.messages import ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from adapter_tools import lookup_and_note_session  # noqa: E402
from forethought import Session  # noqa: E402
from forethought.integrations import ForethoughtToolset, TappedModel  # noqa: E402
from forethought.serve.http import serve_in_process  # noqa: E402
from forethought.serve.scripted import create_scripted_server, parse_script  # noqa: E402

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


async def _run(url: str, speculate: bool) -> tuple[str, list[Any], list[str], Any]:
    session, ran = _session()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=speculate)
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    result = await agent.run("Weather in Oslo and Lima?")
    returns = [part.content for message in result.all_messages() for part in message.parts
               if isinstance(part, ToolReturnPart)]
    stats = session.stats()
    await session.close()
    return str(result.output), returns, ran, stats


async def test_agent_serial_equals_speculative(server: str) -> None:
    serial_text, serial_returns, serial_ran, serial_stats = await _run(server, speculate=False)
    text, returns, ran, stats = await _run(server, speculate=True)
    assert text == serial_text == "Oslo and Lima are both 24."
    assert returns == serial_returns
    assert returns == [{"city": "Oslo", "temp": 24}, {"city": "Lima", "temp": 24}, "ok"]
    assert sorted(ran) == sorted(serial_ran) and ran.count("note:both 24") == 1
    assert serial_stats.hits == 0 and stats.hits == 2
