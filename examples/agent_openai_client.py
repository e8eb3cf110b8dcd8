"""The forethought Agent on a client you already have (``openai.AsyncOpenAI``), with the text streamed to you.

A scripted model on loopback answers in three steps: three slow lookups, a note, then the answer. The
Agent takes the SDK client as it is (``api="responses"`` would use the Responses API on the same client;
an ``anthropic.AsyncAnthropic`` works too) and streams the model's text through ``agent.stream``. Serial
(``speculate=False``) and speculative runs print their times; the tool outputs are checked to be equal.

Run: ``.venv/bin/python examples/agent_openai_client.py`` (about 3 s, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai

from forethought import Agent, Effect, Runtime, serve_scripted, tool

SCRIPT = {"ttft_s": 0.1, "chunk_s": 0.02, "fragment_chars": 5, "responses": [
    {"text": "Looking up three cities. ", "calls": [{"name": "lookup", "arguments": {"city": c}}
                                                    for c in ("Oslo", "Lima", "Cairo")]},
    {"text": "Noting it. ", "calls": [{"name": "note", "arguments": {"text": "Cairo is warmest"}}]},
    {"text": "Oslo 24, Lima 24, Cairo 25."}]}
NOTES: list[str] = []


@tool(effect=Effect.READ_ONLY)
async def lookup(city: str) -> dict[str, Any]:
    """Temperature of a city (a slow backend)."""
    await asyncio.sleep(0.4)
    return {"city": city, "celsius": 20 + len(city)}


@tool  # no effect declared: DESTRUCTIVE, never run early
def note(text: str) -> str:
    """Keep a note."""
    NOTES.append(text)
    return "noted"


async def main() -> None:
    async with serve_scripted(SCRIPT) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
        outputs = {}
        for speculate in (False, True):
            agent = Agent(client, "m", [lookup, note], Runtime(), speculate=speculate)
            start = time.perf_counter()
            stream = agent.stream([{"role": "user", "content": "Weather in Oslo, Lima and Cairo?"}])
            async for text in stream:
                print(text, end="", flush=True)
            elapsed = time.perf_counter() - start
            outputs[speculate] = [r.output for r in stream.result.tool_records]
            print(f"\n  {'speculative' if speculate else 'serial'}: {elapsed:.2f}s")
            await agent.close()
    assert outputs[True] == outputs[False] and NOTES == ["Cairo is warmest"] * 2


if __name__ == "__main__":
    asyncio.run(main())
