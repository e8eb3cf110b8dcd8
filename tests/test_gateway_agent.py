"""The agent's engine-side mode: what it posts, how it reads continued streams, and equivalence with serial.

Scripted tests (FakeLLMClient, a recording poster) pin down the posting rule and the handling of served
results; the BFCL tests run real conversations over HTTP through the gateway in front of the simulated
engine and compare every transcript, tool output and final backend state with a serial run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from forethought import Effect, Policy, Runtime, Tool, ToolCall, tool
from forethought.agent.loop import Agent
from forethought.bench.engine_sim.model_server import ModelServer, SpeculatorConfig, TimingConfig
from forethought.bench.workloads.bfcl_workload import BfclWorkload
from forethought.errors import ForethoughtError
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    ResponseStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    ToolResultServed,
)
from forethought.llm.fake import FakeLLMClient, FakeRequest, Script, scripted_message
from forethought.llm.tool_cache import CACHE_PATH_HEADER, RESPONSE_ID_HEADER, TOKEN_HEADER, RecordingPoster
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.trajectory import Trajectory
from forethought.sandbox.objects import ObjectState
from forethought.serve.http import serve_in_process

HEADERS = {RESPONSE_ID_HEADER: "ftg-1", TOKEN_HEADER: "secret", CACHE_PATH_HEADER: "/cache-tool-output/ftg-1"}
STARTED = ResponseStarted("ftg-1", HEADERS, "http://gateway/v1/chat/completions")


def kv_tools() -> tuple[list[Tool], ObjectState]:
    state = ObjectState({"n": 0, "items": []})

    @tool(effect=Effect.READ_ONLY)
    async def read(key: str) -> str:
        return f"value-{key}"

    def add(target: Any, item: str) -> str:
        target["items"].append(item)
        target["n"] += 1
        return f"added {item} ({target['n']})"

    add_tool = Tool("add", add, parameters={"type": "object", "properties": {"item": {"type": "string"}},
                                            "required": ["item"]}, effect=Effect.ISOLATED_WRITE, state=state)

    @tool
    def wipe() -> str:
        return "wiped"

    return [read, add_tool, wipe], state


class Guess:
    """A predictor proposing fixed calls at every step."""

    name = "model"

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = calls

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(c, 0.9, self.name) for c in self.calls]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Nothing to learn."""


class SlowFake(FakeLLMClient):
    """Waits before the message ends, so finished speculations get posted meanwhile."""

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        async for event in super().stream(model, messages, tools, **extra):
            if isinstance(event, MessageDone):
                await asyncio.sleep(0.05)
            yield event


def call_events(call: ToolCall, call_id: str = "c0") -> list[LLMEvent]:
    raw = json.dumps(dict(call.arguments))
    return [ToolCallStarted(0, call_id, call.name), ToolCallArgumentsDelta(0, raw),
            ToolCallClosed(0, call_id, call.name, dict(call.arguments), raw)]


ADD_X = ToolCall("add", {"item": "x"})


async def test_finished_speculations_are_posted_with_the_right_rules() -> None:
    tools, _ = kv_tools()
    poster = RecordingPoster()
    fake = SlowFake([(STARTED, TextDelta("hmm"), MessageDone("stop"))])
    agent = Agent(fake, "main", tools, Runtime(), predictors=[Guess(ToolCall("read", {"key": "a"}), ADD_X,
                                                                    ToolCall("wipe", {}))],
                  engine_side=True, cache_poster=poster)
    await agent.run([{"role": "user", "content": "go"}])
    await agent.close()
    posted = {entries[0].name: (target, entries[0]) for target, entries in poster.posts}
    assert set(posted) == {"read", "add"}  # the destructive guess is never run, so never posted
    target, read = posted["read"]
    assert target.url == "http://gateway/cache-tool-output/ftg-1" and target.token == "secret"
    assert target.segment == 0
    assert read.output == "value-a" and read.params == {"key": "a"} and not read.exclusive
    assert read.keep_alive is not None and read.keep_alive > 0
    assert posted["add"][1].exclusive and posted["add"][1].output == "added x (1)"
    assert agent.engine_stats.posts == 2 and agent.engine_stats.entries_cached == 2
    assert not poster.closed  # a poster handed in is the caller's to close


def _served_script(output: str) -> Script:
    return (STARTED, TextDelta("thinking"), *call_events(ADD_X),
            ToolResultServed(0, "c0", "add", output, 1), TextDelta("All done."), MessageDone("stop"))


async def _serial_transcript() -> tuple[list[dict[str, Any]], Any]:
    tools, state = kv_tools()

    def respond(request: FakeRequest) -> Script:
        if any(m["role"] == "tool" for m in request.messages):
            return scripted_message("All done.")
        return (TextDelta("thinking"), *call_events(ADD_X), MessageDone("tool_calls"))

    agent = Agent(FakeLLMClient(respond=respond), "main", tools, Runtime(), speculate=False)
    result = await agent.run([{"role": "user", "content": "go"}])
    await agent.close()
    return result.messages, state.live


async def test_a_served_result_is_recorded_as_serial_would_and_its_snapshot_commits() -> None:
    serial, serial_state = await _serial_transcript()
    tools, state = kv_tools()
    fake = FakeLLMClient([_served_script("added x (1)")])
    agent = Agent(fake, "main", tools, Runtime(), predictors=[Guess(ADD_X)], engine_side=True,
                  cache_poster=RecordingPoster())
    result = await agent.run([{"role": "user", "content": "go"}])
    await agent.close()
    assert result.messages == serial
    assert state.live == serial_state == {"n": 1, "items": ["x"]}
    assert len(fake.requests) == 1  # one response carried both messages
    assert [s.finish_reason for s in result.steps] == ["tool_calls", "stop"]
    assert [r.outcome for r in result.tool_records] == ["hit"]
    assert agent.engine_stats.served_calls == 1 and agent.session.stats().committed == 1


async def test_a_served_result_that_the_session_would_not_give_is_a_clear_error() -> None:
    tools, _ = kv_tools()
    agent = Agent(FakeLLMClient([_served_script("added x (99)")]), "main", tools, Runtime(),
                  engine_side=True, cache_poster=RecordingPoster())
    with pytest.raises(ForethoughtError, match="engine-side result mismatch"):
        await agent.run([{"role": "user", "content": "go"}])
    await agent.close()


async def test_served_results_for_other_calls_are_an_upstream_error() -> None:
    tools, _ = kv_tools()
    script = (STARTED, *call_events(ADD_X), ToolResultServed(0, "other", "add", "x", 1), MessageDone("stop"))
    agent = Agent(FakeLLMClient([script]), "main", tools, Runtime(), engine_side=True,
                  cache_poster=RecordingPoster())
    with pytest.raises(ForethoughtError, match="served results for calls"):
        await agent.run([{"role": "user", "content": "go"}])
    await agent.close()


async def test_engine_side_without_the_gateway_is_a_clear_error() -> None:
    tools, _ = kv_tools()
    agent = Agent(FakeLLMClient([scripted_message("hi")]), "main", tools, Runtime(), engine_side=True,
                  cache_poster=RecordingPoster())
    with pytest.raises(ForethoughtError, match="needs forethought's gateway"):
        await agent.run([{"role": "user", "content": "go"}])
    await agent.close()


# --- BFCL over HTTP through the gateway ----------------------------------------------------------

WORKLOAD = BfclWorkload(count=0)
PICKED = ("multi_turn_base_13", "multi_turn_base_91", "multi_turn_base_115", "multi_turn_base_155")
FAST = TimingConfig(ttft_s=0.0, decode_tokens_per_s=5000.0, reasoning_tokens=2, time_scale=0.0)
HIT_WAIT_S = 1.0
"""With an instant engine a speculated result reaches the gateway after the call closed: the gateway waits."""


def trajectories(grouping: str = "step") -> list[Trajectory]:
    workload = WORKLOAD if grouping == "step" else BfclWorkload(count=0, grouping="turn")
    by_id = {t.id: t for t in workload.trajectories()}
    return [by_id[i] for i in PICKED]


async def converse(trajectory: Trajectory, client: Any, runtime: Runtime, **agent: Any) -> tuple[Any, ...]:
    tools = WORKLOAD.session_tools(trajectory, None)
    bot = Agent(client, "main", tools.tools, runtime, request_extra={"metadata": {
        "trajectory_id": trajectory.id, "conversation_id": f"{trajectory.id}/{agent.get('engine_side')}"}},
                **agent)
    messages: list[dict[str, Any]] = []
    records = []
    for turn in trajectory.turns:
        messages.append({"role": "user", "content": turn.user})
        result = await bot.run(messages)
        messages += result.messages
        records += result.tool_records
    stats = bot.session.stats()
    engine = bot.engine_stats
    await bot.close()
    return messages, [r.output for r in records], tools.fingerprint(), records, stats, engine.served_calls, engine.posts


async def run_pair(alpha: float, post_wait_s: float, grouping: str = "step",
                   early_dispatch: bool = True) -> list[tuple[Any, Any]]:
    picked = trajectories(grouping)
    engine = ModelServer(picked, FAST, SpeculatorConfig(alpha=alpha, timing=FAST))
    pairs = []
    async with serve_in_process(engine.app) as engine_url:
        gateway = Gateway(engine_url + "/v1", GatewayConfig(post_wait_s=post_wait_s))
        async with serve_in_process(gateway.app) as gateway_url:
            direct = OpenAIChatClient(engine_url + "/v1", max_retries=0)
            via = OpenAIChatClient.for_gateway(gateway_url + "/v1", max_retries=0)
            runtime = Runtime(policy=Policy(waste_weight=0.0))  # wrong guesses must still run: never priced out
            for trajectory in picked:
                serial = await converse(trajectory, direct, runtime, speculate=False)
                speculator = ModelSpeculator(direct, "speculator", samples=1)
                engine_side = await converse(trajectory, via, runtime, predictors=[speculator], engine_side=True,
                                             early_dispatch=early_dispatch)
                pairs.append((serial, engine_side))
            await direct.aclose()
            await via.aclose()
            runtime.close()
        await gateway.aclose()
    return pairs


async def test_engine_side_hits_continue_server_side_and_equal_serial_on_bfcl() -> None:
    pairs = await run_pair(alpha=1.0, post_wait_s=HIT_WAIT_S)
    for serial, engine_side in pairs:
        assert engine_side[:3] == serial[:3]  # transcript, tool outputs, final backend state
        records, stats, served = engine_side[3], engine_side[4], engine_side[5]
        assert served == len(records) > 0  # every call came back inside the response
        # the single-agent flow: every served write was claimed as a hit and its snapshot committed
        assert all(r.outcome == "hit" for r in records) and stats.committed == len(records)


async def test_wrong_guesses_are_posted_but_never_served_and_change_nothing() -> None:
    pairs = await run_pair(alpha=0.0, post_wait_s=0.02, early_dispatch=False)
    for serial, engine_side in pairs:
        assert engine_side[:3] == serial[:3]
        assert engine_side[5] == 0 and engine_side[6] > 0  # posted, never served


async def test_a_streamed_call_speculated_at_its_close_can_still_be_served() -> None:
    pairs = await run_pair(alpha=0.0, post_wait_s=HIT_WAIT_S)  # no right guess: only stream dispatch
    for serial, engine_side in pairs:
        assert engine_side[:3] == serial[:3]
        assert engine_side[5] == len(engine_side[3])


async def test_parallel_writes_in_one_message_are_never_served_and_stay_equivalent() -> None:
    pairs = await run_pair(alpha=1.0, post_wait_s=0.05, grouping="turn")
    multi = 0
    for serial, engine_side in pairs:
        assert engine_side[:3] == serial[:3]
        calls_per_message = [len(m.get("tool_calls") or ()) for m in serial[0] if m["role"] == "assistant"]
        multi += sum(1 for n in calls_per_message if n > 1)
        assert engine_side[5] == sum(n for n in calls_per_message if n == 1)  # exclusive: single calls only
    assert multi > 0
