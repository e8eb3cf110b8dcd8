"""The OpenAI Agents SDK's own Runner, with forethought tools and a model whose stream starts calls early.

``agents_tools(session)`` gives the session's tools as ``FunctionTool``s (each runs ``session.execute``);
``ForethoughtModel`` wraps the SDK's ``OpenAIResponsesModel`` and taps its stream. A scripted model on
loopback (Responses API) answers with three slow lookups and a long note (a write, run only at its turn),
then the answer. The serial arm is the same code with ``speculate=False``; both arms' outputs are checked to be equal.

Run: ``.venv/bin/python examples/openai_agents_adapter.py`` (a few seconds, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import agents
import openai
from agents.models.openai_responses import OpenAIResponsesModel

from forethought import Effect, Runtime, serve_scripted, tool
from forethought.integrations import ForethoughtModel, agents_tools

agents.set_tracing_disabled(True)  # nothing leaves 127.0.0.1
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
    model = OpenAIResponsesModel("m", openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed"))
    agent = agents.Agent(name="weather", tools=agents_tools(session),
                         model=ForethoughtModel(model, session, speculate=speculate))
    start = time.perf_counter()
    result = await agents.Runner.run(agent, "Which city is warmest?")
    elapsed = time.perf_counter() - start
    outputs = [i.output for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)]
    await session.close()
    return elapsed, (result.final_output, outputs)


async def main() -> None:
    async with serve_scripted(SCRIPT) as url:
        serial_s, serial = await run(url, speculate=False)
        spec_s, spec = await run(url, speculate=True)
    assert spec == serial, "speculation changed the run"
    print(f"final output: {spec[0]} (the same in both runs)")
    print(f"serial {serial_s:.2f}s, speculative {spec_s:.2f}s, saved {1 - spec_s / serial_s:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
