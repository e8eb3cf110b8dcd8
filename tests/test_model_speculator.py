"""The speculator-model predictor: lambda samples, provenance, token counting, adaptive lambda."""

from __future__ import annotations

from forethought import ToolCall
from forethought.llm.events import Usage
from forethought.llm.fake import FakeLLMClient, FakeRequest, Script, scripted_message
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.model import ModelSpeculator

TRUE = ToolCall("lookup", {"item": "a"})
WRONG = ToolCall("lookup", {"item": "zzz"})


def _context(session: str = "s") -> PredictionContext:
    return PredictionContext(session_id=session, messages=[{"role": "user", "content": "a"}], user_message="a",
                             request_extra={"metadata": {"trajectory_id": "t"}})


def _sample_answers(right_samples: set[str]) -> FakeLLMClient:
    def respond(request: FakeRequest) -> Script:
        sample = request.extra["metadata"]["sample"]
        call = TRUE if sample in right_samples else WRONG
        return scripted_message("", [call], usage=Usage(10, 5, 15))

    return FakeLLMClient(respond=respond)


async def test_samples_run_in_parallel_with_their_index_and_tokens_are_counted() -> None:
    client = _sample_answers({"1"})
    speculator = ModelSpeculator(client, "speculator", samples=3)
    predictions = await speculator.predict(_context())
    assert sorted(r.extra["metadata"]["sample"] for r in client.requests) == ["0", "1", "2"]
    assert all(r.extra["metadata"]["trajectory_id"] == "t" for r in client.requests)
    assert {p.call for p in predictions} == {TRUE, WRONG}  # duplicates proposed by two samples appear once
    assert all(p.source == "model" and 0 < p.confidence < 1 for p in predictions)
    assert speculator.stats.tokens == 45 and speculator.stats.samples == 3


async def test_adaptive_lambda_shrinks_when_samples_hit_and_grows_when_they_miss() -> None:
    hitting = ModelSpeculator(_sample_answers({"0", "1", "2", "3"}), "speculator", samples=3, adaptive=True,
                              max_samples=6)
    for _ in range(10):
        context = _context()
        await hitting.predict(context)
        hitting.observe(context, ObservedCall(TRUE, "value of a"))
    assert hitting.current_lambda() == 1

    missing = ModelSpeculator(_sample_answers({"0"}), "speculator", samples=3, adaptive=True, max_samples=6)
    for _ in range(10):
        context = _context()
        await missing.predict(context)
        missing.observe(context, ObservedCall(TRUE, "value of a"))
    assert missing.current_lambda() > 3
    assert missing.current_lambda() <= 6


async def test_a_failing_sample_is_counted_and_never_raises() -> None:
    def respond(request: FakeRequest) -> Script:
        if request.extra["metadata"]["sample"] == "0":
            return (RuntimeError("endpoint down"),)
        return scripted_message("", [TRUE])

    speculator = ModelSpeculator(FakeLLMClient(respond=respond), "speculator", samples=2)
    predictions = await speculator.predict(_context())
    assert [p.call for p in predictions] == [TRUE]
    assert speculator.stats.errors == 1
