"""The OpenAI Agents SDK's own Runner with forethought: likely calls start at step start, the model's own
calls claim them.

``agents_tools(session)`` builds the session's tools with the SDK's own ``function_tool`` (strict schemas,
its validation, its rendering of results and errors) and runs each call through ``session.execute``;
``ForethoughtModel`` wraps the SDK's ``OpenAIResponsesModel``: at each step start it guesses the step's
calls from the conversation the SDK sends (``Foresight``: the pattern predictor, learning from the
conversations it has seen) and taps the stream, so a right guess has been running for the whole step by
the time the model's call reaches the tool.

The task, on a scripted loopback model: asked about a topic, the agent searches an archive, then reads
three documents one after another (each names the next), then answers: two slow tools (``search`` and
``fetch``, 0.5 s each) over four steps, the model thinking for half a second before each call. Three
conversations warm the predictor up (each on a new topic with new document ids); then every round runs a
new topic three ways: direct (``speculate=False``), forethought, and with perfect prediction at step start
(the oracle), in one order and then the reverse. It prints the medians and checks the runs are identical (the task and
the timing: ``research_task.py``, beside this file).

Run: ``.venv/bin/python examples/openai_agents_adapter.py`` (about a minute, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import agents
import openai
from agents.models.openai_responses import OpenAIResponsesModel
from research_task import compare, fetch, question, search

from forethought import Runtime
from forethought.integrations import Foresight, ForethoughtModel, agents_tools

agents.set_tracing_disabled(True)  # nothing leaves 127.0.0.1


async def conversation(url: str, topic: str, speculate: bool,
                       foresight: Foresight | None) -> tuple[float, list[Any]]:
    """One run of the SDK's Runner: its wall time and what the tools returned, then the final output."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
    session = Runtime().session(tools=[search, fetch])
    model = ForethoughtModel(OpenAIResponsesModel("m", client), session, speculate=speculate,
                             predict=foresight or False)
    agent = agents.Agent(name="research", tools=agents_tools(session), model=model)
    start = time.perf_counter()
    result = await agents.Runner.run(agent, question(topic))
    elapsed = time.perf_counter() - start
    await session.close()
    await client.close()
    outputs = [i.output for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)]
    return elapsed, [("tool", o) for o in outputs] + [("assistant", result.final_output)]


if __name__ == "__main__":
    asyncio.run(compare(conversation))
