"""LangGraph adapter: a real StateGraph (model node tapping the openai stream, ForethoughtToolNode) on loopback.

Serial (the tap passes the stream through, nothing starts early) and speculative runs of the same graph
give the same messages; in the speculative run the reads were claimed from the stream's early starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (forethought[integrations])")

import openai
from langchain_core.messages import AIMessage, convert_to_openai_messages
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from adapter_tools import lookup_and_note_session
from forethought import Session
from forethought.integrations import ForethoughtToolNode, tap
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.001, "fragment_chars": 6, "responses": [
    {"text": "Looking.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}},
                                   {"name": "lookup", "arguments": {"city": "Lima"}}]},
    {"text": "", "calls": [{"name": "note", "arguments": {"text": "both 24"}}, {"name": "nope", "arguments": {}}]},
    {"text": "Oslo and Lima are both 24."}]}


def _session() -> tuple[Session, list[str]]:
    return lookup_and_note_session()


def _graph(url: str, session: Session, speculate: bool) -> Any:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    schemas = [t.openai_schema() for t in session.tools.values()]

    async def model(state: MessagesState) -> dict[str, Any]:
        stream = await client.chat.completions.create(model="m", messages=convert_to_openai_messages(state["messages"]),
                                                      tools=schemas, stream=True)
        tapped = tap(stream, session, speculate=speculate)
        async for _ in tapped:
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


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


async def _run(url: str, speculate: bool) -> tuple[list[tuple[str, str]], list[str], Any]:
    session, ran = _session()
    state = await _graph(url, session, speculate).ainvoke({"messages": [("user", "Weather in Oslo and Lima?")]})
    stats = session.stats()
    await session.close()
    return [(type(m).__name__, str(m.content)) for m in state["messages"]], ran, stats


async def test_graph_serial_equals_speculative(server: str) -> None:
    serial, serial_ran, serial_stats = await _run(server, speculate=False)
    spec, ran, stats = await _run(server, speculate=True)
    assert spec == serial
    assert spec[-1] == ("AIMessage", "Oslo and Lima are both 24.")
    tool_messages = [text for kind, text in spec if kind == "ToolMessage"]
    assert tool_messages[:3] == ['{"city": "Oslo", "temp": 24}', '{"city": "Lima", "temp": 24}', "ok"]
    assert "nope" in tool_messages[3]  # an unknown tool is answered by the node, as LangGraph does
    assert sorted(ran) == sorted(serial_ran) and ran.count("note:both 24") == 1
    assert serial_stats.hits == 0 and stats.hits == 2
