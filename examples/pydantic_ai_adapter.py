"""A pydantic-ai Agent with forethought: ``TappedModel`` starts likely calls at step start, the model's own
calls claim them through ``ForethoughtToolset``.

``ForethoughtToolset.of(session)`` offers the session's tools, built as pydantic-ai's ``Tool`` builds them,
and runs them through ``session.execute``; ``TappedModel`` wraps pydantic-ai's ``OpenAIChatModel``: at each
request it guesses the step's calls from the message history (``Foresight``: the pattern predictor,
learning from the conversations it has seen) and watches the stream.

The task, on a scripted loopback model: asked about a topic, the agent searches an archive, then reads
three documents one after another (each names the next), then answers: two slow tools (``search`` and
``fetch``, 0.5 s each) over four steps, the model thinking for half a second before each call. Three
conversations warm the predictor up (each on a new topic with new document ids); then every round runs a
new topic three ways: direct (``speculate=False``), forethought, and with perfect prediction at step start
(the oracle), in one order and then the reverse. It prints the medians and checks the runs are identical (the task and
the timing: ``research_task.py``, beside this file).

Run: ``.venv/bin/python examples/pydantic_ai_adapter.py`` (about a minute, no network beyond 127.0.0.1).
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
from research_task import compare, fetch, question, search

from forethought import Runtime
from forethought.integrations import Foresight, ForethoughtToolset, TappedModel


async def conversation(url: str, topic: str, speculate: bool,
                       foresight: Foresight | None) -> tuple[float, list[Any]]:
    """One run of the pydantic-ai Agent: its wall time, what the tools returned and the output."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
    session = Runtime().session(tools=[search, fetch])
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=speculate, predict=foresight or False)
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    start = time.perf_counter()
    result = await agent.run(question(topic))
    elapsed = time.perf_counter() - start
    await session.close()
    await client.close()
    returns = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    return elapsed, [("tool", r) for r in returns] + [("assistant", result.output)]


if __name__ == "__main__":
    asyncio.run(compare(conversation))
