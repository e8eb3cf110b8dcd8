"""The link API: only the user's token opens it, bad requests get clear 4xx and change nothing, and every
claim goes through the core (its keys, its write clock).

A *manual shim* here is the real :class:`~forethought.mcp.daemon_link.DaemonLink` over a server written in a
few lines (a dict of notes), so each test orders speculations, writes and claims exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import pytest

from forethought import ToolCall
from forethought._core.policy import Policy, ServerPolicy
from forethought.daemon import Client, Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.llm.events import MessageDone, ToolCallClosed, ToolCallStarted
from forethought.mcp.daemon_link import LINK_PREFIX, TOKEN_HEADER, DaemonLink, LinkAnswer
from forethought.predictors.base import Prediction

READ = {"readOnlyHint": True}
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


class Notes:
    """A tiny MCP server's tools behind a manual shim: counts every call, early or not."""

    def __init__(self, notes: dict[str, str]) -> None:
        self.notes = notes
        self.calls: list[tuple[str, bool]] = []
        self.gate: asyncio.Event | None = None

    def listing(self) -> list[dict[str, Any]]:
        return [{"name": "read", "inputSchema": SCHEMA, "annotations": READ},
                {"name": "write", "inputSchema": {**SCHEMA, "properties": {"path": {"type": "string"},
                                                                          "text": {"type": "string"}}}}]

    async def run(self, name: str, arguments: Mapping[str, Any], early: bool) -> LinkAnswer:
        self.calls.append((name, early))
        if self.gate is not None and early:
            await self.gate.wait()
        if name == "write":
            self.notes[arguments["path"]] = arguments["text"]
            return LinkAnswer(result={"content": [{"type": "text", "text": "ok"}]})
        return LinkAnswer(result={"content": [{"type": "text", "text": self.notes.get(arguments["path"], "?")}]})

    def link(self, daemon: Daemon) -> DaemonLink:
        return DaemonLink(daemon.url, daemon.token, lambda n, a: self.run(n, a, True))

    async def call(self, link: DaemonLink, name: str, arguments: dict[str, Any]) -> LinkAnswer:
        return (await link.call(name, arguments, lambda: self.run(name, arguments, False))).answer


@contextlib.asynccontextmanager
async def daemon_with(policy: Policy | None = None) -> AsyncIterator[Daemon]:
    config = DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE,
                          policy or Policy(servers={"*": ServerPolicy(trusted=True)}), patterns=False)
    async with serve_daemon(config) as daemon:
        yield daemon


async def _registered(daemon: Daemon, link: DaemonLink, name: str, notes: Notes) -> None:
    assert await link.register([name], notes.listing())
    for _ in range(200):
        shim = daemon.shims.get(link.shim or "")
        if shim is not None and shim.streaming:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the job stream never opened")


def _conversation_reading(daemon: Daemon, server: str, path: str) -> Any:
    """A conversation whose request offers ``server``'s read tool, with a speculation of ``read(path)``
    launched as the stream would (source stream, confidence 1)."""
    from forethought.daemon.transcript import read_request
    from forethought.daemon.wire import Wire

    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": f"mcp__{server}__read", "input_schema": SCHEMA}]}
    transcript = read_request(Wire.MESSAGES, body)
    conversation = daemon.conversations.get(transcript.key)
    conversation.begin(transcript, [], 0.0)
    linked = conversation.early[f"mcp__{server}__read"]
    ticket = conversation.session.speculate(linked.call({"path": path}), source="stream", confidence=1.0)
    assert ticket.launched
    return conversation


async def test_a_claim_takes_the_early_run_and_the_server_sees_the_call_once() -> None:
    notes = Notes({"a": "alpha"})
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        _conversation_reading(daemon, "notes", "a")
        result = await link.call("read", {"path": "a"}, lambda: notes.run("read", {"path": "a"}, False))
        await link.aclose()
    assert result.hit and result.answer.result == {"content": [{"type": "text", "text": "alpha"}]}
    assert notes.calls == [("read", True)]


async def test_a_write_through_another_server_makes_a_guessed_read_stale() -> None:
    notes, other = Notes({"a": "alpha"}), Notes({})
    async with daemon_with() as daemon:
        link, other_link = notes.link(daemon), other.link(daemon)
        await _registered(daemon, link, "notes", notes)
        await _registered(daemon, other_link, "files", other)
        _conversation_reading(daemon, "notes", "a")
        for _ in range(100):
            if notes.calls:
                break
            await asyncio.sleep(0.01)
        await other.call(other_link, "write", {"path": "x", "text": "y"})  # a write: the world clock moves
        notes.notes["a"] = "changed"  # ... and what it changed is what the read reads
        answer = await notes.call(link, "read", {"path": "a"})
        await link.aclose()
        await other_link.aclose()
    assert answer.result == {"content": [{"type": "text", "text": "changed"}]}
    assert notes.calls == [("read", True), ("read", False)]  # the guess was not served: the call ran again
    assert other.calls == [("write", False)]


async def test_a_claim_waits_for_a_running_early_run_instead_of_running_the_call_twice() -> None:
    notes = Notes({"a": "alpha"})
    notes.gate = asyncio.Event()
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        _conversation_reading(daemon, "notes", "a")
        for _ in range(100):
            if notes.calls:
                break
            await asyncio.sleep(0.01)
        claim = asyncio.create_task(notes.call(link, "read", {"path": "a"}))
        await asyncio.sleep(0.05)
        assert not claim.done()
        notes.gate.set()
        answer = await claim
        await link.aclose()
    assert answer.result is not None and notes.calls == [("read", True)]


async def test_an_unknown_tool_runs_as_the_clients_own_call_under_an_untracked_write() -> None:
    notes = Notes({"a": "alpha"})
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        result = await link.call("not_listed", {"x": 1}, lambda: notes.run("not_listed", {"path": "x"}, False))
        await link.aclose()
        assert daemon.desk.counts.untracked == 1 and daemon.runtime.writes.world.token() is not None
    assert result.answer.result is not None and not result.hit


@pytest.fixture
async def live() -> AsyncIterator[tuple[Daemon, httpx2.AsyncClient]]:
    async with daemon_with() as daemon, httpx2.AsyncClient(base_url=daemon.url) as client:
        yield daemon, client


async def test_no_token_or_another_token_or_another_host_is_refused(live: tuple[Daemon, httpx2.AsyncClient]) -> None:
    daemon, client = live
    body = {"names": ["x"], "tools": []}
    assert (await client.post(f"{LINK_PREFIX}/register", json=body)).status_code == 401
    assert (await client.post(f"{LINK_PREFIX}/register", json=body, headers={TOKEN_HEADER: "nope"})).status_code == 403
    rebinding = await client.post(f"{LINK_PREFIX}/register", json=body,
                                  headers={TOKEN_HEADER: daemon.token, "host": "evil.example:80"})
    assert rebinding.status_code == 403 and "loopback" in rebinding.json()["error"]
    assert daemon.shims.live() == [] and daemon.shims.version == 0


@pytest.mark.parametrize(("route", "body", "status", "says"), [
    ("register", b"not json", 400, "not JSON"),
    ("register", b"[1, 2]", 400, "JSON object"),
    ("register", b'{"names": "x"}', 400, "'names'"),
    ("register", b'{"names": [], "tools": {}}', 400, "'tools'"),
    ("claim", b'{"shim": "nope", "name": "read", "arguments": {}}', 404, "no such shim"),
    ("result", b'{"shim": "nope", "job": "j1", "result": {}}', 404, "no such shim"),
    ("done", b'{"shim": "nope", "run": "r1", "result": {}}', 404, "no such shim"),
])
async def test_bad_requests_get_clear_errors_and_change_nothing(live: tuple[Daemon, httpx2.AsyncClient], route: str,
                                                                body: bytes, status: int, says: str) -> None:
    daemon, client = live
    response = await client.post(f"{LINK_PREFIX}/{route}", content=body, headers={TOKEN_HEADER: daemon.token})
    assert response.status_code == status and says in response.json()["error"]
    assert daemon.shims.live() == [] and daemon.desk.counts.claims == 0


@pytest.mark.parametrize(("route", "extra", "status", "says"), [
    ("claim", {"name": 3, "arguments": {}}, 400, "'name'"),
    ("claim", {"name": "read", "arguments": [1]}, 400, "'arguments'"),
    ("result", {"job": 7, "result": {}}, 400, "'job'"),
    ("result", {"job": "j1"}, 400, "exactly one"),
    ("result", {"job": "j1", "result": {}, "error": {}}, 400, "exactly one"),
    ("done", {"run": "r1", "result": {}}, 404, "no such run"),
    ("done", {"run": "r1", "result": "text"}, 400, "exactly one"),
])
async def test_bad_messages_of_a_registered_shim_change_nothing(live: tuple[Daemon, httpx2.AsyncClient], route: str,
                                                                extra: dict[str, Any], status: int, says: str) -> None:
    daemon, client = live
    registered = await client.post(f"{LINK_PREFIX}/register", json={"names": ["notes"], "tools": Notes({}).listing()},
                                   headers={TOKEN_HEADER: daemon.token})
    shim = registered.json()["shim"]
    response = await client.post(f"{LINK_PREFIX}/{route}", json={"shim": shim, **extra},
                                 headers={TOKEN_HEADER: daemon.token})
    assert response.status_code == status and says in response.json()["error"]
    assert daemon.desk.counts.claims == 0 and daemon.desk.open_runs == 0


async def test_a_shim_that_never_opens_its_job_stream_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import forethought.daemon.shims as shims

    monkeypatch.setattr(shims, "STREAM_GRACE_S", 0.05)
    async with daemon_with() as daemon, httpx2.AsyncClient(base_url=daemon.url) as client:
        await client.post(f"{LINK_PREFIX}/register", json={"names": ["n"], "tools": []},
                          headers={TOKEN_HEADER: daemon.token})
        assert len(daemon.shims.live()) == 1
        await asyncio.sleep(0.2)
        assert daemon.shims.live() == []


async def test_keys_are_the_cores_one_rule_on_the_servers_schema() -> None:
    notes = Notes({"a": "alpha"})
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        conversation = _conversation_reading(daemon, "notes", "a")
        session = conversation.session
        linked = conversation.early["mcp__notes__read"]
        key = session.resolve(linked.call({"path": "a"}))[2]
        assert session.resolve(ToolCall("mcp__notes__read", {"path": "a"}))[2] == key
        assert session.has_speculation(key)
        await link.aclose()


class _Always:
    """A predictor that always guesses ``read(a)`` at a step's start."""

    name = "always"

    async def predict(self, context: Any) -> list[Prediction]:
        return [Prediction(ToolCall("mcp__notes__read", {"path": "a"}), 1.0, self.name)]

    def observe(self, context: Any, observed: Any) -> None:
        """Nothing to learn."""


@pytest.mark.parametrize("message_calls_it", [False, True])
async def test_a_guess_the_message_does_not_call_is_dropped_when_the_message_ends(message_calls_it: bool) -> None:
    """A step's guess outlives its message only as one of the message's calls: else a later claim (another
    conversation's, after a change no shim sees: the user's editor) could be served what it read before."""
    from forethought.daemon.transcript import read_request
    from forethought.daemon.wire import Wire

    notes = Notes({"a": "alpha"})
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "mcp__notes__read", "input_schema": SCHEMA}]}
        transcript = read_request(Wire.MESSAGES, body)
        step = daemon.conversations.get(transcript.key).begin(transcript, [_Always()], 0.0)
        for _ in range(200):
            if notes.calls:
                break
            await asyncio.sleep(0.01)
        assert notes.calls == [("read", True)]  # the guess ran at the step's start
        if message_calls_it:
            step.event(ToolCallStarted(0, "t0", "mcp__notes__read"))
            step.event(ToolCallClosed(0, "t0", "mcp__notes__read", {"path": "a"}, '{"path": "a"}'))
        step.event(MessageDone("tool_calls" if message_calls_it else "stop"))
        notes.notes["a"] = "changed by the user's editor" if not message_calls_it else "alpha"
        result = await link.call("read", {"path": "a"}, lambda: notes.run("read", {"path": "a"}, False))
        await link.aclose()
    if message_calls_it:
        assert result.hit and notes.calls == [("read", True)]
    else:
        assert not result.hit and notes.calls == [("read", True), ("read", False)]
        assert result.answer.result == {"content": [{"type": "text", "text": "changed by the user's editor"}]}
