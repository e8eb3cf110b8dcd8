"""Credentials never leave the request they came with: planted in every header a client may send them in, they
reach the upstream (so the test can fail) and no output channel of the daemon: logs at every level,
telemetry events, ``/metrics``, ``/health``, the link status, ``doctor``, the daemon file, the pattern store
on disk, error answers, and the speculator's view of a step."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from forethought._core.policy import Policy, ServerPolicy
from forethought.bench.loop.agent import run_loop
from forethought.bench.loop.recording import ModelRouter, RecordingApp
from forethought.bench.loop.shim import FakeShim
from forethought.daemon import Client, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.doctor import run_doctor
from forethought.daemon.guesses import SpeculatorSettings
from forethought.daemon.wire import Wire
from forethought.mcp.daemon_link import LINK_PREFIX, TOKEN_HEADER
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SECRETS = {"authorization": "Bearer sk-proj-PLANTED-bearer-0123456789", "x-api-key": "sk-ant-PLANTED-key-9876543210",
           "cookie": "session=PLANTED-cookie-5555", "openai-organization": "org-PLANTED-org-4444"}
SCRIPT = parse_script({"ttft_s": 0.02, "chunk_s": 0.01, "fragment_chars": 8, "responses": [
    {"text": "Reading.", "calls": [{"name": "mcp__notes__read_note", "arguments": {"path": "a.md"}}]},
    {"text": "Done."}]})
TOOLS = [{"name": "mcp__notes__read_note", "description": "read",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def _leaks(text: str) -> list[str]:
    fragments = ("PLANTED", "sk-proj", "sk-ant-PLANTED")
    return [f for f in fragments if f in text]


@pytest.mark.parametrize("wire", [Wire.MESSAGES, Wire.CHAT])
async def test_planted_credentials_reach_the_upstream_and_no_output_channel(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, wire: Wire) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "notes.json"
    state.write_text(json.dumps({"a.md": "alpha"}))
    store = tmp_path / "patterns.sqlite"
    announce = tmp_path / "run" / "daemon.json"
    recorder = RecordingApp(ModelRouter(create_scripted_server(SCRIPT), {"cheap": create_scripted_server(SCRIPT)}))
    config = DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE,
                          Policy(servers={"notes": ServerPolicy(trusted=True)}), store=store,
                          speculator=SpeculatorSettings("cheap", samples=1), daemon_file=announce)
    command = [sys.executable, "-m", "forethought.bench.loop.notes_server", str(state)]
    outputs: list[str] = []
    async with serve_in_process(recorder) as up:
        config = DaemonConfig(Upstreams(up, up), *(getattr(config, f) for f in (
            "client", "policy", "store", "patterns", "speculator", "daemon_file")))
        async with serve_daemon(config) as daemon:
            events: list[Any] = []
            daemon.runtime.telemetry.subscribe(events.append)
            transport = httpx2.AsyncHTTPTransport()
            headers = dict(SECRETS)

            class Router:
                def __init__(self, shim: FakeShim) -> None:
                    self.shim = shim

                async def call(self, name: str, arguments: Any) -> Any:
                    return await self.shim.call_tool(name.split("__")[-1], arguments)

            async with FakeShim.started(command, "notes", daemon=(daemon.url, daemon.token)) as shim:
                base = daemon.url + ("/anthropic" if wire is Wire.MESSAGES else "/openai")
                await _run_with_headers(wire, base, headers, Router(shim))
                replay = daemon.guessers.replay
                outputs.append(repr(getattr(replay, "_steps", {})))
            async with httpx2.AsyncClient(transport=transport) as client:
                for path in ("/metrics", "/health"):
                    outputs.append((await client.get(daemon.url + path)).text)
                outputs.append((await client.get(daemon.url + f"{LINK_PREFIX}/status",
                                                 headers={TOKEN_HEADER: daemon.token})).text)
                bad = await client.post(daemon.url + "/anthropic/v1/messages", content=b"x" * 10,
                                        headers={**SECRETS, "host": "127.0.0.1"})
                outputs.append(bad.text)
            outputs.append(json.dumps(daemon.status()))
            outputs += [repr(e) for e in events]
            doctor = await _doctor(announce)
            outputs += [c.detail + json.dumps(c.data, default=str) for c in doctor]
            outputs.append(announce.read_text())
    outputs.append(store.read_bytes().decode("latin-1"))
    outputs += [r.getMessage() + str(r.args) for r in caplog.records]
    assert events and any("LAUNCHED" in repr(e) or "launched" in repr(e) for e in events)
    # the credentials did go upstream, with the main request and with the speculator's samples
    seen = [e.headers for e in recorder.exchanges if e.method == "POST"]  # (doctor's probe is a bare GET)
    assert len(seen) >= 3 and all(h.get("authorization") == SECRETS["authorization"] for h in seen)
    assert all(h.get("x-api-key") == SECRETS["x-api-key"] for h in seen)
    for text in outputs:
        assert _leaks(text) == [], text[:300]


async def _run_with_headers(wire: Wire, base: str, headers: dict[str, str], router: Any) -> None:
    """The loop with extra headers on every model request (as a client with an org, a cookie, a key)."""
    import anthropic
    import openai

    original_a, original_o = anthropic.AsyncAnthropic, openai.AsyncOpenAI

    def with_headers(cls: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            kwargs["default_headers"] = headers
            return cls(*args, **kwargs)

        return make

    anthropic.AsyncAnthropic, openai.AsyncOpenAI = with_headers(original_a), with_headers(original_o)  # type: ignore[misc]
    try:
        await run_loop(wire, base, "big", "read a", TOOLS, router, api_key=SECRETS["x-api-key"])
    finally:
        anthropic.AsyncAnthropic, openai.AsyncOpenAI = original_a, original_o  # type: ignore[misc]


async def _doctor(path: Path) -> list[Any]:
    import asyncio

    return await asyncio.to_thread(run_doctor, path)
