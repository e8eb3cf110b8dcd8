"""Two clients on one daemon never end each other's writes, never move each other's bindings, and a claim
whose shim left keeps nothing open.

Each test orders requests, streamed events, early runs and claims exactly, with manual shims (the real
:class:`~forethought.mcp.daemon_link.DaemonLink` over a dict of notes, from ``test_daemon_link_api``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from forethought._core.policy import Policy, ServerPolicy, ToolPolicy
from forethought.daemon import Client, Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.conversation import Conversation
from forethought.daemon.transcript import read_request
from forethought.daemon.wire import Wire
from forethought.llm.events import MessageDone, ToolCallClosed, ToolCallStarted
from test_daemon_link_api import SCHEMA, Notes, _registered, daemon_with

TOOLS = [{"name": "mcp__notes__read", "input_schema": SCHEMA},
         {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
FIRST = [{"role": "user", "content": "work on the notes"}]


def _request(daemon: Daemon, messages: list[dict[str, Any]]) -> Conversation:
    """One Messages request of ``messages`` (the conversation it belongs to, its step begun)."""
    transcript = read_request(Wire.MESSAGES, {"model": "m", "max_tokens": 8, "system": "agent",
                                              "messages": messages, "tools": TOOLS})
    conversation = daemon.conversations.get(transcript.key)
    conversation.begin(transcript, [], daemon.conversations._clock())
    return conversation


def _stream(conversation: Conversation, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
    """The step's message, as the decoders emit it: each call (id, name, arguments), then its end."""
    step = conversation.step
    assert step is not None
    for i, (call_id, name, arguments) in enumerate(calls):
        step.event(ToolCallStarted(i, call_id, name))
        step.event(ToolCallClosed(i, call_id, name, arguments, "{}"))
    step.event(MessageDone("tool_use"))


def _answered(calls: list[tuple[str, str, dict[str, Any]]], outputs: list[str]) -> list[dict[str, Any]]:
    """The client's next messages: the assistant's calls, then a result for each."""
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": n, "input": a}
                                              for i, n, a in calls]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": out}
                                         for (i, _, _), out in zip(calls, outputs, strict=True)]}]


async def _until(condition: Any) -> None:
    for _ in range(300):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


A_WRITES = [("toolu_a1", "Bash", {"command": "edit b"}), ("toolu_a2", "mcp__notes__read", {"path": "b"})]


async def test_another_client_s_request_on_the_same_key_keeps_a_write_it_did_not_answer() -> None:
    notes = Notes({"b": "before"})
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        a = _request(daemon, FIRST)
        _stream(a, A_WRITES)  # A's client will run Bash (unseen), then read b
        assert a.unseen
        b = _request(daemon, FIRST)  # client B starts the same task: the same key, the same conversation
        assert b is a and a.unseen, "B's request ended A's write, which B's client never ran"
        _stream(b, [("toolu_b1", "mcp__notes__read", {"path": "b"})])  # B's read starts early
        await _until(lambda: ("read", True) in notes.calls)
        await asyncio.sleep(0.05)  # the early run has answered
        notes.notes["b"] = "after"  # A's client runs its Bash now
        answer = await notes.call(link, "read", {"path": "b"})
        assert answer.result == {"content": [{"type": "text", "text": "after"}]}, "A got B's stale early read"
        _request(daemon, FIRST + _answered(A_WRITES, ["ok", "after"]))  # A's next request answers its message
        assert not a.unseen
        await link.aclose()


async def test_another_client_s_same_call_under_its_own_id_keeps_the_write() -> None:
    async with daemon_with() as daemon:
        first = [("toolu_0", "mcp__notes__read", {"path": "a"})]
        _stream(_request(daemon, FIRST), first)
        second = FIRST + _answered(first, ["x"])
        a = _request(daemon, second)
        _stream(a, A_WRITES)
        assert a.unseen
        theirs = [(f"other_{i}", n, args) for i, n, args in A_WRITES]  # client B ran the same calls, its own ids
        _request(daemon, FIRST + _answered(theirs, ["ok", "x"]))
        assert a.unseen, "B's results for its own calls ended the write of A's message"
        renamed = [(f"renamed_{i}", n, args) for i, n, args in A_WRITES]  # A's client, ids of its own making
        _request(daemon, second + _answered(renamed, ["ok", "x"]))
        assert not a.unseen


async def test_where_the_stream_gave_no_ids_the_same_call_answers_the_write() -> None:
    async with daemon_with() as daemon:
        a = _request(daemon, FIRST)
        _stream(a, [("", name, args) for _, name, args in A_WRITES])
        assert a.unseen
        _request(daemon, FIRST)  # no result for those calls yet
        assert a.unseen
        _request(daemon, FIRST + _answered(A_WRITES, ["ok", "x"]))
        assert not a.unseen


async def test_a_message_cut_off_ends_its_write_at_the_next_request_and_one_still_streaming_keeps_it() -> None:
    async with daemon_with() as daemon:
        a = _request(daemon, FIRST)
        step = a.step
        assert step is not None
        step.event(ToolCallStarted(0, "toolu_x", "Bash"))
        assert a.unseen
        _request(daemon, FIRST)  # while A's message still streams
        assert a.unseen
        step.unreadable("the client went away")
        _request(daemon, FIRST)  # a cut-off message was never acted on: its write ends here
        assert not a.unseen


async def test_a_conversation_forgotten_to_make_room_keeps_its_write_until_it_would_have_idled_out() -> None:
    clock = [0.0]
    async with daemon_with() as daemon:
        conversations = daemon.conversations
        conversations._clock = lambda: clock[0]
        conversations._max = 2
        a = _request(daemon, FIRST)
        _stream(a, A_WRITES)
        world = daemon.runtime.writes.world
        assert world.token() is None  # a write is in progress
        for i in range(3):  # other clients' one-off requests push A out
            _request(daemon, [{"role": "user", "content": f"one-off {i}"}])
        assert a not in list(conversations)
        await conversations.reap()
        assert world.token() is None, "forgetting A ended the write its client may still be running"
        clock[0] = 1800.0 + 1.0
        _request(daemon, [{"role": "user", "content": "later"}])
        assert world.token() is not None  # A would have idled out by now: its write ends


async def test_a_claim_never_moves_a_conversation_bound_to_another_live_shim() -> None:
    notes_a, notes_c = Notes({"a": "A's", "b": "A's b"}), Notes({"a": "C's", "b": "C's b"})
    async with daemon_with() as daemon:
        link_a, link_c = notes_a.link(daemon), notes_c.link(daemon)
        await _registered(daemon, link_a, "notes", notes_a)
        await _registered(daemon, link_c, "notes", notes_c)
        a = _request(daemon, FIRST)
        first = [("toolu_1", "mcp__notes__read", {"path": "a"})]
        _stream(a, first)  # two shims named notes, no binding: nothing starts early
        await notes_a.call(link_a, "read", {"path": "a"})  # A's claim binds A's conversation to A's shim
        bound = dict(a.bound)
        await notes_c.call(link_c, "read", {"path": "a"})  # client C makes the same call through its own shim
        assert a.bound == bound, "C's claim moved A's conversation to C's shim"
        a = _request(daemon, FIRST + _answered(first, ["A's"]))
        _stream(a, [("toolu_2", "mcp__notes__read", {"path": "b"})])
        await _until(lambda: ("read", True) in notes_a.calls)
        assert all(not early for _, early in notes_c.calls), "A's read ran early on C's server"
        await link_a.aclose()
        await link_c.aclose()


async def test_a_claim_whose_shim_left_while_it_waited_leaves_no_open_run() -> None:
    notes = Notes({"a": "alpha"})
    notes.gate = asyncio.Event()  # the early run never answers
    async with daemon_with() as daemon:
        link = notes.link(daemon)
        await _registered(daemon, link, "notes", notes)
        a = _request(daemon, FIRST)
        _stream(a, [("toolu_1", "mcp__notes__read", {"path": "a"})])
        await _until(lambda: ("read", True) in notes.calls)
        shim = daemon.shims.get(link.shim or "")
        assert shim is not None
        claim = asyncio.create_task(daemon.desk.claim(shim, "read", {"path": "a"}))
        await asyncio.sleep(0.05)  # the claim waits on the early run
        await link.aclose()
        await asyncio.wait_for(claim, 10)
        await _until(lambda: daemon.shims.get(shim.id) is None)
        await asyncio.sleep(0.05)
        assert daemon.desk.open_runs == 0



async def test_a_private_linked_tool_the_conversation_does_not_reach_is_never_learnt(tmp_path: Path) -> None:
    """Two clients' shims named notes, the conversation bound to neither: its session holds no notes tool,
    yet the policy says notes.read is private, so nothing of its calls reaches the daemon's pattern store."""
    secret_argument, secret_output = "vaultpath-q7319", "tok-SECRET-4242"
    policy = Policy(servers={"notes": ServerPolicy(trusted=True, tools={"read": ToolPolicy(private=True)})})
    store = tmp_path / "patterns.sqlite"
    async with serve_daemon(DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE, policy, store=store)) as daemon:
        first, second = Notes({"x": "1"}), Notes({"x": "2"})
        links = [first.link(daemon), second.link(daemon)]
        await _registered(daemon, links[0], "notes", first)
        await _registered(daemon, links[1], "notes", second)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "read my vault note, then run things"}]
        for i in range(6):
            calls = [(f"t{i}a", "mcp__notes__read", {"path": secret_argument}), (f"t{i}b", "Bash", {"command": "ls"})]
            messages += _answered(calls, [secret_output, "ok"])
            transcript = read_request(Wire.MESSAGES, {"model": "m", "max_tokens": 8, "system": "agent",
                                                      "messages": messages, "tools": TOOLS})
            conversation = daemon.conversations.get(transcript.key)
            conversation.begin(transcript, daemon.guessers.for_step(conversation.key, transcript.tools),
                               daemon.conversations._clock())
            assert "mcp__notes__read" not in conversation.session.tools and conversation.is_private("mcp__notes__read")
        for link in links:
            await link.aclose()
    stored = _stored(tmp_path)
    assert stored, "nothing was learnt at all"
    for secret in (secret_argument, secret_output, "notes__read"):
        assert secret.encode() not in stored, f"{secret!r} reached the store"


def _stored(folder: Path) -> bytes:
    """Every byte of the pattern store's files (the database and its journal)."""
    return b"".join(p.read_bytes() for p in folder.glob("patterns.sqlite*"))


async def test_a_private_tool_no_live_shim_has_is_private_by_the_policy_s_own_tables() -> None:
    policy = Policy(servers={"notes": ServerPolicy(trusted=True, tools={"read": ToolPolicy(private=True)}),
                             "*": ServerPolicy(tools={"vault": ToolPolicy(private_arguments=frozenset({"key"}))})})
    async with serve_daemon(DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE, policy, patterns=False)) as daemon:
        conversation = _request(daemon, FIRST)
        assert daemon.shims.live() == []
        assert conversation.is_private("mcp__notes__read") and conversation.is_private("mcp__keys__vault")
        assert not conversation.is_private("mcp__notes__list") and not conversation.is_private("Bash")
