"""The replay pinning, the replay proxy and vLLM's counters without an engine (a fake one streams the calls).

Every pinned schema must admit exactly the recorded arguments (checked with a small JSON-schema evaluator of
the keywords the pinning uses), a check must reject any other call, answer steps must ask for their exact
length, and the metrics parser must read vLLM's real exposition names (a sample copied from vLLM 0.32).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from forethought import ToolCall
from forethought.bench.vllm.metrics import EngineCounters, parse
from forethought.bench.vllm.pin import (
    PinnedStep,
    Position,
    canonical,
    check_call,
    next_step,
    pin_body,
    pinned_schema,
    single_call_steps,
)
from forethought.bench.vllm.replay import ReplayProxy
from forethought.bench.vllm.server import EngineUnavailable, VllmConfig, locate, serve_command
from forethought.engines.vllm.plugin import ENGINE_CHAT_ROUTE, ENGINE_PREFIX, PREFIX, ToolCachePlugin
from forethought.errors import UpstreamError, WorkloadError
from forethought.gateway.app import CACHE_ROUTE
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import MessageDone, ToolCallClosed
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = ({"type": "function", "function": {"name": "cd", "parameters": {
    "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}},
         {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}})
TRAJECTORY = Trajectory("t1", (
    Turn("go to docs and list", ((ToolCall("cd", {"folder": "docs"}), ToolCall("ls", {})),), "Here it is."),
    Turn("again", ((ToolCall("ls", {}),),), "Same."),
), TOOLS)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
arguments = st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4)


def admits(schema: dict[str, Any], value: Any) -> bool:
    """The pinning's JSON-schema subset: type object, properties, required, additionalProperties, enum, const."""
    if "const" in schema and canonical(schema["const"]) != canonical(value):
        return False
    if "enum" in schema and not any(canonical(v) == canonical(value) for v in schema["enum"]):
        return False
    if schema.get("type") == "object":
        if not isinstance(value, dict):
            return False
        properties = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", ())):
            return False
        if schema.get("additionalProperties") is False and any(k not in properties for k in value):
            return False
        return all(admits(properties[k], v) for k, v in value.items() if k in properties)
    return True


@settings(max_examples=200, deadline=None)
@given(arguments, arguments)
def test_pinned_schema_admits_exactly_the_recorded_arguments(recorded: dict[str, Any], other: dict[str, Any]) -> None:
    schema = pinned_schema(recorded)
    assert admits(schema, json.loads(json.dumps(recorded)))
    if canonical(other) != canonical(recorded):
        assert not admits(schema, other)


@settings(max_examples=200, deadline=None)
@given(arguments, arguments)
def test_check_accepts_the_recorded_call_and_rejects_any_other(recorded: dict[str, Any], other: dict[str, Any]) -> None:
    step = PinnedStep(Position(0, 0), "f", recorded, "")
    check_call(step, [("f", json.dumps(recorded))], "here")
    if canonical(other) != canonical(recorded):
        with pytest.raises(WorkloadError, match="trajectory records"):
            check_call(step, [("f", json.dumps(other))], "here")
    with pytest.raises(WorkloadError):
        check_call(step, [("g", json.dumps(recorded))], "here")


def test_check_rejects_missing_extra_and_unparsable_calls() -> None:
    step = PinnedStep(Position(0, 0), "f", {"a": 1}, "")
    for calls in ([], [("f", '{"a": 1}'), ("f", '{"a": 1}')], [("f", '{"a": 1')]):
        with pytest.raises(WorkloadError):
            check_call(step, calls, "here")
    check_call(step, [("f", '{"a": 1.0}')], "here")  # the grammar may write a recorded 1 as 1.0, and back
    with pytest.raises(WorkloadError):
        check_call(step, [("f", '{"a": true}')], "here")  # but never as true
    with pytest.raises(WorkloadError, match="answer was due"):
        check_call(PinnedStep(Position(0, 1), None, None, "ok"), [("f", "{}")], "here")


def test_parallel_steps_become_single_call_steps_in_order() -> None:
    split = single_call_steps(TRAJECTORY)
    assert [len(s) for s in split.turns[0].steps] == [1, 1]
    assert [c.name for c in split.calls] == [c.name for c in TRAJECTORY.calls]
    with pytest.raises(WorkloadError, match="2 calls"):
        next_step(TRAJECTORY, [{"role": "user", "content": "go"}])


def test_next_step_follows_the_messages_and_refuses_past_the_end() -> None:
    split = single_call_steps(TRAJECTORY)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    assert next_step(split, messages).name == "cd"
    messages += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "x"}]
    assert next_step(split, messages).name == "ls"
    messages += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "y"}]
    answer = next_step(split, messages)
    assert answer.name is None and answer.answer == "Here it is."
    messages += [{"role": "assistant", "content": "z"}]
    with pytest.raises(WorkloadError, match="past its answer"):
        next_step(split, messages)
    with pytest.raises(WorkloadError, match="user message"):
        next_step(split, [])
    with pytest.raises(WorkloadError, match="past the trajectory"):
        next_step(split, [{"role": "user", "content": str(i)} for i in range(3)])


def test_call_request_pins_tool_choice_schema_and_whitespace_and_keeps_the_prompt_tools() -> None:
    body = {"messages": [{"role": "user", "content": "go"}], "tools": list(TOOLS), "stream": True,
            "metadata": {"trajectory_id": "t1"}}
    pinned = pin_body(body, next_step(single_call_steps(TRAJECTORY), body["messages"]), "tiny", [7, 9])
    assert pinned["tool_choice"] == {"type": "function", "function": {"name": "cd"}}
    assert pinned["tools"][0]["function"]["parameters"] == pinned_schema({"folder": "docs"})
    assert pinned["parallel_tool_calls"] is False and pinned["temperature"] == 0.0
    assert pinned["logit_bias"] == {"7": -100, "9": -100}
    assert pinned["chat_template_kwargs"]["prompt_tools"] == list(TOOLS)
    assert "metadata" not in pinned and pinned["stream_options"] == {"include_usage": True}


def test_answer_request_asks_for_exactly_the_answer_length_without_tools() -> None:
    body = {"messages": [{"role": "user", "content": "again"}] * 2, "tools": list(TOOLS), "stream": True}
    step = PinnedStep(Position(1, 1), None, None, "Same.")
    pinned = pin_body(body, step, "tiny", [], answer_tokens=3)
    assert (pinned["max_tokens"], pinned["min_tokens"], pinned["ignore_eos"]) == (3, 3, True)
    assert pinned["tool_choice"] == "none"
    with pytest.raises(WorkloadError):
        pin_body(body, step, "tiny", [], answer_tokens=0)


METRICS = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 316.0
vllm:prompt_tokens_created{engine="0",model_name="tiny"} 1.796121237885017e+09
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 188.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 128.0
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 128.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 130.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 316.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 128.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0
"""


def test_metrics_parse_vllm_names_and_subtract() -> None:
    counters = parse(METRICS)
    assert counters == EngineCounters(prompt_tokens=316, prompt_tokens_computed=188, prompt_tokens_cached=128,
                                      generation_tokens=130, prefix_cache_queries=316, prefix_cache_hits=128,
                                      requests=3)
    assert (counters - counters).as_dict() == dict.fromkeys(counters.as_dict(), 0)
    assert parse("") == EngineCounters()


class _Router:
    def __init__(self) -> None:
        self.routes: list[Any] = []


class _App:
    def __init__(self) -> None:
        self.router = _Router()


async def test_plugin_mounts_the_gateway_and_points_it_at_its_server() -> None:
    plugin = ToolCachePlugin(environ={})
    app = _App()
    plugin.attach_router(app)
    assert [getattr(r, "path", None) for r in app.router.routes] == [
        CACHE_ROUTE, ENGINE_CHAT_ROUTE, ENGINE_PREFIX + "/stats", ENGINE_PREFIX + "/reset", ENGINE_PREFIX, PREFIX]

    class State:
        pass

    class Args:
        host, port = "127.0.0.1", 8123

    state = State()
    await plugin.init_state(None, state, Args())  # type: ignore[arg-type]
    assert plugin.gateway.upstream == "http://127.0.0.1:8123/v1"
    assert state.forethought_gateway is plugin.gateway  # type: ignore[attr-defined]
    pinned = ToolCachePlugin(environ={"FORETHOUGHT_UPSTREAM": "http://127.0.0.1:9/v1",
                                      "FORETHOUGHT_POST_WAIT_S": "0.2"})
    await pinned.init_state(None, state, Args())  # type: ignore[arg-type]
    assert pinned.gateway.upstream == "http://127.0.0.1:9/v1" and pinned.gateway.config.post_wait_s == 0.2
    await plugin.gateway.aclose()
    await pinned.gateway.aclose()


def _fake_vllm(call: tuple[str, str] | None, seen: list[dict[str, Any]]) -> Starlette:
    """A stand-in for vLLM's chat endpoint: streams ``call`` (name, arguments) in 3-character fragments."""
    async def completions(request: Request) -> Response:
        seen.append(await request.json())

        async def body() -> Any:
            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                data = {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                return b"data: " + json.dumps(data).encode() + b"\n\n"
            yield chunk({"role": "assistant", "content": ""})
            if call is not None:
                name, text = call
                yield chunk({"tool_calls": [{"index": 0, "id": "t0", "type": "function", "function": {"name": name}}]})
                for i in range(0, len(text), 3):
                    yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[i:i + 3]}}]})
            else:
                yield chunk({"content": "fine"})
            yield chunk({}, "stop")
            yield b"data: [DONE]\n\n"
        return StreamingResponse(body(), media_type="text/event-stream")

    async def tokenize(request: Request) -> Response:
        return JSONResponse({"count": len((await request.json())["prompt"].split())})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/tokenize", tokenize, methods=["POST"])])


async def _through_proxy(call: tuple[str, str] | None, messages: list[dict[str, Any]]
                         ) -> tuple[list[Any], Exception | None, Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    async with serve_in_process(_fake_vllm(call, seen)) as engine_url:
        proxy = ReplayProxy(engine_url, [TRAJECTORY], [5])
        events: list[Any] = []
        error: Exception | None = None
        async with serve_in_process(proxy.app) as url, OpenAIChatClient(url + "/v1") as client:
            try:
                async for event in client.stream("main", messages, list(TOOLS), metadata={"trajectory_id": "t1"}):
                    events.append(event)
            except Exception as exc:
                error = exc
        await proxy.aclose()
    return events, error, proxy.stats, seen


async def test_proxy_fails_loudly_when_the_engine_emits_another_call() -> None:
    events, error, stats, _ = await _through_proxy(("cd", '{"folder": "tmp"}'), [{"role": "user", "content": "go"}])
    assert isinstance(error, UpstreamError) and "replay mismatch" in str(error) and '"docs"' in str(error)
    assert len(stats.mismatches) == 1 and stats.verified == 0
    assert not any(isinstance(e, MessageDone) for e in events), "a wrong call never ends as a normal message"


async def test_proxy_passes_the_recorded_call_as_a_tool_call_finish() -> None:
    events, error, stats, seen = await _through_proxy(("cd", '{"folder": "docs"}'),
                                                      [{"role": "user", "content": "go"}])
    assert error is None and stats.verified == 1
    assert [e.arguments for e in events if isinstance(e, ToolCallClosed)] == [{"folder": "docs"}]
    assert isinstance(events[-1], MessageDone) and events[-1].finish_reason == "tool_calls"
    assert seen[0]["tool_choice"] == {"type": "function", "function": {"name": "cd"}} and "metadata" not in seen[0]


async def test_proxy_asks_for_the_answer_length_in_engine_tokens() -> None:
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": []},
                {"role": "tool", "content": "x"}, {"role": "assistant", "tool_calls": []},
                {"role": "tool", "content": "y"}]
    _, error, stats, seen = await _through_proxy(None, messages)
    assert error is None and stats.answer_steps == 1
    assert seen[0]["max_tokens"] == seen[0]["min_tokens"] == 3  # "Here it is." in the fake engine's words


def test_a_missing_vllm_venv_is_reported_with_the_way_to_build_it(tmp_path: Any) -> None:
    with pytest.raises(EngineUnavailable, match="make vllm-venv"):
        locate(VllmConfig(venv=tmp_path / "absent"))
    argv = serve_command(VllmConfig(venv=tmp_path, enforce_eager=True), 8123)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert {"--enable-prefix-caching", "--enable-auto-tool-choice", "--enforce-eager"} <= set(argv)
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert argv[argv.index("--logits-processors") + 1] == "forethought.bench.vllm.forced:ForcedTokens"
    assert "--kv-cache-memory-bytes" not in argv
    small = serve_command(VllmConfig(venv=tmp_path, kv_cache_bytes=64 << 20), 8123)
    assert small[small.index("--kv-cache-memory-bytes") + 1] == str(64 << 20)
    from forethought.bench.vllm.server import _env  # vLLM's CPU platform lets this variable override the option
    assert _env(VllmConfig(venv=tmp_path))["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in _env(VllmConfig(venv=tmp_path, kv_cache_bytes=64 << 20))
