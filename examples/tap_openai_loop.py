"""Keep your own openai SDK loop; wrap its stream with ``tap`` and likely calls start at step start.

A research agent on a scripted loopback model (``serve_scripted``): asked about a topic, the model searches
an archive, then reads three documents one after another (each names the next), then answers: two slow
tools (``search`` and ``fetch``, 0.5 s each) over four steps, the model thinking for half a second before
each call. The loop below is an ordinary Chat Completions tool loop on ``openai.AsyncOpenAI``; the only
change is ``tap(stream, session, messages=messages)`` around each stream and ``session.execute(call)`` for
each call. Given the conversation, the tap guesses the step's calls before the model has streamed them
(``Foresight``: the pattern predictor, learning from the conversations it has seen), so a right guess has
been running for the whole step by the time the model's own call claims it.

Three conversations warm the predictor up (each on a new topic with new document ids); then every round
runs a new topic three ways: direct (``speculate=False``), forethought, and with perfect prediction at step
start (the oracle), in one order and then the reverse. It prints the medians and checks that every run's
answers are identical (the task and the timing: ``research_task.py``, beside this file).

Run: ``.venv/bin/python examples/tap_openai_loop.py`` (about a minute, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
from research_task import compare, fetch, question, search

from forethought import Runtime
from forethought.integrations import Foresight, tap


async def conversation(url: str, topic: str, speculate: bool,
                       foresight: Foresight | None) -> tuple[float, list[Any]]:
    """Your loop, tapped: one conversation, its wall time and its transcript."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
    session = Runtime().session(tools=[search, fetch])
    messages: list[Any] = [{"role": "user", "content": question(topic)}]
    start = time.perf_counter()
    while True:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      tools=[search.openai_schema(), fetch.openai_schema()])
        tapped = tap(stream, session, speculate=speculate, messages=messages, predict=foresight or False)
        async for _chunk in tapped:  # your own handling of each chunk goes here, unchanged
            pass
        calls = tapped.tool_calls
        messages.append({"role": "assistant", "content": tapped.text or None, **({"tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in calls]}
            if calls else {})})
        if not calls:
            break
        for c in calls:  # in the model's order: guessed and early runs are claimed, not repeated
            result = await session.execute(c.call) if c.call else {"error": c.error}
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(result)})
    elapsed = time.perf_counter() - start
    await session.close()
    await client.close()
    return elapsed, [(m["role"], m.get("content")) for m in messages]  # call ids aside


if __name__ == "__main__":
    asyncio.run(compare(conversation))
