"""The agent's guess feed: predictors run per step, priced by when the call is due, thinned under load,
hints warm their tool, speculated reads are chained past, and nothing of a finished step leaks on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from conftest import Gate, settle, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.agent.feed import CHAIN_SOURCE, GuessFeed
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.model import ModelSpeculator
from forethought.telemetry import EventKind
from forethought.testing import FixedPressure


class Listed:
    """A predictor that proposes a fixed list each step (and, with ``after``, what follows a call)."""

    name = "listed"

    def __init__(self, predictions: Sequence[Prediction],
                 after: Mapping[str, Sequence[Prediction]] | None = None, fail: bool = False) -> None:
        self.predictions = list(predictions)
        self.after = dict(after or {})
        self.fail = fail
        self.contexts: list[PredictionContext] = []
        self.chained_from: list[ObservedCall] = []

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        self.contexts.append(context)
        if self.fail:
            raise RuntimeError("broken predictor")
        return self.predictions

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        pass


class Chaining(Listed):
    def predict_after(self, context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
        self.chained_from.append(speculated)
        return list(self.after.get(speculated.call.name, ()))


def tools(ran: list[str], gate: Gate | None = None) -> list[Any]:
    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def find(q: str) -> str:
        ran.append(f"find {q}")
        return f"id-{q}"

    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def read(id: str) -> str:
        ran.append(f"read {id}")
        if gate is not None:
            await gate.wait()
        return f"body of {id}"

    @tool(effect=Effect.ISOLATED_WRITE, expected_s=1.0)
    async def note(text: str) -> str:
        return text

    warmed: list[Mapping[str, Any]] = []

    async def warm(known: Mapping[str, Any]) -> None:
        warmed.append(known)
        ran.append("warm")

    @tool(effect=Effect.READ_ONLY, expected_s=1.0, prepare=warm)
    async def send(to: str, body: str) -> str:
        return to

    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def boom() -> str:
        ran.append("boom")
        raise RuntimeError("backend down")

    return [find, read, note, send, boom]


def context(session_id: str) -> PredictionContext:
    return PredictionContext(session_id, [{"role": "user", "content": "hi"}], "hi")


def p(name: str, confidence: float = 0.9, executable: bool = True, **arguments: Any) -> Prediction:
    return Prediction(ToolCall(name, arguments), confidence, "listed", executable)


async def test_a_finished_read_is_chained_past_with_the_product_of_confidences() -> None:
    ran: list[str] = []
    runtime = Runtime(tools(ran))
    session = runtime.session()
    predictor = Chaining([p("find", 0.8, q="x")], after={"find": [p("read", 0.5, id="id-x")]})
    feed = GuessFeed(session, [predictor], chain_depth=1)
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    feed.start(context(session.id))
    await spin(10)
    await settle(session)
    assert ran == ["find x", "read id-x"]
    assert predictor.chained_from[0].output == "id-x" and predictor.chained_from[0].ok
    chained = [e for e in events if e.kind is EventKind.LAUNCHED and e.source == CHAIN_SOURCE]
    assert len(chained) == 1 and chained[0].confidence == pytest.approx(0.4)
    # The model then makes both calls: both are hits.
    assert (await session.execute_detailed(ToolCall("find", {"q": "x"}))).kind == "hit"
    assert (await session.execute_detailed(ToolCall("read", {"id": "id-x"}))).kind == "hit"
    feed.stop(0.5)
    await session.close()


@pytest.mark.parametrize("case", ["depth 0", "write parent", "parent failed", "step over", "not chaining"])
async def test_no_chain_where_it_cannot_help(case: str) -> None:
    ran: list[str] = []
    gate = Gate()
    runtime = Runtime(tools(ran, gate))
    session = runtime.session()
    parent = {"write parent": p("note", text="t"), "parent failed": p("boom")}.get(case, p("read", id="a"))
    cls = Listed if case == "not chaining" else Chaining
    predictor = cls([parent], after={"read": [p("find", q="next")], "note": [p("find", q="next")],
                                     "boom": [p("find", q="next")]})
    feed = GuessFeed(session, [predictor], chain_depth=0 if case == "depth 0" else 2)
    feed.start(context(session.id))
    await spin(10)
    if case == "step over":
        feed.stop(1.0)  # the model's message ended before the speculation finished
    gate.open()
    await settle(session)
    await spin(10)
    assert "find next" not in ran
    if case != "write parent":  # a write is never chained past (nor run early without a snapshot)
        assert ran[0] == ("boom" if case == "parent failed" else "read a")  # the parent itself did run
    await session.close()


async def test_eta_comes_from_measured_generation_and_prices_late_guesses() -> None:
    ran: list[str] = []
    runtime = Runtime(tools(ran), Policy(waste_weight=1.0))
    session = runtime.session()
    feed = GuessFeed(session, [Listed([p("find", 0.7, q="a")])])
    assert feed.eta_s() is None
    feed.start(context(session.id))
    await spin(5)
    feed.stop(0.0)  # the model answers at once: nothing can be hidden any more
    assert feed.generation_s == 0.0
    session.end_turn()
    feed.start(context(session.id))
    await spin(5)
    assert feed.eta_s() == 0.0
    assert runtime.stats().rejected >= 1  # a 0.7 guess that can hide nothing is not worth a wasted second
    feed.stop(2.0)
    assert feed.generation_s == pytest.approx(0.6)  # a moving average
    await session.close()


async def test_under_load_fewer_candidates_then_none_and_the_context_says_so() -> None:
    ran: list[str] = []
    pressure = FixedPressure(0.5)
    runtime = Runtime(tools(ran), Policy(waste_weight=0.0, backoff=True), pressure=pressure)
    session = runtime.session()
    predictor = Listed([p("find", 0.9, q=str(i)) for i in range(4)])
    feed = GuessFeed(session, [predictor])
    feed.start(context(session.id))
    await spin(10)
    await settle(session)
    assert sorted(ran) == ["find 0", "find 1"] and predictor.contexts[-1].load_level == 0.5
    feed.stop(1.0)
    session.end_turn()
    pressure.level = 1.0
    feed.start(context(session.id))
    await spin(10)
    assert len(ran) == 2
    feed.stop(1.0)
    await session.close()


async def test_a_hint_warms_its_tool_and_a_broken_predictor_is_reported_once() -> None:
    ran: list[str] = []
    runtime = Runtime(tools(ran))
    session = runtime.session()
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    feed = GuessFeed(session, [Listed([p("send", 0.9, executable=False, to="bob")]), Listed([], fail=True)])
    feed.start(context(session.id))
    await spin(10)
    await settle(session)
    assert ran == ["warm"]
    assert [e.kind for e in events].count(EventKind.PREDICTOR_FAILED) == 1
    assert not any(e.kind is EventKind.LAUNCHED for e in events)  # a hint never runs the call itself
    feed.stop()
    await session.close()


def test_the_speculator_draws_fewer_samples_under_load() -> None:
    speculator = ModelSpeculator(object(), "speculator", samples=4)  # type: ignore[arg-type]
    assert [speculator.samples_under(level) for level in (0.0, 0.3, 0.5, 0.99, 1.0)] == [4, 3, 2, 0, 0]
    assert [speculator.samples_under(0.0, covered) for covered in (0.0, 0.5, 0.8, 0.9, 1.0)] == [4, 2, 1, 0, 0]
    assert speculator.samples_under(0.5, 0.5) == 1


async def test_cancel_waits_for_the_predictors_to_stop() -> None:
    started = asyncio.Event()

    class Slow(Listed):
        async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
            started.set()
            await asyncio.sleep(3600)
            return []

    runtime = Runtime(tools([]))
    session = runtime.session()
    feed = GuessFeed(session, [Slow([])])
    feed.start(context(session.id))
    await started.wait()
    await feed.cancel()
    assert feed._tasks == []
    await session.close()


async def test_costly_predictors_start_after_the_cheap_ones_knowing_what_is_covered() -> None:
    order: list[str] = []

    class Streaming(Listed):
        name = "streaming"

        async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
            order.append("streaming")
            self.contexts.append(context)
            yield p("find", 0.5, q="s")

    class Cheap(Listed):
        async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
            order.append("cheap")
            return await super().predict(context)

    ran: list[str] = []
    runtime = Runtime(tools(ran))
    session = runtime.session()
    streaming = Streaming([])
    # The same call twice counts once; a rejected guess (unknown tool) counts not at all.
    cheap = Cheap([p("find", 0.6, q="a"), p("find", 0.6, q="a"), p("nope", 0.9), p("read", 0.2, id="b")])
    feed = GuessFeed(session, [streaming, cheap])
    feed.start(context(session.id))
    await spin(20)
    assert order == ["cheap", "streaming"]
    assert streaming.contexts[0].covered == pytest.approx(0.8)
    await settle(session)
    feed.stop(1.0)
    await session.close()
