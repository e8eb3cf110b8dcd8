"""Fakes shared by the evidence tests (tests/test_evidence*.py, and tests/test_defer.py through
test_evidence): two gated reads, a cheap predictor with a fixed list, a sampling predictor with scripted
samples, a scripted LLM client for the model speculator, and one feed step over them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from conftest import Gate, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.agent.feed import GuessFeed
from forethought.llm.events import MessageDone, ToolCallClosed
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, SampleVotes

NO_BACKOFF = Policy(backoff=False)


def tools(gate: Gate, ran: list[str]) -> list[Any]:
    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def find(q: str) -> str:
        ran.append(f"find {q}")
        await gate.wait()
        return f"id-{q}"

    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def read(id: str) -> str:
        ran.append(f"read {id}")
        await gate.wait()
        return f"body of {id}"

    return [find, read]


class Listed:
    """A cheap predictor proposing a fixed list."""

    name = "listed"

    def __init__(self, predictions: Sequence[Prediction]) -> None:
        self.predictions = list(predictions)

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return self.predictions

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        pass


class Sampler:
    """A sampling predictor with scripted samples: each a list of calls (empty: a final answer)."""

    name = "model"

    def __init__(self, samples: Sequence[Sequence[ToolCall]], alpha: float = 0.7, confidence: float = 0.7,
                 failed: int = 0) -> None:
        self.samples = [list(s) for s in samples]
        self.alpha = alpha
        self.confidence = confidence
        self.failed = failed
        self.contexts: list[PredictionContext] = []

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [p async for p in self.predict_stream(context)]

    async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
        self.contexts.append(context)
        seen: set[str] = set()
        for calls in self.samples:
            for call in calls:
                if repr(call) not in seen:
                    seen.add(repr(call))
                    yield Prediction(call, self.confidence, self.name)

    def votes(self, session_id: str) -> SampleVotes | None:
        return SampleVotes(tuple(tuple(s) for s in self.samples), self.alpha)

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        pass


def ctx(session_id: str) -> PredictionContext:
    return PredictionContext(session_id, [{"role": "user", "content": "hi"}], "hi")


def guess(name: str, confidence: float, source: str = "listed", **arguments: Any) -> Prediction:
    return Prediction(ToolCall(name, arguments), confidence, source)


async def run_step(predictors: list[Any], policy: Policy = NO_BACKOFF) -> tuple[Runtime, Any, GuessFeed,
                                                                                  list[Any], list[str], Gate]:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), policy)
    session = runtime.session()
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    feed = GuessFeed(session, predictors)
    feed.start(ctx(session.id))
    await spin(20)
    return runtime, session, feed, events, ran, gate


class ScriptedClient:
    """An LLM client whose sample ``i`` (from the request metadata) streams ``script[i]``: calls, or an
    exception to raise."""

    def __init__(self, script: Sequence[Sequence[ToolCall] | Exception]) -> None:
        self.script = list(script)

    async def stream(self, model: str, messages: Sequence[Mapping[str, Any]], tools: Any = None,
                     **extra: Any) -> AsyncIterator[Any]:
        step = self.script[int(extra["metadata"]["sample"])]
        await asyncio.sleep(0)
        if isinstance(step, Exception):
            raise step
        for i, call in enumerate(step):
            yield ToolCallClosed(i, f"c{i}", call.name, dict(call.arguments), "{}")
        yield MessageDone("tool_calls" if step else "stop")
