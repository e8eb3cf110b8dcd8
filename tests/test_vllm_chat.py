"""The plugin's engine chat endpoint and forced-token pinning, without vLLM (a fake engine answers /tokenize).

A continuation appended inside the engine must make the engine hold exactly the conversation a new request
would render, with the token the engine dropped at the stop sent again — and must be refused whenever the
rendered conversation does not extend what the engine holds. Forced pinning must offer the agent's own tools,
force the call's canonical tokens and end of message, render the prompt as grammar pinning does, and the
replay proxy's pin/check routes must count what they pin and fail loudly on a wrong call.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought import ToolCall
from forethought.bench.vllm.forced import FORCED_ARG, call_text, forced_ids, next_forced
from forethought.bench.vllm.pin import PinnedStep, Position, pin_body, pin_forced_body
from forethought.bench.vllm.replay import ReplayProxy
from forethought.engines.vllm.chat import EngineChat, ReplayPinner, continuation_chunk
from forethought.errors import WorkloadError
from forethought.gateway.app import Gateway
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = ({"type": "function", "function": {"name": "cd", "parameters": {
    "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}},
         {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}})
TRAJECTORY = Trajectory("t1", (Turn("go to docs and list", ((ToolCall("cd", {"folder": "docs"}),),
                                                             (ToolCall("ls", {}),)), "Here it is."),), TOOLS)
EOS = 2
tokens = st.lists(st.integers(0, 50), min_size=1, max_size=30)


@given(tokens, tokens)
def test_a_continuation_sends_what_the_engine_lacks_headed_by_the_dropped_token(held: list[int],
                                                                                more: list[int]) -> None:
    chunk = continuation_chunk(held, held + more)
    assert chunk == [held[-1], *more]
    # the engine keeps held[:-1] (it drops the last sampled token); with the chunk it holds the whole prompt
    assert held[:-1] + (chunk or []) == held + more


@given(tokens, tokens, st.integers(0, 29))
def test_a_continuation_is_refused_unless_the_prompt_extends_what_the_engine_holds(
        held: list[int], more: list[int], at: int) -> None:
    prompt = held + more
    at %= len(held)
    changed = [*prompt[:at], prompt[at] + 1, *prompt[at + 1:]]  # differs inside what the engine holds
    assert continuation_chunk(held, changed) is None
    assert continuation_chunk(held, held) is None, "nothing to append: the engine would have nothing to prefill"
    assert continuation_chunk(held, held[:-1]) is None
    assert continuation_chunk([], more) is None


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.text(max_size=5) | st.booleans(),
                       max_size=4))
def test_call_text_is_the_hermes_form_with_json_dumps_arguments(arguments: dict[str, Any]) -> None:
    text = call_text("cd", arguments)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    inner = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    assert inner == {"name": "cd", "arguments": arguments}
    assert json.dumps(arguments, ensure_ascii=False) in text, "the arguments as vLLM's parser streams them"


def test_forced_tokens_run_out_and_only_a_list_of_ids_forces() -> None:
    class Params:
        def __init__(self, extra: Any) -> None:
            self.extra_args = extra

    assert forced_ids(Params({FORCED_ARG: [5, "6", 7]})) == (5, 6, 7)
    assert forced_ids(Params({FORCED_ARG: []})) is None
    assert forced_ids(Params(None)) is None and forced_ids(Params({"other": [1]})) is None
    assert [next_forced((5, 6), out) for out in ([], [5], [5, 6], [5, 6, 9])] == [5, 6, None, None]


def _body() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "go"}], "tools": list(TOOLS), "stream": True, "seed": 3}


def test_a_forced_call_offers_the_agents_tools_and_forces_its_tokens() -> None:
    step = PinnedStep(Position(0, 0), "cd", {"folder": "docs"}, "")
    out = pin_forced_body(_body(), step, "tiny", [9], [11, 12, EOS])
    assert out["tools"] == list(TOOLS) and out["tool_choice"] == "auto"
    assert out["vllm_xargs"] == {FORCED_ARG: [11, 12, EOS]} and out["max_tokens"] == 3
    grammar = pin_body(_body(), step, "tiny", [9])
    assert out["chat_template_kwargs"] == grammar["chat_template_kwargs"], "the same prompt in both modes"
    assert out["messages"] == grammar["messages"] and "logit_bias" not in out
    answer = PinnedStep(Position(0, 1), None, None, "ok")
    assert pin_forced_body(_body(), answer, "tiny", [9], [], 4) == pin_body(_body(), answer, "tiny", [9], 4)
    with pytest.raises(WorkloadError, match="does not offer"):
        pin_forced_body({**_body(), "tools": [TOOLS[1]]}, step, "tiny", [9], [1])
    with pytest.raises(WorkloadError, match="tokens"):
        pin_forced_body(_body(), step, "tiny", [9], [])


def _fake_tokenizer(seen: list[str]) -> Starlette:
    async def tokenize(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        seen.append(prompt)
        words = prompt.split()
        return JSONResponse({"count": len(words), "tokens": [len(w) for w in words]})

    return Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])


async def test_the_replay_proxy_pins_and_checks_for_the_engine_endpoint() -> None:
    seen: list[str] = []
    async with serve_in_process(_fake_tokenizer(seen)) as engine_url:
        proxy = ReplayProxy(engine_url, [TRAJECTORY], [9], forced_eos_id=EOS)
        async with serve_in_process(proxy.app) as url:
            pinner = ReplayPinner(url)
            body = {**_body(), "metadata": {"trajectory_id": "t1"}}
            pinned = await pinner.pin(body)
            text = call_text("cd", {"folder": "docs"})
            assert seen == [text]
            assert pinned["vllm_xargs"][FORCED_ARG] == [len(w) for w in text.split()] + [EOS]
            assert await pinner.check(body, [("cd", '{"folder": "docs"}')]) is None
            wrong = await pinner.check(body, [("cd", '{"folder": "tmp"}')])
            assert wrong is not None and '"docs"' in wrong
            later = {**body, "messages": [*body["messages"], {"role": "assistant", "tool_calls": []},
                                          {"role": "tool", "content": "ok"}]}
            assert (await pinner.pin(later))["vllm_xargs"][FORCED_ARG][-1] == EOS  # the next call: ls
            assert await pinner.check(later, []) is not None, "no call where one was recorded"
            with pytest.raises(WorkloadError, match="refused"):
                await pinner.pin({**_body(), "metadata": {"trajectory_id": "nope"}})
            await pinner.aclose()
        await proxy.aclose()
    assert proxy.stats.call_steps == 2 and proxy.stats.verified == 1 and len(proxy.stats.mismatches) == 2
    assert proxy.stats.rejected == 1


async def test_the_engine_endpoint_refuses_what_it_cannot_serve() -> None:
    gateway = Gateway("http://127.0.0.1:9/v1")
    chat = EngineChat(gateway)
    app = Starlette(routes=[Route("/c", chat.completions, methods=["POST"]),
                            Route("/stats", chat.stats_route), Route("/reset", chat.reset_route, methods=["POST"])])
    stats = chat.stats
    async with serve_in_process(app) as url, httpx2.AsyncClient() as http:
        not_streaming = await http.post(url + "/c", json={"messages": [], "stream": False})
        not_json = await http.post(url + "/c", content=b"{")
        not_ready = await http.post(url + "/c", json={"messages": [], "stream": True})
        stats.appended_tokens = 7
        assert (await http.get(url + "/stats")).json()["appended_tokens"] == 7
        await http.post(url + "/reset")
        assert (await http.get(url + "/stats")).json()["appended_tokens"] == 0
    assert (not_streaming.status_code, not_json.status_code, not_ready.status_code) == (400, 400, 503)
    assert chat.stats.responses == 0 and len(gateway.cache) == 0, "no scope opened for a refused request"
    assert chat.stats is stats, "reset in place: a response in flight keeps counting where the route reads"
    await gateway.aclose()


def test_the_vllm_bench_runs_serial_and_known_arms_only() -> None:
    from forethought.bench.vllm.bench import ALL_ARMS, ARMS, VllmBenchParams

    assert VllmBenchParams().arms == ARMS and "engine-relay" in ALL_ARMS and "engine-relay" not in ARMS
    assert VllmBenchParams(arms=("serial", "engine-relay")).arms == ("serial", "engine-relay")
    for arms in (("client-side",), ("serial", "oracle")):
        with pytest.raises(ValueError, match="arms"):
            VllmBenchParams(arms=arms)
