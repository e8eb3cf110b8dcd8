"""The speculator model: the step's own request re-sent to a cheaper model of the same upstream, with the client's
credentials, its tokens counted per conversation against a budget; it never changes what the client sees.

The upstream is the scripted model behind a recorder, with a router that serves the speculator's model
name from a faster copy of the same script (a provider serving a small and a large model).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from forethought._core.policy import Policy, ServerPolicy
from forethought.bench.loop.agent import run_loop
from forethought.bench.loop.recording import ModelRouter, RecordingApp
from forethought.bench.loop.shim import FakeShim
from forethought.daemon import Client, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.guesses import SpeculatorSettings
from forethought.daemon.wire import Wire
from forethought.mcp.daemon_link import LinkAnswer
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script
from forethought.telemetry import EventKind

SCRIPT = {"ttft_s": 0.15, "chunk_s": 0.01, "fragment_chars": 8, "responses": [
    {"text": "Looking at the docs.", "calls": [{"name": "mcp__notes__read_note", "arguments": {"path": "docs/c.md"}}]},
    {"text": "And a.", "calls": [{"name": "mcp__notes__read_note", "arguments": {"path": "a.md"}}]},
    {"text": "Done."}]}
TOOLS = [{"name": "mcp__notes__read_note", "description": "read",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
SECRET_KEY = "sk-ant-api03-speculator-credential"


class Router:
    def __init__(self, shim: FakeShim) -> None:
        self.shim = shim

    async def call(self, name: str, arguments: Any) -> LinkAnswer:
        return await self.shim.call_tool(name.split("__")[-1], arguments)


async def _run(tmp_path: Path, settings: SpeculatorSettings | None, wire: Wire = Wire.MESSAGES) -> dict[str, Any]:
    state = tmp_path / f"notes-{wire}-{settings is not None}.json"
    state.write_text(json.dumps({"a.md": "alpha", "docs/c.md": "delta"}))
    script = parse_script(SCRIPT)
    recorder = RecordingApp(ModelRouter(create_scripted_server(script), {
        "cheap": create_scripted_server(script, time_scale=0.2)}))
    command = [sys.executable, "-m", "forethought.bench.loop.notes_server", str(state), "--latency", "0.1"]
    policy = Policy(servers={"notes": ServerPolicy(trusted=True)})
    async with serve_in_process(recorder) as up, serve_daemon(DaemonConfig(
            Upstreams(up, up), Client.CLAUDE_CODE, policy, patterns=False, speculator=settings)) as daemon:
        events: list[Any] = []
        daemon.runtime.telemetry.subscribe(events.append)
        async with FakeShim.started(command, "notes", daemon=(daemon.url, daemon.token)) as shim:
            base = daemon.url + ("/anthropic" if wire is Wire.MESSAGES else "/openai")
            run = await run_loop(wire, base, "big", "read the docs", TOOLS, Router(shim), api_key=SECRET_KEY)
            conversation = next(iter(daemon.conversations))
            budget = daemon.guessers.budget
            return {"run": run, "exchanges": recorder.exchanges, "spent": budget.spent.get(conversation.key, 0)
                    if budget else 0, "samples": budget.samples.get(conversation.key, 0) if budget else 0,
                    "claims": daemon.status()["claims"], "shim": shim,
                    "launched": [e.source for e in events if e.kind is EventKind.LAUNCHED],
                    "joined": [e.source for e in events if e.kind is EventKind.DEDUPLICATED]}


def _usage(exchange: Any) -> int:
    """The tokens an Anthropic stream reports: input (message_start) plus output (message_delta)."""
    total = 0
    for line in exchange.sent.decode().splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event.get("type") == "message_start":
                total += event["message"]["usage"]["input_tokens"]
            elif event.get("type") == "message_delta":
                total += event["usage"]["output_tokens"]
    return total


async def test_samples_replay_the_step_with_the_clients_credentials_and_their_tokens_are_counted(
        tmp_path: Path) -> None:
    plain = await _run(tmp_path, None)
    sampled = await _run(tmp_path, SpeculatorSettings("cheap", samples=2, budget_tokens=None))
    assert sampled["run"].answers == plain["run"].answers and sampled["run"].final_text == "Done."
    main = [e for e in sampled["exchanges"] if json.loads(e.body)["model"] == "big"]
    samples = [e for e in sampled["exchanges"] if json.loads(e.body)["model"] == "cheap"]
    assert len(main) == 3 and len(samples) == 2 * 3  # lambda samples at every step
    for sample in samples:
        body = json.loads(sample.body)
        credential = sample.headers.get("x-api-key") or sample.headers.get("authorization", "")
        assert SECRET_KEY in credential and body["stream"] is True  # the SDK's own header, as the client sent it
        twin = next(json.loads(m.body) for m in main if json.loads(m.body)["messages"] == body["messages"])
        assert {k: v for k, v in body.items() if k not in ("model", "max_tokens")} == \
            {k: v for k, v in twin.items() if k not in ("model", "max_tokens")}
    assert sampled["samples"] == 6 and sampled["spent"] == sum(_usage(s) for s in samples) > 0
    # a faster speculator proposes the model's call before the model does: the reads start at its sample, and
    # the model's own streamed call joins them
    assert sampled["claims"]["hits"] == 2
    assert sampled["launched"] == ["model", "model"] and sampled["joined"] == ["stream", "stream"]


async def test_a_conversation_past_its_budget_draws_no_more_samples(tmp_path: Path) -> None:
    sampled = await _run(tmp_path, SpeculatorSettings("cheap", samples=2, budget_tokens=1))
    samples = [e for e in sampled["exchanges"] if json.loads(e.body)["model"] == "cheap"]
    assert len(samples) == 2  # the first step's samples spent the budget: none after
    assert sampled["spent"] > 1 and sampled["run"].final_text == "Done."


@pytest.mark.parametrize("wire", [Wire.RESPONSES, Wire.CHAT])
async def test_openai_requests_are_replayed_in_their_own_api(tmp_path: Path, wire: Wire) -> None:
    sampled = await _run(tmp_path, SpeculatorSettings("cheap", samples=1, budget_tokens=None), wire)
    samples = [json.loads(e.body) for e in sampled["exchanges"] if json.loads(e.body)["model"] == "cheap"]
    assert len(samples) == 3 and all(s["stream"] is True for s in samples)
    if wire is Wire.CHAT:
        assert all(s["stream_options"] == {"include_usage": True} for s in samples)
    assert sampled["spent"] > 0 and sampled["claims"]["hits"] == 2
