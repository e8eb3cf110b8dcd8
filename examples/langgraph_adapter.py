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
and then the reverse. It prints the medians and checks the runs are identical.

Run: ``.venv/bin/python examples/langgraph_adapter.py`` (about a minute, no network beyond 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

import openai
from langchain_core.messages import AIMessage, convert_to_openai_messages
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from forethought import Effect, Prediction, PredictionContext, Runtime, ToolCall, serve_scripted, tool
from forethought.integrations import Foresight, ForethoughtToolNode, tap

TOOL_S = 0.5
TOPICS = ["glaciers", "volcanoes", "tides", "comets", "monsoons", "auroras", "geysers", "fjords", "lagoons"]
ARCHIVE: dict[str, list[str]] = {t: [f"doc-{11 + 7 * n + k}{t[:2]}" for k in range(3)] for n, t in enumerate(TOPICS)}
NEXT = {doc: (docs[i + 1] if i + 1 < len(docs) else None) for docs in ARCHIVE.values() for i, doc in enumerate(docs)}
WARMUP, ROUNDS = 3, 2


@tool(effect=Effect.READ_ONLY)
async def search(query: str) -> dict[str, Any]:
    """Search the archive; the best hits first."""
    await asyncio.sleep(TOOL_S)
    return {"query": query, "hits": [{"id": d} for d in ARCHIVE.get(query, [])[:1]]}


@tool(effect=Effect.READ_ONLY)
async def fetch(id: str) -> dict[str, Any]:
    """Read one document of the archive."""
    await asyncio.sleep(TOOL_S)
    return {"id": id, "text": f"Document {id} reports what it saw.", "next": NEXT.get(id)}


def script(topic: str) -> dict[str, Any]:
    """What the scripted model says about ``topic``: four steps of thinking and one call each, then the answer."""
    calls = [("search", {"query": topic}), *(("fetch", {"id": d}) for d in ARCHIVE[topic])]
    steps = [{"text": "Thinking about where to look next. " * 2, "calls": [{"name": n, "arguments": a}]}
             for n, a in calls]
    return {"ttft_s": 0.1, "chunk_s": 0.02, "fragment_chars": 3,
            "responses": [*steps, {"text": f"The archive agrees on {topic}."}]}


class Oracle:
    """Perfect prediction at step start: the call the script makes next."""

    name = "oracle"

    def __init__(self, topic: str) -> None:
        responses = script(topic)["responses"]
        self.turns = [[ToolCall(c["name"], c["arguments"]) for c in r.get("calls", ())] for r in responses]

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        turn = sum(1 for m in context.messages if m.get("role") == "assistant")
        return [Prediction(c, 1.0, self.name) for c in self.turns[turn]] if turn < len(self.turns) else []

    def observe(self, context: Any, observed: Any) -> None:
        """Perfect already."""


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
    state = await graph.compile().ainvoke({"messages": [("user", f'What does the archive say about "{topic}"?')]})
    elapsed = time.perf_counter() - start
    await session.close()
    await client.close()
    return elapsed, [(type(m).__name__, str(m.content)) for m in state["messages"]]

async def main() -> None:
    foresight = Foresight()  # learns in memory here; Foresight.default() keeps it in your cache directory
    times: dict[str, list[float]] = {"direct": [], "forethought": [], "oracle": []}
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serve_scripted(script(t))) for t in TOPICS[: WARMUP + ROUNDS]]
        for n in range(WARMUP):  # the predictor learns (not timed)
            await conversation(urls[n], TOPICS[n], True, foresight)
        for r in range(ROUNDS):
            topic, url = TOPICS[WARMUP + r], urls[WARMUP + r]
            modes = {"direct": (False, None), "forethought": (True, foresight),
                     "oracle": (True, Foresight(with_patterns=False, speculators=[Oracle(topic)]))}
            transcripts = []
            for mode in (list(modes) if r % 2 == 0 else list(reversed(modes))):  # both orders
                seconds, transcript = await conversation(url, topic, *modes[mode])
                times[mode].append(seconds)
                transcripts.append(transcript)
            assert all(t == transcripts[0] for t in transcripts), "speculation changed the conversation"
    direct, ours, oracle = (statistics.median(times[m]) for m in ("direct", "forethought", "oracle"))
    print(f"medians over {ROUNDS} rounds, both orders, after {WARMUP} warm-up conversations (answers identical):")
    print(f"direct {direct:.2f}s, forethought {ours:.2f}s, oracle {oracle:.2f}s: forethought saved "
          f"{direct - ours:.2f}s, {(direct - ours) / (direct - oracle):.0%} of the oracle's {direct - oracle:.2f}s")


if __name__ == "__main__":
    asyncio.run(main())
