"""The task the adapter examples share: a research agent with two slow tools over four steps.

Asked about a topic, the agent searches an archive (``search``), then reads three documents one after
another (``fetch``: each names the next), then answers. Both tools are READ_ONLY and take 0.5 s; the
scripted loopback model (``serve_scripted``) thinks for half a second before each call. Every topic has
its own document ids, so a predictor has to learn where arguments come from, not the values.

:func:`compare` runs an example's ``conversation`` three ways on new topics, after three warm-up
conversations that teach the predictor (not timed): direct (``speculate=False``), forethought (guesses at
each step start from ``Foresight``), and perfect prediction at step start (the :class:`Oracle`), in one
order and then the reverse. It checks that every run gave the same results and prints the medians.

Run on its own, it prints one topic's script.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

from forethought import Effect, Prediction, PredictionContext, ToolCall, serve_scripted, tool
from forethought.integrations import Foresight

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


Conversation = Callable[[str, str, bool, "Foresight | None"], Awaitable[tuple[float, list[Any]]]]
"""One run of an example: (base URL, topic, speculate, foresight) -> (seconds, what the run produced)."""


def question(topic: str) -> str:
    return f'What does the archive say about "{topic}"?'


async def compare(conversation: Conversation) -> None:
    """Warm the predictor up, then time ``conversation`` direct, with forethought and with the oracle on new
    topics, in one order and the reverse; check the runs are identical and print the medians."""
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
    for step in script(TOPICS[0])["responses"]:
        print(step.get("calls") or step["text"])
