"""The replay pinning and vLLM's counters without an engine: what each request asks, what a check accepts.

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

from forethought._calls import ToolCall
from forethought._trajectory import Trajectory, Turn
from forethought.engines.vllm.metrics import EngineCounters, parse
from forethought.engines.vllm.pin import (
    PinnedStep,
    Position,
    canonical,
    check_call,
    next_step,
    pin_body,
    pinned_schema,
    single_call_steps,
)
from forethought.engines.vllm.plugin import PREFIX, ToolCachePlugin
from forethought.errors import WorkloadError
from forethought.serve.gateway import CACHE_ROUTE

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
    assert [getattr(r, "path", None) for r in app.router.routes] == [CACHE_ROUTE, PREFIX]

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
