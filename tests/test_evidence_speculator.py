"""Weighing sources together, the model speculator's votes: every finished sample is reported (failed,
malformed or cut-off ones are not votes), a step without samples forgets the last step's, and only
samples that said something are trials of its hit rate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from evidence_fakes import ScriptedClient, ctx
from forethought import ToolCall
from forethought.llm.events import MessageDone, ToolCallClosed
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.model import ModelSpeculator


async def test_the_speculator_reports_every_finished_sample_and_leaves_failed_ones_out() -> None:
    a, b = ToolCall("find", {"q": "x"}), ToolCall("read", {"id": "1"})
    speculator = ModelSpeculator(ScriptedClient([[a], RuntimeError("down"), [], [a, b]]), "m",
                                 samples=4)
    context = ctx("s1")
    assert speculator.votes("s1") is None
    got = [p.call async for p in speculator.predict_stream(context)]
    assert sorted(c.name for c in got) == ["find", "read"]
    votes = speculator.votes("s1")
    assert votes is not None
    assert sorted(len(s) for s in votes.samples) == [0, 1, 2]  # the failed sample is left out
    assert votes.alpha == speculator.confidence()
    assert speculator.votes("other session") is None


async def test_a_step_without_samples_forgets_the_last_steps_votes() -> None:
    speculator = ModelSpeculator(ScriptedClient([[ToolCall("find", {"q": "x"})]]), "m", samples=1)
    context = ctx("s1")
    _ = [p async for p in speculator.predict_stream(context)]
    assert speculator.votes("s1") is not None
    covered = PredictionContext("s1", context.messages, context.user_message, covered=1.0)
    _ = [p async for p in speculator.predict_stream(covered)]  # draws none
    assert speculator.votes("s1") is None
    # ... and the next call is not counted against the old samples
    speculator.observe(context, ObservedCall(ToolCall("read", {"id": "2"}), "x"))
    assert speculator.stats.sample_trials == 0


# --- found in review ---------------------------------------------------------------------------------

async def test_a_sample_whose_call_came_out_malformed_or_cut_off_is_not_a_vote() -> None:
    class Cut(ScriptedClient):
        async def stream(self, model: str, messages: Sequence[Mapping[str, Any]], tools: Any = None,
                         **extra: Any) -> AsyncIterator[Any]:
            yield ToolCallClosed(0, "c0", "find", None, '{"q": "x', error="cut off")
            yield MessageDone("length")

    speculator = ModelSpeculator(Cut([]), "m", samples=2)
    _ = [p async for p in speculator.predict_stream(ctx("s1"))]
    votes = speculator.votes("s1")
    assert votes is not None and votes.samples == ()
    speculator.observe(ctx("s1"), ObservedCall(ToolCall("find", {"q": "x"}), "id-x"))
    assert speculator.stats.sample_trials == 0  # nor a trial of its hit rate


async def test_samples_cut_off_by_the_steps_end_before_saying_anything_are_not_trials() -> None:
    class Slow(ScriptedClient):
        async def stream(self, model: str, messages: Sequence[Mapping[str, Any]], tools: Any = None,
                         **extra: Any) -> AsyncIterator[Any]:
            if extra["metadata"]["sample"] == "0":
                yield ToolCallClosed(0, "c0", "find", {"q": "x"}, '{"q": "x"}')
                yield MessageDone("tool_calls")
                return
            await asyncio.Event().wait()  # never answers
            yield MessageDone("stop")

    speculator = ModelSpeculator(Slow([]), "m", samples=3)
    stream = speculator.predict_stream(ctx("s1"))
    first = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]  # the step ended: the other two are cancelled
    assert first.call == ToolCall("find", {"q": "x"})
    speculator.observe(ctx("s1"), ObservedCall(ToolCall("find", {"q": "x"}), "id-x"))
    assert (speculator.stats.sample_trials, speculator.stats.sample_hits) == (1, 1)
