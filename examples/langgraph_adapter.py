"""A LangGraph StateGraph whose tool node runs through forethought, with the model node's stream tapped.

The model node streams Chat Completions from a scripted loopback model with the ``openai`` SDK and wraps
the stream in ``tap``; ``ForethoughtToolNode(session)`` replaces LangGraph's ``ToolNode`` and claims the
calls that already started. Serial (``speculate=False``) and speculative runs of the same graph print their
times; their messages are checked to be identical.

Run: ``.venv/bin/python examples/langgraph_adapter.py`` (a few seconds, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
from langchain_core.messages import AIMessage, convert_to_openai_messages
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from forethought import Effect, Runtime, Session, serve_scripted, tool
from forethought.integrations import ForethoughtToolNode, tap

REPORT = "Oslo 24 C, Lima 24 C, Cairo 25 C: Cairo is the warmest of the three cities today, Oslo and Lima tie."
SCRIPT = {"ttft_s": 0.1, "chunk_s": 0.02, "fragment_chars": 5, "responses": [
    {"text": "Looking up.", "calls": [*({"name": "lookup", "arguments": {"city": c}}
                                        for c in ("Oslo", "Lima", "Cairo")),
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


def build(client: openai.AsyncOpenAI, session: Session, speculate: bool) -> Any:
    async def model(state: MessagesState) -> dict[str, Any]:
        stream = await client.chat.completions.create(
            model="m", messages=convert_to_openai_messages(state["messages"]), stream=True,
            tools=[t.openai_schema() for t in session.tools.values()])
        tapped = tap(stream, session, speculate=speculate)
        async for _chunk in tapped:
            pass
        calls = [{"name": c.name, "args": dict(c.call.arguments) if c.call else {}, "id": c.id}
                 for c in tapped.tool_calls]
        return {"messages": [AIMessage(content=tapped.text, tool_calls=calls)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ForethoughtToolNode(session))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile()


async def main() -> None:
    async with serve_scripted(SCRIPT) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="not-needed")
        results = {}
        for speculate in (False, True):
            session = Runtime().session(tools=[lookup, note])
            start = time.perf_counter()
            state = await build(client, session, speculate).ainvoke({"messages": [("user", "Warmest city?")]})
            results[speculate] = (time.perf_counter() - start, [str(m.content) for m in state["messages"]])
            await session.close()
    assert results[True][1] == results[False][1], "speculation changed the conversation"
    serial_s, spec_s = results[False][0], results[True][0]
    print(f"answer: {results[True][1][-1]} (the same messages in both runs)")
    print(f"serial {serial_s:.2f}s, speculative {spec_s:.2f}s, saved {1 - spec_s / serial_s:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
