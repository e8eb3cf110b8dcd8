"""Narrowing a step's guesses by the model's streamed call: never rules out the call being streamed (any
prefix of its own arguments fits), rules out what the stream contradicts, and revives a priced-out guess
once its conditional chance makes it worth running."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import Gate, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.agent.feed import GuessFeed
from forethought.agent.narrowing import STREAM_SUFFIX, fits, parse_partial
from forethought.llm.events import ToolCallArgumentsDelta, ToolCallStarted
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.telemetry import EventKind

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False, width=32), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
arguments = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=5)


@given(arguments, st.data())
def test_any_prefix_of_a_calls_own_arguments_fits_it(args: dict[str, Any], data: st.DataObject) -> None:
    text = json.dumps(args, ensure_ascii=data.draw(st.booleans()))
    cut = data.draw(st.integers(0, len(text)))
    streamed = parse_partial(text[:cut])
    assert streamed is not None
    assert fits(args, streamed), (text[:cut], streamed)


@given(arguments, st.text(min_size=1, max_size=8), values, values)
def test_a_finished_value_that_differs_rules_a_guess_out(args: dict[str, Any], key: str, mine: Any,
                                                         theirs: Any) -> None:
    if mine == theirs:
        return
    guess = {**args, key: mine}
    streamed = {key: theirs, "next key": 1}  # a later key began: the first value is finished
    assert not fits(guess, streamed)


@pytest.mark.parametrize(("text", "fit"), [
    ('{"path": "/ho', True), ('{"path": "/tmp', False), ('{"path": "/home/a", "mode": "r', True),
    ('{"path": "/home/a", "mode": "w', False), ('{"path": "/home/b", "mode"', False),
    ('{"mode": 4', True),  # a number may still be growing: not judged
    ('{"unknown": "x", "path": "/', False), ('', True), ('{', True)])
def test_fits_by_hand(text: str, fit: bool) -> None:
    streamed = parse_partial(text)
    assert streamed is not None
    assert fits({"path": "/home/a", "mode": "r"}, streamed) is fit


@pytest.mark.parametrize("text", ['[1, 2', '"abc', '42', 'nonsense', '{"a": }'])
def test_text_that_is_not_an_object_prefix_is_not_judged(text: str) -> None:
    assert parse_partial(text) is None


# --- the feed ----------------------------------------------------------------------------------------

class Listed:
    name = "listed"

    def __init__(self, predictions: list[Prediction]) -> None:
        self.predictions = predictions

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        return self.predictions

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        pass


def tools(gate: Gate, ran: list[str]) -> list[Any]:
    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def find(q: str) -> str:
        ran.append(f"find {q}")
        await gate.wait()
        return f"id-{q}"

    @tool(effect=Effect.READ_ONLY, expected_s=1.0)
    async def read(id: str, lines: int = 10) -> str:
        ran.append(f"read {id}")
        await gate.wait()
        return f"body of {id}"

    return [find, read]


async def start(predictions: list[Prediction], policy: Policy | None = None) -> tuple[Any, GuessFeed, list[Any],
                                                                                    list[str], Gate]:
    gate, ran = Gate(), list[str]()
    # min_value_s 0.3: a guess needs P(hit) of 0.4 / 1.1 = 0.364 (1 s tool, unknown eta) to run.
    runtime = Runtime(tools(gate, ran), policy or Policy(backoff=False, min_value_s=0.3))
    session = runtime.session()
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    feed = GuessFeed(session, [Listed(predictions)])
    feed.start(PredictionContext(session.id, [{"role": "user", "content": "hi"}], "hi"))
    await spin(10)
    return session, feed, events, ran, gate


def guess(name: str, confidence: float, **arguments: Any) -> Prediction:
    return Prediction(ToolCall(name, arguments), confidence, "listed")


async def test_the_streamed_name_revives_a_priced_out_guess_of_that_tool() -> None:
    session, feed, events, ran, gate = await start(
        [guess("find", 0.5, q="x"), guess("read", 0.2, id="7"), guess("read", 0.05, id="8")])
    assert ran == ["find x"]  # read 7 and read 8 were priced out
    feed.streamed(ToolCallStarted(0, "c0", "read"))
    await spin(5)
    # total 0.75, read's mass 0.25: read 7 now at least 0.2 / (0.25 + 0.25) = 0.4 (runs), read 8 0.1 (out)
    launched = [e for e in events if e.kind is EventKind.LAUNCHED and e.source == "listed" + STREAM_SUFFIX]
    assert len(launched) == 1 and launched[0].confidence == pytest.approx(0.4)
    assert ran == ["find x", "read 7"]
    gate.open()
    assert (await session.execute_detailed(ToolCall("read", {"id": "7"}))).kind == "hit"
    feed.stop(0.5)
    await session.close()


async def test_streamed_arguments_narrow_further_and_rule_out_what_they_contradict() -> None:
    session, feed, _, ran, gate = await start(
        [guess("find", 0.5, q="x"), guess("read", 0.15, id="7"), guess("read", 0.15, id="8")])
    feed.streamed(ToolCallStarted(0, "c0", "read"))  # each 0.15 / (0.3 + 0.2) = 0.3: not yet
    feed.streamed(ToolCallArgumentsDelta(0, '{"id": '))
    await spin(5)
    assert ran == ["find x"]
    feed.streamed(ToolCallArgumentsDelta(0, '"8'))  # read 7 ruled out: read 8 now 0.15 / 0.35 = 0.43
    await spin(5)
    assert ran == ["find x", "read 8"]
    gate.open()
    assert (await session.execute_detailed(ToolCall("read", {"id": "8"}))).kind == "hit"
    feed.stop(0.5)
    await session.close()


async def test_a_guess_is_compared_as_the_tool_reads_it_too() -> None:
    session, feed, _, ran, gate = await start(
        [guess("find", 0.7, q="x"), guess("read", 0.1, id="8"), guess("read", 0.1, id="8", lines=5)])
    feed.streamed(ToolCallStarted(0, "c0", "read"))  # each 0.1 / (0.2 + 0.1) = 0.33: not yet
    await spin(5)
    assert ran == ["find x"]
    # The first guess left lines to its default (10): as the tool reads it, it fits; the other does not.
    feed.streamed(ToolCallArgumentsDelta(0, '{"lines": 10, "id": "8'))  # 0.1 / (0.1 + 0.1) = 0.5
    await spin(5)
    assert ran == ["find x", "read 8"]
    gate.open()
    assert (await session.execute_detailed(ToolCall("read", {"id": "8", "lines": 10}))).kind == "hit"
    feed.stop(0.5)
    await session.close()


async def test_a_guess_served_earlier_in_the_message_is_not_run_again_for_its_next_call() -> None:
    session, feed, _, ran, gate = await start(
        [guess("find", 0.5, q="x"), guess("read", 0.2, id="7"), guess("read", 0.2, id="8")])
    feed.streamed(ToolCallStarted(0, "c0", "read"))
    feed.streamed(ToolCallArgumentsDelta(0, '{"id": "7"}'))
    await spin(5)
    gate.open()
    assert (await session.execute_detailed(ToolCall("read", {"id": "7"}))).kind == "hit"
    feed.streamed(ToolCallStarted(1, "c1", "read"))  # the message's second call: read 7 is spent
    feed.streamed(ToolCallArgumentsDelta(1, '{"id": "'))
    await spin(5)
    assert sorted(ran) == ["find x", "read 7", "read 8"]  # read 8 revived; read 7 never ran twice
    feed.stop(0.5)
    await session.close()


async def test_guesses_of_tools_that_may_never_run_early_are_not_kept() -> None:
    gate, ran = Gate(), list[str]()

    @tool(expected_s=1.0)  # undeclared effect: DESTRUCTIVE
    async def wipe(path: str) -> str:
        ran.append("wipe")
        return path

    runtime = Runtime([*tools(gate, ran), wipe], Policy(backoff=False, min_value_s=0.3))
    session = runtime.session()
    feed = GuessFeed(session, [Listed([guess("find", 0.5, q="x"), guess("wipe", 0.2, path="/")])])
    feed.start(PredictionContext(session.id, [{"role": "user", "content": "hi"}], "hi"))
    await spin(10)
    rejected = session.stats().rejected
    feed.streamed(ToolCallStarted(0, "c0", "wipe"))
    feed.streamed(ToolCallArgumentsDelta(0, '{"path": "/'))
    assert session.stats().rejected == rejected and feed.narrowing.offered == 0
    gate.open()
    feed.stop(0.5)
    await session.close()


async def test_an_error_inside_narrowing_is_reported_and_never_reaches_the_agent() -> None:
    class Touchy(str):
        def __ne__(self, other: object) -> bool:
            raise RuntimeError("boom")

        __hash__ = str.__hash__

    session, feed, events, _, gate = await start([guess("find", 0.5, q="x"), guess("read", 0.15, id=Touchy("8"))])
    feed.streamed(ToolCallStarted(0, "c0", "read"))
    feed.streamed(ToolCallArgumentsDelta(0, '{"id": "8", "lines": 3'))  # compares the finished id: raises
    feed.streamed(ToolCallArgumentsDelta(0, "}"))  # narrowing is off for the step: nothing more happens
    failed = [e for e in events if e.kind is EventKind.PREDICTOR_FAILED]
    assert [(e.source, e.detail) for e in failed] == [("narrowing", "RuntimeError")]
    assert not feed.narrowing.active
    gate.open()
    feed.stop(0.5)
    await session.close()


@pytest.mark.parametrize("case", ["other tool", "combine off", "after stop", "unparseable text after the name",
                                  "same chance"])
async def test_nothing_is_revived_where_the_stream_says_nothing_new(case: str) -> None:
    predictions = [guess("find", 0.5, q="x"), guess("read", 0.2, id="7")]
    if case == "same chance":
        predictions = [guess("read", 0.2, id="7")]  # the only guess: the name adds nothing
    policy = Policy(backoff=False, min_value_s=0.3, combine_evidence=case != "combine off")
    session, feed, _, ran, gate = await start(predictions, policy)
    before = list(ran)
    if case == "after stop":
        feed.stop(0.5)
    other = case in ("other tool", "unparseable text after the name")
    feed.streamed(ToolCallStarted(0, "c0", "find" if other else "read"))
    if case == "unparseable text after the name":  # not judged, and nothing raises
        feed.streamed(ToolCallArgumentsDelta(0, '["not an object'))
        feed.streamed(ToolCallArgumentsDelta(0, '{"q": }'))
    await spin(5)
    assert ran == before
    gate.open()
    feed.stop(0.5)
    await session.close()


async def test_a_fragment_for_a_call_never_started_is_ignored() -> None:
    session, feed, _, ran, gate = await start([guess("find", 0.5, q="x"), guess("read", 0.2, id="7")])
    feed.streamed(ToolCallArgumentsDelta(3, '{"id": "7"'))
    await spin(5)
    assert ran == ["find x"]
    gate.open()
    feed.stop(0.5)
    await session.close()


# --- through the agent -------------------------------------------------------------------------------

async def test_the_agent_feeds_its_stream_to_narrowing_and_the_revived_guess_serves_the_call() -> None:
    from forethought.agent.loop import Agent
    from forethought.llm.fake import FakeLLMClient, scripted_message

    def agent_tools(ran: list[str]) -> list[Any]:
        @tool(effect=Effect.READ_ONLY, expected_s=1.0)
        async def find(q: str) -> str:
            ran.append(f"find {q}")
            return f"id-{q}"

        @tool(effect=Effect.READ_ONLY, expected_s=1.0)
        async def read(id: str) -> str:
            ran.append(f"read {id}")
            await asyncio.sleep(0.01)
            return f"body of {id}"

        return [find, read]

    predictions = [guess("find", 0.5, q="x"), guess("read", 0.2, id="7"), guess("read", 0.05, id="8")]
    results = {}
    for speculate in (False, True):
        ran: list[str] = []
        scripts = [scripted_message("", [ToolCall("read", {"id": "7"})]), scripted_message("done")]
        agent = Agent(FakeLLMClient(scripts), "main", agent_tools(ran),
                      Runtime(agent_tools(ran), Policy(backoff=False, min_value_s=0.3)), speculate=speculate,
                      predictors=[Listed(predictions)], early_dispatch=False)
        result = await agent.run([{"role": "user", "content": "go"}])
        await agent.close()
        results[speculate] = result
        if speculate:
            (record,) = result.tool_records
            assert record.outcome == "hit" and record.source == "listed" + STREAM_SUFFIX
            assert sorted(ran) == ["find x", "read 7"]  # read 8 stayed priced out; find x was wasted
    assert results[True].messages == results[False].messages


async def test_a_long_argument_streamed_a_character_at_a_time_is_parsed_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import forethought.agent.narrowing as narrowing

    parsed: list[int] = []
    real = narrowing.parse_partial

    def counting(text: str) -> Any:
        parsed.append(len(text))
        return real(text)

    monkeypatch.setattr(narrowing, "parse_partial", counting)
    session, feed, _, _ran, gate = await start([guess("find", 0.5, q="x"), guess("read", 0.2, id="7")])
    feed.streamed(ToolCallStarted(0, "c0", "read"))
    text = json.dumps({"id": "7" * 100_000})
    for ch in text:
        feed.streamed(ToolCallArgumentsDelta(0, ch))
    assert len(parsed) <= 2 + narrowing.MAX_TEXT // narrowing.EVERY + 8
    assert max(parsed) <= narrowing.MAX_TEXT
    assert sum(parsed) <= 70 * narrowing.MAX_TEXT  # linear, not quadratic, in what is read
    gate.open()
    feed.stop(0.5)
    await session.close()
