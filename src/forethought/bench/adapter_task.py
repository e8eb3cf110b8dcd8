"""The adapters' benchmark task: a research agent with two slow tools over several steps, in many variants.

A user asks what an archive says about a quoted topic. The (scripted) model searches the archive for the
topic, then follows the documents one at a time: it fetches the first hit, and each fetched document
names the next one to read (``next``), three documents in all, then it answers. Two tools, ``search`` and
``fetch`` (READ_ONLY, ``tool_s`` each), four tool steps, one call per step; before each call the model
"thinks" (streams text) for ``think_s``. Every variant has its own topic and document ids, so a predictor
has to learn where arguments come from (the user's quoted topic, the first hit, the ``next`` field),
not the values themselves.

:func:`variants` gives the variants' scripts (served side by side by :func:`serve_variants`, each under
its own path prefix), :func:`task_tools` the tools (one archive for all variants), and
:class:`OraclePredictor` perfect prediction: at each step start, exactly the calls the script will make
(the benchmark's oracle arm).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Mount

from forethought._core.calls import ToolCall
from forethought._core.tools import Effect, Tool, tool
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

TOPICS = ("glaciers", "volcanoes", "tides", "comets", "monsoons", "coral reefs", "auroras", "deserts", "geysers",
          "lichens", "dunes", "fjords", "meteors", "salt flats", "rainforests", "caves", "icebergs", "tundra",
          "estuaries", "lagoons", "mangroves", "canyons", "atolls", "marshes", "savannas", "steppes", "moraines",
          "sinkholes", "waterfalls", "wetlands", "peat bogs", "basalt columns")
DOCUMENTS = 3
"""Documents the model reads in each variant (after the search)."""
ORACLE_SOURCE = "oracle"


@dataclass(frozen=True, slots=True)
class Variant:
    """One conversation of the task: its topic, the documents the model reads in order, its script."""

    topic: str
    documents: tuple[str, ...]
    script: Mapping[str, Any]

    @property
    def question(self) -> str:
        return f'What does the archive say about "{self.topic}"?'


def _thinking(step: int, seconds: float, chunk_s: float, fragment_chars: int) -> str:
    """Text whose streaming takes about ``seconds`` (what the model says before its call)."""
    chunks = max(1, round(seconds / chunk_s)) if chunk_s > 0 else 1
    base = f"Step {step}: reading on, the next document should settle it. "
    return (base * (1 + chunks * fragment_chars // len(base)))[: chunks * fragment_chars]


def variants(count: int, *, ttft_s: float = 0.1, chunk_s: float = 0.02, think_s: float = 0.5,
             fragment_chars: int = 6, seed: int = 7) -> list[Variant]:
    """``count`` variants with distinct topics and document ids (deterministic for ``seed``)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)] + ("" if n < len(TOPICS) else f" {n // len(TOPICS) + 1}")
        documents = tuple(f"doc-{rng.randrange(10_000, 99_999)}" for _ in range(DOCUMENTS))
        steps: list[dict[str, Any]] = [{"name": "search", "arguments": {"query": topic}},
                                       *({"name": "fetch", "arguments": {"id": d}} for d in documents)]
        responses = [{"text": _thinking(i, think_s, chunk_s, fragment_chars), "calls": [call]}
                     for i, call in enumerate(steps)]
        responses.append({"text": f"The archive's three documents on {topic} agree."})
        out.append(Variant(topic, documents, {"ttft_s": ttft_s, "chunk_s": chunk_s,
                                              "fragment_chars": fragment_chars, "responses": responses}))
    return out


def archive(of: Sequence[Variant]) -> tuple[dict[str, list[str]], dict[str, str | None]]:
    """What the tools answer from: the documents found for each topic, and each document's successor."""
    found: dict[str, list[str]] = {}
    successor: dict[str, str | None] = {}
    for variant in of:
        found[variant.topic] = [variant.documents[0], f"doc-{len(found):05d}"]
        for here, after in zip(variant.documents, (*variant.documents[1:], None), strict=True):
            successor[here] = after
    return found, successor


def task_tools(of: Sequence[Variant], tool_s: float) -> list[Tool]:
    """Fresh ``search`` and ``fetch`` tools over the archive of ``of`` (``tool_s`` seconds each)."""
    found, successor = archive(of)

    @tool(effect=Effect.READ_ONLY)
    async def search(query: str) -> dict[str, Any]:
        """Search the archive; the best hits first."""
        await asyncio.sleep(tool_s)
        return {"query": query, "hits": [{"id": d, "score": round(1.0 - i / 4, 2)}
                                         for i, d in enumerate(found.get(query, []))]}

    @tool(effect=Effect.READ_ONLY)
    async def fetch(id: str) -> dict[str, Any]:
        """Read one document of the archive."""
        await asyncio.sleep(tool_s)
        return {"id": id, "text": f"Document {id} reports what it saw.", "next": successor.get(id)}

    return [search, fetch]


@contextlib.asynccontextmanager
async def serve_variants(of: Sequence[Variant]) -> AsyncIterator[list[str]]:
    """Every variant's scripted model on one loopback server; yields each variant's base URL (add ``/v1``
    for the OpenAI SDK)."""
    app = Starlette(routes=[Mount(f"/variant{n}", app=create_scripted_server(parse_script(v.script)))
                            for n, v in enumerate(of)])
    async with serve_in_process(app) as url:
        yield [f"{url}/variant{n}" for n in range(len(of))]


class OraclePredictor:
    """Perfect prediction at step start: the calls the variant's script makes next (confidence 1)."""

    name = ORACLE_SOURCE

    def __init__(self, variant: Variant) -> None:
        self._calls = [[ToolCall(c["name"], c["arguments"]) for c in response.get("calls", ())]
                       for response in variant.script["responses"]]

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        turn = sum(1 for m in context.messages if m.get("role") == "assistant")
        calls = self._calls[turn] if turn < len(self._calls) else []
        return [Prediction(call, 1.0, ORACLE_SOURCE) for call in calls]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Perfect already."""
