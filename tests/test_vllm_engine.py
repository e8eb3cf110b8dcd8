"""A real vLLM (CPU build, tiny random model built here) against forethought's client, agent, replay and plugin.

One server for the whole module (started by :class:`~forethought.bench.vllm.server.VllmServer` with the
endpoint plugin, stopped by its PID at the end). Skips, with the reason, where ``make vllm-venv`` could not
build the venv. What is checked against vLLM's real streams: tool-call fragments reassembled and closed
mid-stream, parallel calls by index, finish reasons, the usage chunk; BFCL trajectories replayed through the
replay proxy by the unchanged agent, call for call, with vLLM's own prefix-cache counters; and the plugin's
cache route inside vLLM (404/401/403, a posted result served and the response continued).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from forethought import Runtime, ToolCall
from forethought.agent.loop import Agent
from forethought.bench.runner import converse
from forethought.bench.vllm import metrics
from forethought.bench.vllm.pin import (
    PinnedStep,
    Position,
    call_token_budget,
    canonical,
    pin_body,
    pinned_schema,
)
from forethought.bench.vllm.replay import ReplayProxy
from forethought.bench.vllm.server import (
    MODEL_NAME,
    EngineUnavailable,
    VllmConfig,
    VllmServer,
    free_port,
    locate,
)
from forethought.bench.workloads.bfcl_workload import BfclWorkload
from forethought.engines.vllm.plugin import ENGINE_PREFIX, PREFIX, REPLAY_ENV, SESSION_PROBE_ENV, SESSION_ROUTE
from forethought.gateway.responses import RESULT_EVENT as RESPONSES_RESULT_EVENT
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import (
    MessageDone,
    ResponseStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    ToolResultServed,
)
from forethought.llm.responses import OpenAIResponsesClient, to_responses_tools
from forethought.llm.tool_cache import CACHE_CLIENT_HEADER, SEGMENT_HEADER, TOKEN_HEADER, CacheTarget
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

POST_WAIT_S = 3.0
"""The plugin's wait for posts: long enough for this test to post after the response started."""

REPLAY_PORT = free_port()
"""Where the engine chat test serves the replay proxy that pins the plugin's engine endpoint (told to vLLM at start)."""

try:
    CONFIG: VllmConfig | None = locate(VllmConfig(plugins=("forethought",), enforce_eager=True,
                                                  extra_args=("--enable-mfu-metrics",),
                                                  extra_env={"FORETHOUGHT_POST_WAIT_S": str(POST_WAIT_S),
                                                             SESSION_PROBE_ENV: "1", "VLLM_SERVER_DEV_MODE": "1",
                                                             REPLAY_ENV: f"http://127.0.0.1:{REPLAY_PORT}"}))
    REASON = ""
except EngineUnavailable as exc:
    CONFIG, REASON = None, str(exc)

pytestmark = pytest.mark.skipif(CONFIG is None, reason=REASON)

ORDER = {"type": "function", "function": {"name": "place_order", "description": "Place a stock order.",
                                          "parameters": {"type": "object", "properties": {
                                              "symbol": {"type": "string"}, "amount": {"type": "integer"},
                                              "price": {"type": "number"}}, "required": ["symbol"]}}}
ARGUMENTS = {"symbol": "NVDA", "amount": 100, "price": 220.5}


@pytest.fixture(scope="module")
def vllm() -> Iterator[VllmServer]:
    assert CONFIG is not None
    server = VllmServer(CONFIG).start()
    try:
        yield server
    finally:
        server.stop()


def _extra(body: dict[str, Any]) -> dict[str, Any]:
    """What OpenAIChatClient.stream sends besides model, messages, tools and the stream flags."""
    return {k: v for k, v in body.items() if k not in ("model", "messages", "tools", "stream", "stream_options")}


def _pinned(name: str, arguments: dict[str, Any], whitespace: list[int]) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": "Buy 100 NVDA at 220.5"}], "tools": [ORDER], "stream": True}
    return pin_body(body, PinnedStep(Position(0, 0), name, arguments, ""), MODEL_NAME, whitespace)


async def test_client_reassembles_a_pinned_call_from_vllm_fragments(vllm: VllmServer) -> None:
    body = _pinned("place_order", ARGUMENTS, vllm.meta["whitespace_token_ids"])
    async with OpenAIChatClient(vllm.base_url) as client:
        events = [e async for e in client.stream(MODEL_NAME, body["messages"], body["tools"], **_extra(body))]
    kinds = [type(e) for e in events]
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    closed = [e for e in events if isinstance(e, ToolCallClosed)]
    fragments = [e for e in events if isinstance(e, ToolCallArgumentsDelta)]
    done = events[-1]
    assert [(s.index, s.name) for s in started] == [(0, "place_order")]
    assert len(fragments) >= 3, "vLLM streams the arguments in several fragments"
    assert len(closed) == 1 and closed[0].error is None
    assert canonical(dict(closed[0].arguments or {})) == canonical(ARGUMENTS)
    assert "".join(f.text for f in fragments) == closed[0].raw
    assert kinds.index(ToolCallClosed) < kinds.index(MessageDone), "closed mid-stream, before the message ends"
    assert isinstance(done, MessageDone) and done.finish_reason == "stop"  # a named tool choice ends with stop
    assert done.usage is not None and done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0


async def test_client_reads_parallel_calls_and_a_length_finish(vllm: VllmServer) -> None:
    """``tool_choice: required`` with parallel calls keeps calling until ``max_tokens`` (a random model)."""
    tools = [{"type": "function", "function": {"name": name, "parameters": pinned_schema(args), "strict": True}}
             for name, args in (("cd", {"folder": "docs"}), ("ls", {"a": True}))]
    allowed = {"cd": canonical({"folder": "docs"}), "ls": canonical({"a": True})}
    extra = {"tool_choice": "required", "parallel_tool_calls": True, "temperature": 0.0, "max_tokens": 60,
             "logit_bias": {str(i): -100 for i in vllm.meta["whitespace_token_ids"]}}
    async with OpenAIChatClient(vllm.base_url) as client:
        events = [e async for e in client.stream(MODEL_NAME, [{"role": "user", "content": "go"}], tools, **extra)]
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    closed = [e for e in events if isinstance(e, ToolCallClosed)]
    assert [s.index for s in started] == list(range(len(started))) and len(started) >= 2
    assert len({s.id for s in started}) == len(started)
    for call in closed:
        if call.error is None:
            assert canonical(dict(call.arguments or {})) == allowed[call.name]
    assert sum(1 for c in closed if c.error is None) >= 2
    done = events[-1]
    assert isinstance(done, MessageDone) and done.finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 60 and done.usage.prompt_tokens > 0


def _responses_pinned(whitespace: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tools = [{"type": "function", "function": {"name": "place_order", "parameters": pinned_schema(ARGUMENTS),
                                               "strict": True}}]
    extra = {"tool_choice": {"type": "function", "name": "place_order"}, "parallel_tool_calls": False,
             "temperature": 0.0, "max_output_tokens": call_token_budget("place_order", ARGUMENTS),
             "logit_bias": {str(i): -100 for i in whitespace}}
    return tools, extra


async def test_responses_client_reads_a_pinned_call_from_vllm(vllm: VllmServer) -> None:
    """vLLM 0.32 serves ``/v1/responses`` with the hermes parser: the same call, fragments and usage."""
    tools, extra = _responses_pinned(vllm.meta["whitespace_token_ids"])
    messages = [{"role": "user", "content": "Buy 100 NVDA at 220.5"}]
    runs = []
    async with OpenAIResponsesClient(vllm.base_url) as client:
        for _ in range(2):
            runs.append([e async for e in client.stream(MODEL_NAME, messages, tools, **extra)])
    for events in runs:
        kinds = [type(e) for e in events]
        started = [e for e in events if isinstance(e, ToolCallStarted)]
        closed = [e for e in events if isinstance(e, ToolCallClosed)]
        fragments = [e for e in events if isinstance(e, ToolCallArgumentsDelta)]
        assert [(s.index, s.name) for s in started] == [(0, "place_order")]
        assert len(fragments) >= 3 and "".join(f.text for f in fragments) == closed[0].raw
        assert len(closed) == 1 and closed[0].error is None
        assert canonical(dict(closed[0].arguments or {})) == canonical(ARGUMENTS)
        assert kinds.index(ToolCallClosed) < kinds.index(MessageDone)
        done = events[-1]
        assert isinstance(done, MessageDone) and done.finish_reason == "tool_calls"
        assert done.response_id is not None and done.response_id.startswith("resp_")
        assert done.usage is not None and done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0
    second = runs[1][-1]
    assert isinstance(second, MessageDone) and second.usage is not None
    assert 0 < second.usage.cached_tokens <= second.usage.prompt_tokens, "the repeat finds its prompt cached"


async def test_responses_client_reads_parallel_calls_and_a_cut_off_as_length(vllm: VllmServer) -> None:
    """vLLM ends a response cut at ``max_output_tokens`` with ``response.completed`` (status incomplete)."""
    tools = [{"type": "function", "function": {"name": name, "parameters": pinned_schema(args), "strict": True}}
             for name, args in (("cd", {"folder": "docs"}), ("ls", {"a": True}))]
    allowed = {"cd": canonical({"folder": "docs"}), "ls": canonical({"a": True})}
    extra = {"tool_choice": "required", "parallel_tool_calls": True, "temperature": 0.0, "max_output_tokens": 60,
             "logit_bias": {str(i): -100 for i in vllm.meta["whitespace_token_ids"]}}
    async with OpenAIResponsesClient(vllm.base_url) as client:
        events = [e async for e in client.stream(MODEL_NAME, [{"role": "user", "content": "go"}], tools, **extra)]
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    closed = [e for e in events if isinstance(e, ToolCallClosed)]
    assert [s.index for s in started] == list(range(len(started))) and len(started) >= 2
    assert len({s.id for s in started}) == len(started)
    assert sum(1 for c in closed if c.error is None) >= 2
    for call in closed:
        if call.error is None:
            assert canonical(dict(call.arguments or {})) == allowed[call.name]
    done = events[-1]
    assert isinstance(done, MessageDone) and done.finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 60


async def test_responses_client_sends_a_tool_round_trip_and_reads_text(vllm: VllmServer) -> None:
    """The agent's transcript (assistant call + tool result) as Responses input items; vLLM answers text."""
    messages = [{"role": "system", "content": "You trade."}, {"role": "user", "content": "Buy 100 NVDA"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "place_order", "arguments": json.dumps(ARGUMENTS)}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "order 12446 placed"}]
    extra = {"tool_choice": "none", "temperature": 0.0, "max_output_tokens": 12, "ignore_eos": True}
    async with OpenAIResponsesClient(vllm.base_url) as client:
        events = [e async for e in client.stream(MODEL_NAME, messages, [ORDER], **extra)]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    done = events[-1]
    assert text and not any(isinstance(e, ToolCallStarted) for e in events)
    assert isinstance(done, MessageDone) and done.finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 12


def _trajectories(count: int) -> tuple[BfclWorkload, list[Trajectory]]:
    workload = BfclWorkload(count=count)
    return workload, [Trajectory(t.id, t.turns[:2], t.tools, t.domain, t.system, t.metadata)
                      for t in workload.trajectories()]


async def test_agent_replays_bfcl_trajectories_call_for_call_on_vllm(vllm: VllmServer) -> None:
    workload, trajectories = _trajectories(3)
    proxy = ReplayProxy(vllm.url, trajectories, vllm.meta["whitespace_token_ids"])
    runtime = Runtime()
    async with serve_in_process(proxy.app) as url, OpenAIChatClient(url + "/v1") as client:
        for trajectory in trajectories:
            session = workload.session_tools(trajectory, None)
            agent = Agent(client, "main", session.tools, runtime, speculate=False, session_id=trajectory.id,
                          request_extra={"metadata": {"trajectory_id": trajectory.id}})
            before = await metrics.read(vllm.url)
            run = await converse("serial", agent, trajectory, session.fingerprint)
            used = await metrics.read(vllm.url) - before
            assert run.error is None
            assert [(r.call.name, canonical(dict(r.call.arguments))) for r in run.records] == [
                (c.name, canonical(dict(c.arguments))) for c in proxy.trajectories[trajectory.id].calls]
            requests = sum(len(t.steps) + 1 for t in proxy.trajectories[trajectory.id].turns)
            assert used.requests == requests
            assert 0 < used.prompt_tokens_computed < used.prompt_tokens
            assert used.prompt_tokens_cached > used.prompt_tokens / 2, "later requests reuse the conversation prefix"
    runtime.close()
    await proxy.aclose()
    assert proxy.stats.mismatches == [] and proxy.stats.verified == sum(
        len(proxy.trajectories[t.id].calls) for t in trajectories)


async def test_plugin_cache_route_answers_like_the_gateway(vllm: VllmServer) -> None:
    async with httpx2.AsyncClient(timeout=30.0) as http:
        assert (await http.get(vllm.url + PREFIX + "/health")).status_code == 200
        unknown = await http.post(vllm.url + "/cache-tool-output/nope", json=[])
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "http_404"


async def test_plugin_serves_a_posted_result_and_continues_inside_vllm(vllm: VllmServer) -> None:
    """``tool_choice: required`` with one call: vLLM ends it with ``tool_calls``, which the relay continues.

    (A named tool choice ends with ``stop``, which the gateway does not continue; the replay proxy says
    ``tool_calls`` for it, see test_agent_replays_bfcl_trajectories_call_for_call_on_vllm.)
    """
    body = {**_pinned("place_order", ARGUMENTS, vllm.meta["whitespace_token_ids"]), "tool_choice": "required"}
    events: list[Any] = []
    async with OpenAIChatClient.for_gateway(vllm.url + PREFIX + "/v1") as client, \
            httpx2.AsyncClient(timeout=30.0) as http:
        stream = client.stream(MODEL_NAME, body["messages"], body["tools"], **{**_extra(body), "max_tokens": 120})
        async with contextlib.aclosing(stream) as events_in:
            async for event in events_in:
                events.append(event)
                if isinstance(event, ResponseStarted):
                    target = CacheTarget.from_response(event)
                    assert target is not None
                    missing = await http.post(target.url, json=[])
                    wrong = await http.post(target.url, json=[], headers={TOKEN_HEADER: "x" * 32})
                    assert (missing.status_code, wrong.status_code) == (401, 403)
                    entry = [{"name": "place_order", "params": ARGUMENTS, "output": "order 12446 placed"}]
                    posted = await http.post(target.url, json=entry, headers={TOKEN_HEADER: target.token})
                    assert posted.json() == {"cached": 1}
                if isinstance(event, ToolResultServed):
                    break
    served = [e for e in events if isinstance(e, ToolResultServed)]
    assert [(s.name, s.output) for s in served] == [("place_order", "order 12446 placed")]
    closed = [e for e in events if isinstance(e, ToolCallClosed)]
    assert canonical(dict(closed[0].arguments or {})) == canonical(ARGUMENTS)
    await asyncio.sleep(0)


def test_trajectory_with_no_argument_call_replays(vllm: VllmServer) -> None:
    """A call without arguments (``{}``) is pinned too: the grammar closes the object at once."""
    trajectory = Trajectory("noargs", (Turn("check", ((ToolCall("ls", {}),),), "ok"),), (
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}},))
    body = {"messages": [{"role": "user", "content": "check"}], "tools": list(trajectory.tools), "stream": True,
            "metadata": {"trajectory_id": "noargs"}}

    async def run() -> ReplayProxy:
        proxy = ReplayProxy(vllm.url, [trajectory], vllm.meta["whitespace_token_ids"])
        async with serve_in_process(proxy.app) as url, httpx2.AsyncClient(timeout=60.0) as http, \
                http.stream("POST", url + "/v1/chat/completions", json=body) as response:
            lines = [line async for line in response.aiter_lines() if line.startswith("data: {")]
        finish = [c["finish_reason"] for line in lines for c in json.loads(line[6:]).get("choices") or ()
                  if c.get("finish_reason")]
        assert finish == ["tool_calls"]
        await proxy.aclose()
        return proxy

    proxy = asyncio.run(run())
    assert proxy.stats.verified == 1 and proxy.stats.mismatches == []


async def test_a_streaming_input_session_continues_inside_the_engine_without_re_prefill(vllm: VllmServer) -> None:
    """Two turns of one conversation (a call, then the tool result appended) as one streaming-input request
    and as two fresh requests: the same tokens out, and less work scheduled for the session.

    vLLM's prompt counters record one prefill per request (the session's first chunk only; its end is an
    abort, not a success), so the work is compared on vLLM's FLOP estimate of the scheduled steps.
    """
    async with httpx2.AsyncClient(timeout=120.0) as http:
        async def tokenize(**body: Any) -> list[int]:
            answer = await http.post(vllm.url + "/tokenize", json={"model": MODEL_NAME, **body})
            answer.raise_for_status()
            return list(answer.json()["tokens"])

        first = await tokenize(messages=[{"role": "user", "content": "Buy 100 NVDA at 220.5"}], tools=[ORDER],
                               add_generation_prompt=True)
        suffix = await tokenize(prompt="<|im_end|>\n<|im_start|>user\n<tool_response>\norder 12446 placed\n"
                                       "</tool_response><|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        chunks = [{"token_ids": first, "max_tokens": 8}, {"token_ids": suffix, "max_tokens": 8}]
        used, outputs = {}, {}
        for mode in ("session", "fresh"):
            before = await metrics.read(vllm.url, http)
            answer = await http.post(vllm.url + SESSION_ROUTE, json={"mode": mode, "chunks": chunks,
                                                                     "cache_salt": f"{mode}-{id(chunks)}"})
            answer.raise_for_status()
            outputs[mode] = [c["token_ids"] for c in answer.json()["chunks"]]
            for _ in range(40):  # the counters land a little after the last token
                used[mode] = await metrics.read(vllm.url, http) - before
                if used[mode].generation_tokens >= 16:
                    break
                await asyncio.sleep(0.25)
    assert outputs["session"] == outputs["fresh"] and [len(o) for o in outputs["session"]] == [8, 8]
    assert used["session"].prompt_tokens == len(first) and used["session"].requests == 0
    assert used["fresh"].requests == 2 and used["fresh"].prompt_tokens == 2 * len(first) + 8 + len(suffix)
    assert used["fresh"].generation_tokens == used["session"].generation_tokens == 16
    assert 0 < used["session"].estimated_flops < used["fresh"].estimated_flops


async def test_plugin_relays_responses_serves_a_posted_result_and_continues_on_vllm(vllm: VllmServer) -> None:
    """The gateway's Responses relay (mounted by the plugin) on vLLM's real ``/v1/responses`` stream."""
    tools, extra = _responses_pinned(vllm.meta["whitespace_token_ids"])
    body = {"model": MODEL_NAME, "input": [{"role": "user", "content": "Buy 100 NVDA at 220.5"}], "stream": True,
            "tools": to_responses_tools(tools), **extra}
    events: list[dict[str, Any]] = []
    async with httpx2.AsyncClient(timeout=60.0) as http, http.stream(
            "POST", vllm.url + PREFIX + "/v1/responses", json=body, headers={CACHE_CLIENT_HEADER: "post"}) as response:
        assert response.status_code == 200
        target = CacheTarget.from_response(ResponseStarted(None, dict(response.headers), str(response.url)))
        assert target is not None
        entry = [{"name": "place_order", "params": ARGUMENTS, "output": "order 12446 placed"}]
        posted = await http.post(target.url, json=entry, headers={TOKEN_HEADER: target.token})
        assert posted.json() == {"cached": 1}
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: {")]
    kinds = [e["type"] for e in events]
    served = [e for e in events if e["type"] == RESPONSES_RESULT_EVENT]
    assert [(s["name"], s["output"], s["item"]["type"]) for s in served] == [
        ("place_order", "order 12446 placed", "function_call_output")]
    assert kinds[-1] == "response.completed" and kinds.count("response.created") == 1
    final = events[-1]["response"]
    calls = [i for i in final["output"] if i.get("type") == "function_call"]
    assert len(calls) == 2, "vLLM called again in the continuation (the same named tool choice)"
    assert served[0]["call_id"] == calls[0]["call_id"]
    assert all(canonical(json.loads(c["arguments"])) == canonical(ARGUMENTS) for c in calls)
    assert final["usage"]["input_tokens"] > 0 and final["usage"]["output_tokens"] > 0


CHAT_TOOLS = ({"type": "function", "function": {"name": "cd", "description": "Change directory.", "parameters": {
    "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}},
              {"type": "function", "function": {"name": "cat", "description": "Show a file.", "parameters": {
                  "type": "object", "properties": {"file_name": {"type": "string"}}, "required": ["file_name"]}}})
CHAT_TRAJECTORY = Trajectory("engine-chat", (Turn("Show me the notes in my todo file.", (
    (ToolCall("cd", {"folder": "notes"}),), (ToolCall("cat", {"file_name": "todo.txt"}),)),
    "Here is your todo list: buy milk."),), CHAT_TOOLS)
CHAT_OUTPUTS = {"cd": '{"current_working_directory": "notes"}', "cat": '{"file_content": "buy milk, call Ann"}'}


async def _transcript(client: OpenAIChatClient, post: bool) -> tuple[list[tuple[str, ...]], int]:
    """Calls, results and text as the client sees them; the plain loop runs the tools itself and asks again.
    With ``post`` each step's result is posted to the response's cache for the segment it belongs to (at the
    response's start, then when a result is served), as a speculator would. Returns the requests sent too."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": CHAT_TRAJECTORY.turns[0].user}]
    steps = CHAT_TRAJECTORY.turns[0].steps
    seen: list[tuple[str, ...]] = []
    requests = 0

    async def post_step(http: httpx2.AsyncClient, target: CacheTarget, segment: int) -> None:
        if segment < len(steps):
            entries = [{"name": c.name, "params": dict(c.arguments), "output": CHAT_OUTPUTS[c.name]}
                       for c in steps[segment]]
            posted = await http.post(target.url, json=entries, headers={
                TOKEN_HEADER: target.token, SEGMENT_HEADER: str(segment)})
            assert posted.json() == {"cached": len(entries)}

    async with httpx2.AsyncClient(timeout=30.0) as http:
        while True:
            requests += 1
            closed: list[ToolCallClosed] = []
            text: list[str] = []
            done: MessageDone | None = None
            target: CacheTarget | None = None
            async for event in client.stream(MODEL_NAME, messages, list(CHAT_TOOLS),
                                             metadata={"trajectory_id": CHAT_TRAJECTORY.id}):
                if isinstance(event, ResponseStarted) and post:
                    target = CacheTarget.from_response(event)
                    assert target is not None
                    await post_step(http, target, 0)
                elif isinstance(event, ToolCallClosed):
                    closed.append(event)
                    seen.append(("call", event.name, canonical(dict(event.arguments or {}))))
                elif isinstance(event, ToolResultServed):
                    seen.append(("result", event.name, event.output))
                    closed = []  # served: the message goes on inside the response
                    if target is not None:
                        await post_step(http, target, event.segment)
                elif isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, MessageDone):
                    done = event
            assert done is not None
            if text:
                seen.append(("text", "".join(text)))
            if done.finish_reason != "tool_calls":
                return seen, requests
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in closed]})
            for call in closed:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": CHAT_OUTPUTS[call.name]})
                seen.append(("result", call.name, CHAT_OUTPUTS[call.name]))


async def test_engine_chat_continues_inside_vllm_with_the_plain_loops_transcript(vllm: VllmServer) -> None:
    """The plugin's engine chat endpoint against the plain loop (each turn a new request) on the same vLLM,
    both pinned by forced tokens through one replay proxy, each arm with an empty prefix cache: the same
    transcript (calls, results, the answer's text), one request instead of three, and fewer prompt tokens
    computed by vLLM's counters (plus the tokens the endpoint appended, which vLLM's prompt counters skip)."""
    proxy = ReplayProxy(vllm.url, [CHAT_TRAJECTORY], vllm.meta["whitespace_token_ids"],
                        forced_eos_id=int(vllm.meta["eos_token_id"]))
    async with serve_in_process(proxy.app, port=REPLAY_PORT) as proxy_url, \
            httpx2.AsyncClient(timeout=30.0) as http:
        (await http.post(vllm.url + "/reset_prefix_cache")).raise_for_status()
        before = await metrics.read(vllm.url)
        async with OpenAIChatClient(proxy_url + "/v1") as client:
            plain, plain_requests = await _transcript(client, post=False)
        plain_used = await metrics.read(vllm.url) - before
        (await http.post(vllm.url + "/reset_prefix_cache")).raise_for_status()
        (await http.post(vllm.url + ENGINE_PREFIX + "/reset")).raise_for_status()
        before = await metrics.read(vllm.url)
        async with OpenAIChatClient.for_gateway(vllm.url + ENGINE_PREFIX + "/v1") as client:
            inside, inside_requests = await _transcript(client, post=True)
        inside_used = await metrics.read(vllm.url) - before
        stats = (await http.get(vllm.url + ENGINE_PREFIX + "/stats")).json()
        refused = await http.post(vllm.url + ENGINE_PREFIX + "/v1/chat/completions", json={
            "model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "metadata": {"trajectory_id": "unknown"}})
    await proxy.aclose()
    assert refused.status_code == 400 and "trajectory" in refused.json()["error"]["message"], "refused before streaming"
    assert [kind for kind, *_ in plain] == ["call", "result", "call", "result", "text"]
    assert inside == plain, "the client sees the plain loop's transcript, the model's own answer included"
    assert (plain_requests, inside_requests) == (3, 1)
    assert stats["continued_in_engine"] == 2 and stats["continued_fresh"] == 0 and stats["served_calls"] == 2
    assert proxy.stats.mismatches == [] and proxy.stats.verified == 4
    inside_computed = inside_used.prompt_tokens_computed + stats["appended_tokens"]
    assert 0 < stats["appended_tokens"] < inside_computed < plain_used.prompt_tokens_computed
    assert inside_used.generation_tokens == plain_used.generation_tokens
    assert 0 < inside_used.estimated_flops < plain_used.estimated_flops, "vLLM's own estimate sees less prefill"
