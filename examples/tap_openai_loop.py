"""Keep your own openai SDK loop; wrap its stream with ``tap`` and the calls start while the model streams.

A scripted model on loopback (``serve_scripted``, the same server ``forethought serve-model --script``
runs) streams one message with three slow lookups, then a final answer. The loop below is an ordinary
Chat Completions tool loop on ``openai.AsyncOpenAI``; the only change is ``tap(stream, session)`` around the
stream and ``session.execute(call)`` for each call. Run serially (``speculate=False``: the tap passes the
stream through) and with speculation, it prints both times and checks that the answers are identical.

Run: ``.venv/bin/python examples/tap_openai_loop.py`` (about 3 s, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai

from forethought import Effect, Runtime, serve_scripted, tool
from forethought.integrations import tap

TOOL_S = 0.4
SCRIPT = {"ttft_s": 0.1, "chunk_s": 0.02, "fragment_chars": 5, "responses": [
    {"text": "Looking up three cities.", "calls": [{"name": "lookup", "arguments": {"city": c}}
                                                   for c in ("Oslo", "Lima", "Cairo")]},
    {"text": "Oslo 24, Lima 24, Cairo 25."}]}


@tool(effect=Effect.READ_ONLY)
async def lookup(city: str) -> dict[str, Any]:
    """Temperature of a city (a slow backend)."""
    await asyncio.sleep(TOOL_S)
    return {"city": city, "celsius": 20 + len(city)}


async def chat_loop(client: openai.AsyncOpenAI, speculate: bool) -> list[dict[str, Any]]:
    session = Runtime().session(tools=[lookup])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo, Lima and Cairo?"}]
    while True:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      tools=[lookup.openai_schema()])
        tapped = tap(stream, session, speculate=speculate)
        async for _chunk in tapped:  # your own handling of each chunk goes here, unchanged
            pass
        calls = tapped.tool_calls
        messages.append({"role": "assistant", "content": tapped.text or None, **({"tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in calls]}
            if calls else {})})
        if not calls:
            await session.close()
            return messages
        for c in calls:  # serially, in the model's order: early runs are claimed, not repeated
            result = await session.execute(c.call) if c.call else {"error": c.error}
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(result)})


async def main() -> None:
    async with serve_scripted(SCRIPT) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
        timings, transcripts = {}, {}
        for speculate in (False, True):
            start = time.perf_counter()
            transcripts[speculate] = await chat_loop(client, speculate)
            timings[speculate] = time.perf_counter() - start
    strip = [{k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")} for m in transcripts[True]]
    assert strip == [{k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")}
                     for m in transcripts[False]], "speculation changed the conversation"
    print(f"answer: {transcripts[True][-1]['content']} (the same with and without the tap)")
    print(f"serial {timings[False]:.2f}s, tapped {timings[True]:.2f}s, saved {1 - timings[True] / timings[False]:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
