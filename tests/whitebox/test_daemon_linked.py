"""Linked MCP through the daemon, end to end: a client on the real SDKs, the scripted model, a real MCP server.

Each test runs a client's loop directly (model -> client -> server) and through the daemon (model -> daemon ->
client -> shim -> server) and compares every tool answer and the server's final state; the shim records
every call the server received and whether it was an early run, so "no write ever runs early" is counted
where it happens. The MCP server is :mod:`forethought.bench.loop.notes_server` (reads say ``readOnlyHint``;
writes say nothing; its state is a file, read at every call, so a "built-in" tool of the client can change it
behind the daemon's back).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from forethought._core.policy import Policy, ServerPolicy
from forethought.bench.loop.agent import LoopRun, run_loop
from forethought.bench.loop.shim import FakeShim
from forethought.daemon import Client, Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.wire import Wire
from forethought.mcp.daemon_link import LinkAnswer
from forethought.serve.scripted import serve_scripted

NOTES = {"a.md": "alpha\nbeta", "b.md": "gamma", "docs/c.md": "delta"}
TRUSTED = Policy(servers={"notes": ServerPolicy(trusted=True)})


def _tool(name: str, **properties: str) -> dict[str, Any]:
    return {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in properties.items()}, "required": list(properties)}}


TOOLS = [_tool("mcp__notes__read_note", path="string"), _tool("mcp__notes__list_notes", folder="string"),
         _tool("mcp__notes__write_note", path="string", text="string"), _tool("Bash", command="string")]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@dataclass
class Router:
    """The client's tools: MCP tools through its shims (by the server's key), its own ``Bash`` on the files."""

    shims: Mapping[str, FakeShim]
    state: Path

    async def call(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        if name == "Bash":  # a built-in tool: it edits the notes file itself, where no shim sees it
            notes = json.loads(self.state.read_text())
            notes[arguments["command"]] = "edited by the client's own tool"
            self.state.write_text(json.dumps(notes))
            return LinkAnswer(result={"content": [{"type": "text", "text": "ok"}]})
        _, server, tool = name.split("__")
        return await self.shims[server].call_tool(tool, arguments)


@dataclass
class Arm:
    run: LoopRun
    state: str
    early: list[str]
    own: list[str]
    daemon_status: Mapping[str, Any] | None


def _server(tmp: Path, label: str, latency: float) -> tuple[list[str], Path]:
    state = tmp / f"{label}.json"
    state.write_text(json.dumps(NOTES))
    return [sys.executable, "-m", "forethought.bench.loop.notes_server", str(state), "--latency", str(latency)], state


async def arm(tmp: Path, script: Mapping[str, Any], wire: Wire, *, linked: bool, policy: Policy = TRUSTED,
              latency: float = 0.05, label: str = "", patterns: bool = False) -> Arm:
    """One arm of a loop. The pattern predictor is off unless asked for: these tests count the early runs of
    the model's own streamed calls, which guesses would add to."""
    command, state = _server(tmp, f"{label}{'linked' if linked else 'direct'}-{wire}", latency)
    async with serve_scripted(script) as up, serve_daemon(DaemonConfig(
            Upstreams(up, up), Client.CLAUDE_CODE, policy, patterns=patterns)) as daemon, FakeShim.started(
            command, "notes", daemon=(daemon.url, daemon.token) if linked else None) as shim:
        base = (daemon.url + ("/anthropic" if wire is Wire.MESSAGES else "/openai")) if linked else up
        run = await run_loop(wire, base, "m", "work on the notes", TOOLS, Router({"notes": shim}, state))
        return Arm(run, state.read_text(), [c.tool for c in shim.calls if c.early],
                   [c.tool for c in shim.calls if not c.early], daemon.status() if linked else None)


READS_THEN_WRITE = {"ttft_s": 0.02, "chunk_s": 0.01, "fragment_chars": 6, "responses": [
    {"text": "Reading both.", "calls": [call("mcp__notes__read_note", path="a.md"),
                                        call("mcp__notes__list_notes", folder="docs")]},
    {"text": "Now writing.", "calls": [call("mcp__notes__write_note", path="new.md", text="hello"),
                                       call("mcp__notes__read_note", path="new.md")]},
    {"text": "All done."}]}


@pytest.mark.parametrize("wire", list(Wire))
async def test_reads_start_as_they_close_every_answer_equals_direct_and_no_write_runs_early(
        tmp_path: Path, wire: Wire) -> None:
    direct = await arm(tmp_path, READS_THEN_WRITE, wire, linked=False)
    linked = await arm(tmp_path, READS_THEN_WRITE, wire, linked=True)
    assert linked.run.answers == direct.run.answers and linked.state == direct.state
    assert linked.run.final_text == direct.run.final_text == "All done."
    assert sorted(linked.early) == ["list_notes", "read_note"]  # the first message's two reads ran early
    assert "write_note" not in linked.early and linked.own.count("write_note") == 1
    # the read after the write in the same message was not started early: it ran once, as the client's call
    assert linked.own.count("read_note") == 1
    assert linked.daemon_status is not None and linked.daemon_status["claims"]["hits"] == 2


async def test_an_untrusted_server_runs_nothing_early(tmp_path: Path) -> None:
    direct = await arm(tmp_path, READS_THEN_WRITE, Wire.MESSAGES, linked=False)
    linked = await arm(tmp_path, READS_THEN_WRITE, Wire.MESSAGES, linked=True, policy=Policy())
    assert linked.run.answers == direct.run.answers and linked.state == direct.state
    assert linked.early == []
    assert linked.daemon_status is not None and linked.daemon_status["claims"]["hits"] == 0


BEHIND_THE_DAEMONS_BACK = {"ttft_s": 0.02, "chunk_s": 0.01, "fragment_chars": 6, "responses": [
    {"text": "Read, edit with my own tool, read again.",
     "calls": [call("mcp__notes__read_note", path="b.md"), call("Bash", command="b.md"),
               call("mcp__notes__read_note", path="b.md")]},
    {"text": "Again.", "calls": [call("Bash", command="a.md"), call("mcp__notes__read_note", path="a.md")]},
    {"text": "Done."}]}


@pytest.mark.parametrize("wire", list(Wire))
async def test_a_write_the_daemon_cannot_see_never_lets_a_stale_read_be_served(tmp_path: Path, wire: Wire) -> None:
    direct = await arm(tmp_path, BEHIND_THE_DAEMONS_BACK, wire, linked=False)
    linked = await arm(tmp_path, BEHIND_THE_DAEMONS_BACK, wire, linked=True)
    assert linked.run.answers == direct.run.answers and linked.state == direct.state
    assert json.loads(direct.run.answers[2])["result"]["content"][0]["text"] == "edited by the client's own tool"
    # only the read before the client's own write started early, and even it was not served: the write had begun
    assert linked.early == ["read_note"]
    assert linked.own.count("read_note") == 3
    assert linked.daemon_status is not None and linked.daemon_status["claims"]["hits"] == 0


ERRORS = {"ttft_s": 0.02, "chunk_s": 0.01, "fragment_chars": 6, "responses": [
    {"calls": [call("mcp__notes__read_note", path="missing.md")]}, {"text": "It is missing."}]}


async def test_a_read_that_errors_is_never_served_from_its_early_run(tmp_path: Path) -> None:
    direct = await arm(tmp_path, ERRORS, Wire.CHAT, linked=False)
    linked = await arm(tmp_path, ERRORS, Wire.CHAT, linked=True)
    assert linked.run.answers == direct.run.answers
    assert json.loads(linked.run.answers[0])["result"]["isError"] is True
    assert linked.early == ["read_note"] and linked.own == ["read_note"]  # the client's own call answered it


async def test_two_clients_with_a_server_of_the_same_name_start_nothing_until_one_is_bound(tmp_path: Path) -> None:
    script = {"ttft_s": 0.02, "chunk_s": 0.01, "fragment_chars": 6, "responses": [
        {"calls": [call("mcp__notes__read_note", path="a.md")]},
        {"calls": [call("mcp__notes__read_note", path="b.md")]}, {"text": "ok"}]}
    mine, _ = _server(tmp_path, "mine", 0.05)
    other_command, other_state = _server(tmp_path, "other", 0.05)
    other_state.write_text(json.dumps({"a.md": "NOT the client's", "b.md": "NOT the client's"}))
    async with serve_scripted(script) as up, serve_daemon(DaemonConfig(
            Upstreams(up, up), Client.CLAUDE_CODE, TRUSTED, patterns=False)) as daemon:
        link = (daemon.url, daemon.token)
        async with FakeShim.started(mine, "notes", daemon=link) as shim, FakeShim.started(
                other_command, "notes", daemon=link) as other:
            run = await run_loop(Wire.MESSAGES, daemon.url + "/anthropic", "m", "go", TOOLS,
                                 Router({"notes": shim}, tmp_path / "mine.json"))
    texts = [json.loads(a)["result"]["content"][0]["text"] for a in run.answers]
    assert texts == ["alpha\nbeta", "gamma"]
    assert [c.early for c in other.calls] == []  # the other client's server was never asked anything
    # step 1: two shims called notes, none bound: nothing early; its claim bound the conversation to `shim`
    assert [(c.tool, c.early) for c in shim.calls] == [("read_note", False), ("read_note", True)]


@contextlib.asynccontextmanager
async def bare_daemon(policy: Policy = TRUSTED) -> AsyncIterator[Daemon]:
    async with serve_daemon(DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE, policy)) as daemon:
        yield daemon


async def test_the_shim_goes_on_as_a_plain_proxy_when_the_daemon_goes(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    command, _ = _server(tmp_path, "fallback", 0.0)
    caplog.set_level(logging.WARNING)
    async with FakeShim.started(command, "notes") as shim:
        async with bare_daemon() as daemon:
            assert await shim.connect(daemon.url, daemon.token)
            first = await shim.call_tool("read_note", {"path": "a.md"})
        second = await shim.call_tool("read_note", {"path": "a.md"})  # the daemon is gone now
        third = await shim.call_tool("read_note", {"path": "b.md"})
    assert first == second and first.result is not None and third.result is not None
    lines = [r.getMessage() for r in caplog.records if "daemon link is down" in r.getMessage()]
    assert len(lines) == 1 and "plain proxy" in lines[0]


async def test_a_shim_whose_daemon_is_not_there_says_so_once_and_works(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    command, _ = _server(tmp_path, "absent", 0.0)
    caplog.set_level(logging.WARNING)
    async with FakeShim.started(command, "notes", daemon=("http://127.0.0.1:9", "token")) as shim:
        answers = [await shim.call_tool("list_notes", {"folder": ""}) for _ in range(3)]
    assert all(a == answers[0] and a.result is not None for a in answers)
    assert sum("daemon link is down" in r.getMessage() for r in caplog.records) == 1


async def test_a_daemon_forgets_a_shim_that_left_and_owes_nothing_to_it(tmp_path: Path) -> None:
    command, _ = _server(tmp_path, "leaving", 0.0)
    async with bare_daemon() as daemon:
        async with FakeShim.started(command, "notes", daemon=(daemon.url, daemon.token)) as shim:
            await shim.call_tool("write_note", {"path": "x.md", "text": "x"})
            for _ in range(200):
                if daemon.shims.live() and daemon.shims.live()[0].streaming:
                    break
                await _tick()
            assert [s.names for s in daemon.shims.live()] == [("notes",)]  # its key and its own name, once
        for _ in range(200):
            if not daemon.shims.live():
                break
            await _tick()
        assert daemon.shims.live() == [] and daemon.desk.open_runs == 0
        assert daemon.runtime.writes.world.token() is not None  # no write is left in progress


async def test_pattern_guesses_hit_on_a_repeated_task_and_change_nothing(tmp_path: Path) -> None:
    """The same task twice in one daemon: the second conversation's first read is guessed at its step's start
    from what the first conversation taught the pattern predictor (it learns from the transcripts)."""
    script = {"ttft_s": 0.05, "chunk_s": 0.01, "fragment_chars": 6, "loop": True, "responses": [
        {"text": "Listing.", "calls": [call("mcp__notes__list_notes", folder="docs")]},
        {"text": "Reading.", "calls": [call("mcp__notes__read_note", path="docs/c.md")]},
        {"text": "ok"}]}
    command, state = _server(tmp_path, "repeat", 0.05)
    async with serve_scripted(script) as up, serve_daemon(DaemonConfig(
            Upstreams(up, up), Client.CLAUDE_CODE, TRUSTED)) as daemon, FakeShim.started(
            command, "notes", daemon=(daemon.url, daemon.token)) as shim:
        runs = []
        for task in range(4):
            runs.append(await run_loop(Wire.MESSAGES, daemon.url + "/anthropic", "m", f"task {task}: list docs",
                                       TOOLS, Router({"notes": shim}, state)))
        claims = daemon.status()["claims"]
    assert all(r.answers == runs[0].answers for r in runs)
    assert claims["hits"] >= 8  # every streamed read hit; guesses may add hits but never change an answer
    assert [c.tool for c in shim.calls if not c.early] == [], "every call was served early"


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.01)
