"""The agent loop with a scripted in-process model: one code path, serial and speculative equal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from forethought import Effect, Runtime, Tool, ToolCall, tool
from forethought.agent.loop import Agent
from forethought.errors import StreamDroppedError
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
)
from forethought.llm.fake import FakeLLMClient, FakeRequest, Script, scripted_message
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.sandbox.objects import ObjectState


def _steps_by_position(plan: Sequence[Sequence[ToolCall]]) -> Any:
    """A respond function: the n-th assistant message after the last user message is plan[n]."""

    def respond(request: FakeRequest) -> Script:
        last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
        step = sum(1 for m in request.messages[last_user:] if m["role"] == "assistant")
        if step < len(plan):
            return scripted_message("thinking...", plan[step])
        return scripted_message("All done.")

    return respond


class Log:
    def __init__(self) -> None:
        self.items: list[str] = []


def _kv_tools(log: Log) -> tuple[list[Tool], ObjectState]:
    state = ObjectState({"n": 0, "items": []})

    @tool(effect=Effect.READ_ONLY)
    async def read(key: str) -> str:
        log.items.append(f"run read {key}")
        await asyncio.sleep(0.01)
        return f"value-{key}"

    def add(target: Any, item: str) -> str:
        log.items.append(f"run add {item}")
        target["items"].append(item)
        target["n"] += 1
        return f"added {item} ({target['n']})"

    add_tool = Tool("add", add, parameters={"type": "object", "properties": {"item": {"type": "string"}},
                                            "required": ["item"]},
                    effect=Effect.ISOLATED_WRITE, state=state)

    @tool  # undeclared effect: DESTRUCTIVE
    def wipe() -> str:
        log.items.append("run wipe")
        return "wiped"

    return [read, add_tool, wipe], state


PLAN = [
    [ToolCall("read", {"key": "a"}), ToolCall("read", {"key": "b"})],
    [ToolCall("add", {"item": "x"})],
    [ToolCall("read", {"key": "c"}), ToolCall("add", {"item": "y"}), ToolCall("read", {"key": "d"})],
    [ToolCall("wipe", {})],
]


async def _run(speculate: bool, predictors: Sequence[Any] = ()) -> tuple[list[dict[str, Any]], Any, Agent]:
    log = Log()
    tools, state = _kv_tools(log)
    agent = Agent(FakeLLMClient(respond=_steps_by_position(PLAN)), "main", tools, Runtime(), speculate=speculate,
                  predictors=predictors)
    result = await agent.run([{"role": "user", "content": "go"}])
    await agent.close()
    return result.messages, state.live, agent


async def test_serial_and_speculative_transcripts_are_identical() -> None:
    serial, serial_state, _ = await _run(False)
    speculative, spec_state, _agent = await _run(True)
    assert serial == speculative
    assert serial_state == spec_state == {"n": 2, "items": ["x", "y"]}
    assert serial[-1]["content"] == "All done."


class OracleAndNoise:
    """A predictor that proposes the true next calls plus wrong ones (including a destructive call)."""

    name = "oracle"

    def __init__(self) -> None:
        self.observed: list[ObservedCall] = []

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        step = sum(1 for m in context.messages if m["role"] == "assistant")
        guesses = [Prediction(ToolCall("read", {"key": "zzz"}), 0.5, self.name),
                   Prediction(ToolCall("add", {"item": "wrong"}), 0.5, self.name),
                   Prediction(ToolCall("wipe", {}), 0.9, self.name),
                   Prediction(ToolCall("nope", {}), 0.9, self.name)]
        if step < len(PLAN):
            guesses += [Prediction(c, 0.9, self.name) for c in PLAN[step]]
        return guesses

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        self.observed.append(observed)


async def test_predictions_right_and_wrong_never_change_results() -> None:
    serial, serial_state, _ = await _run(False)
    oracle = OracleAndNoise()
    speculative, spec_state, agent = await _run(True, [oracle])
    assert serial == speculative
    assert serial_state == spec_state
    stats = agent.session.stats()
    assert stats.hits >= 3
    assert len(oracle.observed) == sum(len(step) for step in PLAN)


async def test_destructive_tool_never_runs_early() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    agent = Agent(FakeLLMClient(respond=_steps_by_position([[ToolCall("read", {"key": "a"})]])), "main", tools,
                  Runtime(), predictors=[OracleAndNoise()])
    await agent.run([{"role": "user", "content": "go"}])
    assert "run wipe" not in log.items  # proposed with high confidence, never executed
    await agent.close()


class OrderedFake(FakeLLMClient):
    """Logs when the message ends, so tests can order tool starts against it."""

    def __init__(self, log: Log, respond: Any) -> None:
        super().__init__(respond=respond)
        self.log = log

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        async for event in super().stream(model, messages, tools, **extra):
            if isinstance(event, MessageDone):
                self.log.items.append("message done")
            elif isinstance(event, ToolCallClosed):
                self.log.items.append(f"closed {event.index}")
            for _ in range(3):
                await asyncio.sleep(0)  # give dispatched work a chance to start, as a slow stream would
            yield event


async def test_early_dispatch_runs_reads_before_the_message_ends() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    agent = Agent(OrderedFake(log, _steps_by_position([PLAN[0]])), "main", tools, Runtime())
    await agent.run([{"role": "user", "content": "go"}])
    order = log.items
    assert order.index("run read a") < order.index("closed 1") < order.index("message done")
    assert order.index("run read b") < order.index("message done")
    await agent.close()


async def test_serial_mode_does_not_dispatch_early() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    agent = Agent(OrderedFake(log, _steps_by_position([PLAN[0]])), "main", tools, Runtime(), speculate=False)
    await agent.run([{"role": "user", "content": "go"}])
    first_done = log.items.index("message done")
    assert log.items.index("run read a") > first_done
    await agent.close()


async def test_reads_behind_an_unissued_write_wait_for_it() -> None:
    log = Log()
    tools, state = _kv_tools(log)
    agent = Agent(OrderedFake(log, _steps_by_position([PLAN[2]])), "main", tools, Runtime())
    result = await agent.run([{"role": "user", "content": "go"}])
    outputs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert outputs == ["value-c", "added y (1)", "value-d"]
    assert state.live == {"n": 1, "items": ["y"]}
    await agent.close()


def _malformed_then_done(request: FakeRequest) -> Script:
    if any(m["role"] == "tool" for m in request.messages):
        return scripted_message("ok")
    return (ToolCallStarted(0, "c0", "read"), ToolCallArgumentsDelta(0, '{"key": "a"'),
            ToolCallClosed(0, "c0", "read", None, '{"key": "a"', "read: arguments are cut off"),
            ToolCallStarted(1, "c1", "read"), ToolCallArgumentsDelta(1, '{"key": "b"}'),
            ToolCallClosed(1, "c1", "read", {"key": "b"}, '{"key": "b"}'), MessageDone("tool_calls"))


@pytest.mark.parametrize("speculate", [False, True])
async def test_malformed_arguments_become_a_tool_error_for_that_call_only(speculate: bool) -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    agent = Agent(FakeLLMClient(respond=_malformed_then_done), "main", tools, Runtime(), speculate=speculate)
    result = await agent.run([{"role": "user", "content": "go"}])
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert "cut off" in json.loads(tool_messages[0]["content"])["error"]
    assert tool_messages[1]["content"] == "value-b"
    assert result.messages[0]["tool_calls"][0]["function"]["arguments"] == '{"key": "a"'
    assert result.final_text == "ok"
    await agent.close()


async def test_unknown_tool_and_invalid_arguments_are_reported_to_the_model() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    plan = [[ToolCall("nope", {}), ToolCall("read", {"key": 3}), ToolCall("read", {"key": "ok"})]]
    agent = Agent(FakeLLMClient(respond=_steps_by_position(plan)), "main", tools, Runtime())
    result = await agent.run([{"role": "user", "content": "go"}])
    contents = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "unknown tool 'nope'" in contents[0]
    assert "expected string" in contents[1]
    assert contents[2] == "value-ok"
    await agent.close()


async def test_dropped_stream_is_a_typed_error_and_the_session_survives() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    scripts: list[Script] = [
        (TextDelta("let me"), ToolCallStarted(0, "c0", "read"), ToolCallArgumentsDelta(0, '{"key": "a"}'),
         ToolCallClosed(0, "c0", "read", {"key": "a"}, '{"key": "a"}'), StreamDroppedError("connection lost")),
        scripted_message("", [ToolCall("add", {"item": "z"})]),
        scripted_message("fine"),
    ]
    agent = Agent(FakeLLMClient(scripts), "main", tools, Runtime())
    with pytest.raises(StreamDroppedError):
        await agent.run([{"role": "user", "content": "go"}])
    assert agent.session.speculation_count() == 0
    result = await agent.run([{"role": "user", "content": "again"}])
    assert result.final_text == "fine"
    await agent.close()


async def test_step_timings_follow_the_steps() -> None:
    log = Log()
    tools, _ = _kv_tools(log)
    agent = Agent(FakeLLMClient(respond=_steps_by_position(PLAN)), "main", tools, Runtime())
    result = await agent.run([{"role": "user", "content": "go"}])
    assert [s.calls for s in result.steps] == [*[len(step) for step in PLAN], 0]
    assert [s.finish_reason for s in result.steps] == ["tool_calls"] * len(PLAN) + ["stop"]
    assert all(s.generation_s >= 0 and s.tool_wait_s >= 0 for s in result.steps)
    assert result.steps[0].early_dispatched == 2  # both reads of the first message went out early
    assert [r.outcome for r in result.tool_records][:2] == ["miss", "miss"]
    assert all(r.early for r in result.tool_records[:2])
    await agent.close()


class _FailingPredictor:
    """A predictor that raises in the middle of a step (after one good guess)."""

    name = "broken"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        raise self.exc

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        pass


async def _run_watched(predictors: list[Any]) -> tuple[Any, Any, list[Any]]:
    """A speculative run of PLAN with ``predictors``: its result, the tools' state and every telemetry event."""
    events: list[Any] = []
    tools, state = _kv_tools(Log())
    runtime = Runtime()
    runtime.telemetry.subscribe(events.append)
    agent = Agent(FakeLLMClient(respond=_steps_by_position(PLAN)), "main", tools, runtime, predictors=predictors)
    result = await agent.run([{"role": "user", "content": "go"}])
    await agent.close()
    return result, state, events


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyError("k"), ValueError("v"), ZeroDivisionError()])
async def test_a_failing_predictor_is_reported_and_ignored(exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    serial, serial_state, _ = await _run(False)
    with caplog.at_level("WARNING", logger="forethought.agent.loop"):
        result, state, events = await _run_watched([_FailingPredictor(exc)])
    assert result.messages == serial and state.live == serial_state
    failed = [e for e in events if e.kind.value == "predictor_failed"]
    assert len(failed) == len(PLAN) + 1  # every step (the last one answers in text)
    assert all(e.source == "broken" and e.detail == type(exc).__name__ for e in failed)
    warnings = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len(warnings) == len(PLAN) + 1


class _UnlearningPredictor(_FailingPredictor):
    """A predictor that predicts nothing and raises on every call it is taught."""

    name = "unlearning"

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        return []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        raise self.exc


@pytest.mark.parametrize("exc", [RuntimeError("boom"), OverflowError("int too large"), KeyError("k")])
async def test_a_predictor_failing_to_learn_loses_that_call_only(exc: Exception,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    serial, serial_state, _ = await _run(False)
    learner = OracleAndNoise()
    with caplog.at_level("WARNING"):
        result, state, events = await _run_watched([_UnlearningPredictor(exc), learner])
    assert result.messages == serial and state.live == serial_state
    calls = sum(len(step) for step in PLAN)
    assert len(learner.observed) == calls  # the predictor after the failing one still learnt every call
    failed = [e for e in events if e.kind.value == "predictor_failed"]
    assert len(failed) == calls and all(e.source == "unlearning" and e.detail == type(exc).__name__ for e in failed)
    assert len([r for r in caplog.records if "unlearning failed to learn" in r.getMessage()]) == calls


async def test_a_call_renamed_after_its_early_run_gets_its_own_tool_s_result() -> None:
    """A stream whose tool name grew after the call's arguments closed (the assembler closes it again at
    message end): before, the early run of the shorter name's tool was handed over as the call's result."""
    ran: list[str] = []

    @tool(effect=Effect.READ_ONLY)
    async def read(key: str) -> str:
        """Read one key."""
        ran.append("read")
        return f"one:{key}"

    @tool(effect=Effect.READ_ONLY)
    async def read_all(key: str) -> str:
        """Read every key from one on."""
        ran.append("read_all")
        return f"all:{key}"

    def respond(request: FakeRequest) -> Script:
        if any(m["role"] == "tool" for m in request.messages):
            return scripted_message("ok")
        return (ToolCallStarted(0, "c0", "read"), ToolCallArgumentsDelta(0, '{"key": "a"}'),
                ToolCallClosed(0, "c0", "read", {"key": "a"}, '{"key": "a"}'),
                ToolCallClosed(0, "c0", "read_all", {"key": "a"}, '{"key": "a"}'), MessageDone("tool_calls"))

    for speculate in (False, True):
        ran.clear()
        agent = Agent(FakeLLMClient(respond=respond), "main", [read, read_all], Runtime(), speculate=speculate)
        result = await agent.run([{"role": "user", "content": "go"}])
        assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["all:a"], speculate
        assert "read_all" in ran
        await agent.close()


async def test_a_call_renamed_to_a_write_after_later_reads_ran_early_runs_them_again() -> None:
    """Call 0 closes as a read (``note``) and runs early, so call 1 (``get``, a read) runs early too; then call
    0's name grows to ``note_set``, a write. Before (second review), call 1's early run, from before the write,
    was handed over: the model saw the value from before its own write."""
    value = {"v": "old"}

    @tool(effect=Effect.READ_ONLY)
    async def note(v: str) -> str:
        """Show a note."""
        return f"note:{v}"

    @tool(effect=Effect.DESTRUCTIVE)
    async def note_set(v: str) -> str:
        """Set the value."""
        value["v"] = v
        return "set"

    @tool(effect=Effect.READ_ONLY)
    async def get() -> str:
        """Read the value."""
        await asyncio.sleep(0)
        return value["v"]

    def respond(request: FakeRequest) -> Script:
        if any(m["role"] == "tool" for m in request.messages):
            return scripted_message("ok")
        return (ToolCallStarted(0, "c0", "note"), ToolCallClosed(0, "c0", "note", {"v": "new"}, '{"v": "new"}'),
                ToolCallStarted(1, "c1", "get"), ToolCallClosed(1, "c1", "get", {}, "{}"),
                ToolCallClosed(0, "c0", "note_set", {"v": "new"}, '{"v": "new"}'), MessageDone("tool_calls"))

    for speculate in (False, True):
        value["v"] = "old"
        agent = Agent(FakeLLMClient(respond=respond), "main", [note, note_set, get], Runtime(), speculate=speculate)
        result = await agent.run([{"role": "user", "content": "go"}])
        assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["set", "new"], speculate
        await agent.close()


async def test_a_hosted_call_that_writes_mid_stream_is_seen_by_every_read_of_the_message() -> None:
    """A hosted ``mcp_call`` (the API calls a remote MCP server, which writes what a session tool reads) runs
    while the message streams; a serial run reads after it. Before (second review), the agent ignored it: a
    read issued early before it, and a read guessed at the step's start, were served from before the write."""
    from forethought.llm.events import ClientItem

    value = {"v": "old"}

    @tool(effect=Effect.READ_ONLY)
    async def get() -> str:
        """Read the value."""
        return value["v"]

    class Hosted(FakeLLMClient):
        async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                         **extra: Any) -> AsyncIterator[LLMEvent]:
            async for event in super().stream(model, messages, tools, **extra):
                if isinstance(event, ClientItem):
                    await asyncio.sleep(0.01)  # the early read and the guess have run by now
                    value["v"] = "new"  # the remote server's write
                yield event

    class Always:
        name = "always"

        async def predict(self, context: PredictionContext) -> list[Prediction]:
            return [Prediction(ToolCall("get", {}), 0.95, self.name)]

        def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
            return None

    def respond(request: FakeRequest) -> Script:
        if any(m["role"] == "tool" for m in request.messages):
            return scripted_message("ok")
        return (ToolCallStarted(0, "c0", "get"), ToolCallClosed(0, "c0", "get", {}, "{}"), ClientItem("mcp_call"),
                ToolCallStarted(1, "c1", "get"), ToolCallClosed(1, "c1", "get", {}, "{}"), MessageDone("tool_calls"))

    for speculate, early in ((False, True), (True, True), (True, False)):  # guesses with and without early calls
        value["v"] = "old"
        agent = Agent(Hosted(respond=respond), "main", [get], Runtime(), speculate=speculate,
                      early_dispatch=early, predictors=[Always()] if speculate else [])
        result = await agent.run([{"role": "user", "content": "go"}])
        assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["new", "new"], (speculate, early)
        await agent.close()
