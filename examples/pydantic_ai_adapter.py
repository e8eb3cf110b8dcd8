"""A pydantic-ai Agent with forethought's toolset wrapper and a model wrapper that starts streamed calls early.

``ForethoughtToolset.of(session)`` offers the session's tools and runs them through ``session.execute``;
``TappedModel`` wraps pydantic-ai's ``OpenAIChatModel`` and watches its stream. A scripted model on loopback
answers with three slow lookups and a long note (a write, run only at its turn), then the answer. Serial
(``speculate=False``) and speculative runs print their times; their tool returns and outputs are checked to be equal.

Run: ``.venv/bin/python examples/pydantic_ai_adapter.py`` (a few seconds, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pydantic_ai
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from forethought import Effect, Runtime, serve_scripted, tool
from forethought.integrations import ForethoughtToolset, TappedModel

REPORT = "Oslo 24 C, Lima 24 C, Cairo 25 C: Cairo is the warmest of the three cities today, Oslo and Lima tie."
SCRIPT = {"ttft_s": 0.1, "chunk_s": 0.02, "fragment_chars": 5, "responses": [
    {"calls": [*({"name": "lookup", "arguments": {"city": c}} for c in ("Oslo", "Lima", "Cairo")),
                           {"name": "note", "arguments": {"text": REPORT}}]},
    {"text": "Cairo is the warmest."}]}


@tool(effect=Effect.READ_ONLY)
async def lookup(city: str) -> dict[str, Any]:
    """Temperature of a city (a slow backend)."""
    await asyncio.sleep(0.4)
    return {"city": city, "celsius": 20 + len(city)}


@tool  # no effect declared: DESTRUCTIVE, never run early
def note(text: str) -> str:
    """Keep a note."""
    return f"noted {len(text)} characters"


async def run(url: str, speculate: bool) -> tuple[float, Any]:
    session = Runtime().session(tools=[lookup, note])
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=speculate)
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    start = time.perf_counter()
    result = await agent.run("Which city is warmest?")
    elapsed = time.perf_counter() - start
    returns = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    await session.close()
    return elapsed, (result.output, returns)


async def main() -> None:
    async with serve_scripted(SCRIPT) as url:
        serial_s, serial = await run(url, speculate=False)
        spec_s, spec = await run(url, speculate=True)
    assert spec == serial, "speculation changed the run"
    print(f"output: {spec[0]} (the same in both runs)")
    print(f"serial {serial_s:.2f}s, speculative {spec_s:.2f}s, saved {1 - spec_s / serial_s:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
