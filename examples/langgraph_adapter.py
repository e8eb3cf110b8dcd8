"""A LangGraph StateGraph with forethought: the model node's tapped stream starts likely calls at step start,
``ForethoughtToolNode`` claims them.

The model node streams Chat Completions from a scripted loopback model with the ``openai`` SDK and wraps the
stream in ``tap(stream, session, messages=messages)``: given the conversation, the tap guesses the step's
calls before the model streams them (``Foresight``: the pattern predictor, learning from the conversations
it has seen). ``ForethoughtToolNode(session)`` is LangGraph's own ``ToolNode`` over the session's tools,
built as LangChain's ``@tool`` builds them; each call goes through ``session.execute`` and claims the guess.

The task: asked about a topic, the agent searches an archive, then reads three documents one after another
(each names the next), then answers: two slow tools (``search`` and ``fetch``, 0.5 s each) over four steps,
the model thinking for half a second before each call. Three conversations warm the predictor up (each on a
new topic with new document ids); then every round runs a new topic three ways: direct
(``speculate=False``), forethought, and with perfect prediction at step start (the oracle), in one order
and then the reverse. It prints the medians and checks the runs are identical (the task and
the timing: ``research_task.py``, beside this file).

Run: ``.venv/bin/python examples/langgraph_adapter.py`` (about a minute, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
from langchain_core.messages import AIMessage, convert_to_openai_messages
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from research_task import compare, fetch, question, search

from forethought import Runtime
from forethought.integrations import Foresight, ForethoughtToolNode, tap


async def conversation(url: str, topic: str, speculate: bool,
                       foresight: Foresight | None) -> tuple[float, list[Any]]:
    """One run of the graph: its wall time and its messages."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
    session = Runtime().session(tools=[search, fetch])

    async def model(state: MessagesState) -> dict[str, Any]:
        messages: Any = convert_to_openai_messages(state["messages"])
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      tools=[search.openai_schema(), fetch.openai_schema()])
        tapped = tap(stream, session, speculate=speculate, messages=messages, predict=foresight or False)
        async for _chunk in tapped:
            pass
        calls = [{"name": c.name, "args": dict(c.call.arguments) if c.call else {}, "id": c.id}
                 for c in tapped.tool_calls]
        return {"messages": [AIMessage(content=tapped.text, tool_calls=calls)]}

    graph: Any = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ForethoughtToolNode(session))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    start = time.perf_counter()
    state = await graph.compile().ainvoke({"messages": [("user", question(topic))]})
    elapsed = time.perf_counter() - start
    await session.close()
    await client.close()
    return elapsed, [(type(m).__name__, str(m.content)) for m in state["messages"]]


if __name__ == "__main__":
    asyncio.run(compare(conversation))
