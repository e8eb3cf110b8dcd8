"""The simulated engine over real HTTP: replay, errors, speculator stand-in, prefix cache, timing, counters."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from forethought import ToolCall
from forethought.bench.engine_sim.model_server import (
    ModelServer,
    SpeculatorConfig,
    TimingConfig,
    count_tokens,
    create_model_server,
)
from forethought.errors import UpstreamError, WorkloadError
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import LLMEvent, MessageDone, TextDelta, ToolCallClosed
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = (
    {"type": "function", "function": {"name": "cd", "parameters": {
        "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}},
    {"type": "function", "function": {"name": "grep", "parameters": {
        "type": "object", "properties": {"file": {"type": "string"}, "pattern": {"type": "string"},
                                         "max": {"type": "integer"}, "mode": {"enum": ["a", "b", "c"]}},
        "required": ["file", "pattern"]}}},
    {"type": "function", "function": {"name": "pwd", "parameters": {"type": "object", "properties": {}}}},
)
TURNS = (
    Turn("go to docs and search", (
        (ToolCall("cd", positional=("docs",)),),
        (ToolCall("grep", {"file": "a.md", "pattern": "x", "max": 3, "mode": "b"}),
         ToolCall("grep", {"file": "b.md", "pattern": "y"})),
    ), "Found it."),
    Turn("where am I?", ((ToolCall("pwd"),),), "In docs."),
)
TRAJECTORY = Trajectory("t-server", TURNS, TOOLS)
FAST = TimingConfig(ttft_s=0.0, decode_tokens_per_s=1000.0, reasoning_tokens=3, time_scale=0.0)


def server_with(alpha: float = 0.5, timing: TimingConfig = FAST, seed: int = 0) -> ModelServer:
    return ModelServer([TRAJECTORY], timing, SpeculatorConfig(alpha=alpha, timing=FAST, seed=seed))


@pytest.fixture
async def engine() -> AsyncIterator[tuple[ModelServer, str, OpenAIChatClient]]:
    server = server_with()
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        yield server, url, llm


async def message(llm: OpenAIChatClient, messages: list[dict[str, Any]], model: str = "main",
                  **metadata: str) -> tuple[str, list[ToolCallClosed], MessageDone]:
    events: list[LLMEvent] = [e async for e in llm.stream(model, messages, list(TOOLS),
                                                          metadata={"trajectory_id": TRAJECTORY.id, **metadata})]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    done = events[-1]
    assert isinstance(done, MessageDone)
    return text, [e for e in events if isinstance(e, ToolCallClosed)], done


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


async def replay(llm: OpenAIChatClient) -> list[tuple[str, list[ToolCall], str]]:
    """Play the whole trajectory as an agent would: (text, calls, finish) for every message."""
    messages: list[dict[str, Any]] = []
    out = []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn.user})
        while True:
            text, closed, done = await message(llm, messages)
            out.append((text, [ToolCall(c.name, c.arguments or {}) for c in closed], done.finish_reason))
            messages.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in closed]})
            if not closed:
                break
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in closed]
    return out


async def test_replays_every_step_and_answer_of_every_turn(engine: Any) -> None:
    _, _, llm = engine
    played = await replay(llm)
    expected = [
        [ToolCall("cd", {"folder": "docs"})],  # positional arguments named by the schema
        list(TURNS[0].steps[1]),
        [],
        [ToolCall("pwd", {})],
        [],
    ]
    assert [calls for _, calls, _ in played] == expected
    assert [finish for _, _, finish in played] == ["tool_calls", "tool_calls", "stop", "tool_calls", "stop"]
    assert played[2][0] == "Found it." and played[4][0] == "In docs."
    assert all(len(text.split()) == FAST.reasoning_tokens for text, calls, _ in played if calls)


async def test_same_request_gives_the_same_stream(engine: Any) -> None:
    _, _, llm = engine
    assert await replay(llm) == await replay(llm)


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"metadata": {"trajectory_id": "t-server"}, "messages": [{"role": "user", "content": "a"}] * 3}, 400,
     "position past the end"),
    ({"metadata": {"trajectory_id": "t-server"}, "messages": [{"role": "system", "content": "s"}]}, 400,
     "position past the end"),
    ({"messages": [{"role": "user", "content": "a"}]}, 400, "trajectory_id is required"),
    ({"metadata": {"trajectory_id": "zzz"}, "messages": [{"role": "user", "content": "a"}]}, 404,
     "unknown trajectory"),
    ({"metadata": {"trajectory_id": "t-server", "fault": "gremlins"},
      "messages": [{"role": "user", "content": "a"}]}, 400, "unknown fault"),
    ({"metadata": {"trajectory_id": "t-server"}, "n": 2, "messages": [{"role": "user", "content": "a"}]}, 400,
     "n > 1"),
    ({"metadata": {"trajectory_id": "t-server"}, "messages": "hello"}, 400, "messages must be a list"),
])
async def test_bad_requests_get_clear_4xx_errors(engine: Any, body: dict[str, Any], status: int,
                                                 fragment: str) -> None:
    server, url, _ = engine
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as raw:
        with pytest.raises(openai.APIStatusError) as info:
            await raw.chat.completions.create(model="main", messages=body.pop("messages"), extra_body=body)
    assert info.value.status_code == status
    assert fragment in info.value.message
    assert server.stats()["errors"] == 1 and server.stats()["requests"] == 0


async def test_position_past_the_end_through_the_client(engine: Any) -> None:
    _, _, llm = engine
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                      *([{"role": "assistant", "content": "x"}] * 2)]
    with pytest.raises(UpstreamError, match=r"400.*position past the end"):
        await message(llm, messages)


async def test_non_streaming_responses_hold_the_same_content(engine: Any) -> None:
    _, url, llm = engine
    messages = [{"role": "user", "content": TURNS[0].user}, {"role": "assistant", "content": "x"}]
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as raw:
        completion = await raw.chat.completions.create(model="main", messages=messages,
                                                       extra_body={"metadata": {"trajectory_id": TRAJECTORY.id}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    assert calls == [(c.name, dict(c.arguments)) for c in TURNS[0].steps[1]]
    text, closed, _ = await message(llm, messages)
    assert choice.message.content == text
    assert [c.id for c in choice.message.tool_calls or []] == [c.id for c in closed]
    assert completion.usage is not None and completion.usage.completion_tokens > 0


async def test_models_health_stats_and_reset(engine: Any) -> None:
    server, url, llm = engine
    models = await asyncio.to_thread(get_json, url + "/v1/models")
    assert [m["id"] for m in models["data"]] == ["main", "speculator"]
    assert (await asyncio.to_thread(get_json, url + "/health"))["status"] == "ok"
    await replay(llm)
    stats = await asyncio.to_thread(get_json, url + "/stats")
    assert stats["requests"] == stats["by_model"]["main"]["requests"] == 5
    assert 0 < stats["cached_tokens"] < stats["prompt_tokens"]
    assert stats["generated_tokens"] > 0
    request = urllib.request.Request(url + "/reset", method="POST")
    await asyncio.to_thread(urllib.request.urlopen, request)
    assert server.stats()["requests"] == 0


async def test_prefix_cache_counts_the_shared_prefix_of_a_conversation(engine: Any) -> None:
    _, _, llm = engine
    first = [{"role": "user", "content": TURNS[0].user}]
    _, _, done1 = await message(llm, first)
    assert done1.usage is not None and done1.usage.cached_tokens == 0
    second = [*first, {"role": "assistant", "content": "x" * 400}]
    _, _, done2 = await message(llm, second)
    assert done2.usage is not None
    assert done2.usage.cached_tokens >= done1.usage.prompt_tokens - 1
    assert done2.usage.prompt_tokens - done2.usage.cached_tokens >= count_tokens("x" * 400)
    # another conversation of the same trajectory has its own cache
    _, _, other = await message(llm, second, conversation_id="other")
    assert other.usage is not None and other.usage.cached_tokens == 0


# --- the speculator stand-in ---------------------------------------------------------------------


async def speculate(alpha: float, samples: range, seed: int = 0,
                    step: int = 1) -> list[tuple[list[ToolCall], str, str]]:
    server = server_with(alpha, seed=seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TURNS[0].user}]
    messages += [{"role": "assistant", "content": "x"}] * step
    out = []
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        for sample in samples:
            text, closed, done = await message(llm, messages, model="speculator", sample=str(sample))
            assert all(c.ok for c in closed)
            out.append(([ToolCall(c.name, c.arguments or {}) for c in closed], text, done.finish_reason))
    return out


async def test_speculator_with_alpha_one_proposes_the_true_calls() -> None:
    for calls, text, finish in await speculate(1.0, range(5)):
        assert calls == list(TURNS[0].steps[1])
        assert text == "" and finish == "tool_calls"


async def test_speculator_with_alpha_zero_proposes_only_wrong_calls() -> None:
    truth = list(TURNS[0].steps[1])
    results = await speculate(0.0, range(30))
    names = set()
    for calls, _, _ in results:
        assert len(calls) == len(truth)
        for guess, true in zip(calls, truth, strict=True):
            assert guess != true
            assert guess.name in {"cd", "grep", "pwd"}
            names.add(guess.name)
    assert "grep" in names and names - {"grep"}  # both kinds: same tool changed, other tool


async def test_speculator_is_deterministic_per_seed_and_varies_across_samples() -> None:
    first = await speculate(0.5, range(40))
    assert first == await speculate(0.5, range(40))
    truth = list(TURNS[0].steps[1])
    hits = sum(g == t for calls, _, _ in first for g, t in zip(calls, truth, strict=True))
    assert 0 < hits < 2 * len(first)
    assert first != await speculate(0.5, range(40), seed=1)


async def test_speculator_proposes_nothing_where_the_answer_is_due() -> None:
    for calls, text, finish in await speculate(1.0, range(2), step=2):
        assert calls == [] and text == "" and finish == "stop"


def test_positional_arguments_the_schema_cannot_name_are_rejected() -> None:
    bad = Trajectory("bad", (Turn("u", ((ToolCall("pwd", positional=("x",)),),)),), TOOLS)
    with pytest.raises(WorkloadError, match="positional"):
        ModelServer([bad])


def test_configs_reject_impossible_values() -> None:
    with pytest.raises(ValueError):
        TimingConfig(decode_tokens_per_s=0)
    with pytest.raises(ValueError):
        SpeculatorConfig(alpha=1.5)
    with pytest.raises(ValueError):
        ModelServer([], model="speculator")


# --- timing --------------------------------------------------------------------------------------


async def test_a_stream_takes_at_least_its_planned_time() -> None:
    timing = TimingConfig(ttft_s=0.05, prefill_s_per_token=0.001, decode_tokens_per_s=200.0, reasoning_tokens=10)
    server = server_with(timing=timing)
    messages = [{"role": "user", "content": TURNS[0].user}]
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        started = time.monotonic()
        _, _, done = await message(llm, messages)
        elapsed = time.monotonic() - started
    assert done.usage is not None
    planned = (timing.ttft_s + timing.prefill_s_per_token * done.usage.prompt_tokens
               + (done.usage.completion_tokens - 1) / timing.decode_tokens_per_s)
    assert elapsed >= planned * 0.95  # a lower bound only: pacing never runs ahead of the schedule


async def test_batch_slots_serialize_generation_and_are_freed_on_disconnect() -> None:
    timing = TimingConfig(ttft_s=0.02, decode_tokens_per_s=200.0, reasoning_tokens=40, max_concurrency=1)
    server = server_with(timing=timing)
    messages = [{"role": "user", "content": TURNS[0].user}]
    order: list[str] = []
    streaming = asyncio.Event()
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        async def run(name: str) -> None:
            async for event in llm.stream("main", messages, None, metadata={"trajectory_id": TRAJECTORY.id}):
                if isinstance(event, TextDelta | MessageDone):
                    order.append(f"{name}:{type(event).__name__}")
                    streaming.set()

        first = asyncio.create_task(run("a"))
        await streaming.wait()
        await asyncio.gather(first, run("b"))
        assert order.index("a:MessageDone") < order.index("b:TextDelta")
        full = server.stats()["generated_tokens"] // 2

        # a client that goes away stops its generation and frees its slot: the next request still completes
        abandoned: Any = llm.stream("main", messages, None, metadata={"trajectory_id": TRAJECTORY.id})
        async with contextlib.aclosing(abandoned):
            await anext(abandoned)
        _, closed, _ = await asyncio.wait_for(message(llm, messages), timeout=10)
        assert closed
    partial = server.stats()["generated_tokens"] - 3 * full
    assert 0 < partial < full


def test_create_model_server_returns_an_app() -> None:
    app = create_model_server([TRAJECTORY])
    assert callable(app)


async def test_serve_in_process_stops_listening_on_exit() -> None:
    async with serve_in_process(create_model_server([TRAJECTORY])) as url:
        assert (await asyncio.to_thread(get_json, url + "/health"))["trajectories"] == 1
    with pytest.raises(OSError):
        await asyncio.to_thread(get_json, url + "/health")


# --- scripted mode (forethought serve-model --script) ---------------------------------------------------------

SCRIPTED = {"ttft_s": 0.0, "chunk_s": 0.0, "responses": [
    {"text": "zero", "calls": [{"name": "cd", "arguments": {"folder": "docs"}}, {"name": "pwd", "arguments": {}}]},
    {"text": "one"}, {"text": "two"}]}


@contextlib.asynccontextmanager
async def _scripted(script: dict[str, Any], time_scale: float = 0.0) -> AsyncIterator[str]:
    from forethought.serve.scripted import create_scripted_server, parse_script

    async with serve_in_process(create_scripted_server(parse_script(script), time_scale)) as url:
        yield url


async def test_scripted_responses_follow_the_conversation_in_every_format() -> None:
    import anthropic

    async with _scripted(SCRIPTED) as url:
        chat = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
        for turns, text in ((0, "zero"), (1, "one"), (2, "two")):
            history: list[Any] = [{"role": "user", "content": "u"}]
            for _ in range(turns):
                history += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
            whole = await chat.chat.completions.create(model="m", messages=history)
            assert whole.choices[0].message.content == text
            message = await claude.messages.create(model="m", max_tokens=10, messages=history)
            assert message.content[0].type == "text" and message.content[0].text == text
        first = await chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "u"}])
        calls = first.choices[0].message.tool_calls or []
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("cd", {"folder": "docs"}), ("pwd", {})]
        assert first.choices[0].finish_reason == "tool_calls"
        items: list[Any] = [{"role": "user", "content": "u"},
                            {"type": "function_call", "call_id": "c", "name": "cd", "arguments": "{}"},
                            {"type": "function_call", "call_id": "d", "name": "pwd", "arguments": "{}"},
                            {"type": "function_call_output", "call_id": "c", "output": "x"}]
        response = await chat.responses.create(model="m", input=items)  # two calls in a row are one turn
        assert response.output[0].type == "message" and response.output[0].content[0].text == "one"
        response = await chat.responses.create(model="m", input=[*items, {"role": "assistant", "content": "a"},
                                                                   {"role": "user", "content": "u"}])
        assert response.output[0].content[0].text == "two"  # an answer after the tool outputs is the next turn
        await chat.close()
        await claude.close()


async def test_a_script_past_its_end_is_refused_unless_it_loops() -> None:
    history = [{"role": "user", "content": "u"}] + [{"role": "assistant", "content": "a"}] * 3
    async with _scripted(SCRIPTED) as url:
        chat = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="3 responses"):
            await chat.chat.completions.create(model="m", messages=history)
        await chat.close()
    async with _scripted({**SCRIPTED, "loop": True}) as url:
        chat = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        again = await chat.chat.completions.create(model="m", messages=history)
        assert again.choices[0].message.content == "zero"
        await chat.close()


async def test_scripted_streams_pace_each_piece() -> None:
    script = {"ttft_s": 0.0, "chunk_s": 0.05, "fragment_chars": 2, "responses": [{"text": "abcdef"}]}
    async with _scripted(script, time_scale=1.0) as url, OpenAIChatClient(url + "/v1", max_retries=0) as client:
        arrivals = []
        async for event in client.stream("m", [{"role": "user", "content": "u"}], None):
            if isinstance(event, TextDelta):
                arrivals.append((event.text, time.monotonic()))
        assert [t for t, _ in arrivals] == ["ab", "cd", "ef"]
        assert arrivals[-1][1] > arrivals[0][1]  # paced, not sent at once (an ordering, not a timing bound)
