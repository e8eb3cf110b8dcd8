"""The core's three rules, attacked through several ways in (issue 25).

* **One key.** A speculated result serves a call only if no difference between the guessed and the real call
  can reach the tool. The tool here reveals everything it receives (types included, dict order excepted:
  JSON objects are unordered), so a result served across any reachable difference would show: whatever the
  guess, the caller always gets the tool applied to its own arguments. Driven through the Python API
  (``Session``), the agent loop (a predictor's guess, the model's streamed call) and the stream tap (the
  model's streamed call speculated, the user's own call executed).
* **One write clock.** A write is in progress until its work has really ended, never merely until its caller
  stopped waiting: a read guessed while a write runs is never served, even when the write's caller was
  cancelled and the write went on (a thread, an async tool's own task, an effect outside any tool).
* **One policy resolution.** Where a policy names server tables and the edge cannot say which server a tool
  belongs to, nothing of that tool runs early and it stays private; a resolution never grants more than the
  tables say.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import Agent, Effect, Policy, Runtime, Tool, ToolCall, ToolPolicy, tool
from forethought._core.policy import UNKNOWN_SERVER, ServerPolicy, resolve
from forethought.integrations import tap
from forethought.llm.fake import FakeLLMClient, scripted_message
from forethought.predictors.base import Prediction, PredictionContext
from forethought.sandbox import ObjectState
from forethought.telemetry import EventKind

# --- one key ------------------------------------------------------------------------------------------


def reveal(value: Any) -> str:
    """Everything a tool can tell of ``value`` but dict order: types, spellings, container kinds."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{reveal(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[" + ",".join(reveal(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


class Flag(str):
    """A ``str`` subclass: a Python tool can tell it from a plain string."""


_SCALARS = st.one_of(st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.0]), st.booleans(), st.none(),
                     st.sampled_from(["a", "b", ""]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2)), max_leaves=6)


def near(value: Any) -> st.SearchStrategy[Any]:
    """Spellings of (nearly) the same value: what a sloppy key would confuse with ``value``."""
    options: list[Any] = [value]
    if isinstance(value, bool):
        options += [int(value)]
    elif isinstance(value, int):
        options += [float(value), bool(value) if value in (0, 1) else value]
    elif isinstance(value, float):
        options += [int(value)] if value.is_integer() else []
        options += [-value]
    elif isinstance(value, str):
        options += [Flag(value)]
    elif isinstance(value, list):
        options += [tuple(value)]
    elif isinstance(value, tuple):
        options += [list(value)]
    elif isinstance(value, dict):
        options += [dict(reversed(list(value.items())))]
    return st.sampled_from(options)


PAIRS = _VALUES.flatmap(lambda v: st.tuples(st.just(v), near(v)))


def show_tool() -> Tool:
    @tool(effect=Effect.PURE, threaded=False)
    async def show(x: Any) -> str:
        """Say exactly what it was given."""
        return reveal(x)

    return show


def json_pairs() -> st.SearchStrategy[tuple[Any, Any]]:
    """Pairs of JSON values (what a model's streamed call can hold: no tuples, no subclasses)."""
    def jsonable(v: Any) -> bool:
        return not _holds(v, (tuple, Flag))

    return PAIRS.filter(lambda pair: jsonable(pair[0]) and jsonable(pair[1]))


def _holds(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, kinds):
        return True
    if isinstance(value, dict):
        return any(_holds(v, kinds) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds(v, kinds) for v in value)
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS)
async def test_key_through_the_session(pair: tuple[Any, Any]) -> None:
    guess, real = pair
    runtime = Runtime([show_tool()])
    session = runtime.session()
    session.speculate(ToolCall("show", {"x": guess}))
    await session.wait_speculations()
    outcome = await session.execute_detailed(ToolCall("show", {"x": real}))
    assert outcome.value == reveal(real)
    if reveal(guess) == reveal(real):
        assert outcome.kind == "hit"  # nothing a tool can tell apart: the guess serves
    await session.close()
    runtime.close()


class _Guess:
    """A predictor that guesses one fixed call."""

    name = "fixed"

    def __init__(self, call: ToolCall) -> None:
        self.call = call

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        return [Prediction(self.call, 1.0, "fixed")]

    def observe(self, context: PredictionContext, observed: Any) -> None:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS.filter(lambda pair: not _holds(pair[1], (tuple, Flag))))
async def test_key_through_the_agent_loop(pair: tuple[Any, Any]) -> None:
    guess, real = pair
    runtime = Runtime([show_tool()])
    client = FakeLLMClient([scripted_message(calls=[ToolCall("show", {"x": real})]), scripted_message("done")])
    agent = Agent(client, "m", list(runtime.tools.values()), runtime,
                  predictors=[_Guess(ToolCall("show", {"x": guess}))])
    try:
        result = await agent.run([{"role": "user", "content": "show it"}])
    finally:
        await agent.close()
        runtime.close()
    (record,) = result.tool_records
    # the model's call is JSON: what the tool gets is its parsed arguments
    parsed = json.loads(json.dumps({"x": real}))["x"]
    assert record.output == reveal(parsed)


async def _chunks(arguments_text: str) -> AsyncIterator[dict[str, Any]]:
    yield {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c0", "function": {"name": "show", "arguments": arguments_text}}]}}]}
    yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS.filter(lambda pair: not _holds(pair[0], (tuple, Flag))))
async def test_key_through_the_tap(pair: tuple[Any, Any]) -> None:
    streamed, own = pair  # the model streams ``streamed``; the user's loop executes its own spelling
    runtime = Runtime([show_tool()])
    session = runtime.session()
    tapped = tap(_chunks(json.dumps({"x": streamed})), session)
    async for _ in tapped:
        pass
    assert [c.name for c in tapped.calls] == ["show"]
    await session.wait_speculations()
    outcome = await session.execute_detailed(ToolCall("show", {"x": own}))
    assert outcome.value == reveal(own)
    await session.close()
    runtime.close()


# --- one write clock ---------------------------------------------------------------------------------


def store_tools(cell: ObjectState, gate: threading.Event, entered: threading.Event) -> list[Tool]:
    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def get(key: str) -> Any:
        """A read that declares no state: any write of the runtime can change it."""
        return cell.live.get(key)

    @tool(effect=Effect.DESTRUCTIVE, threaded=True)
    def put_slowly(key: str, value: str) -> None:
        """A write on a thread that goes on after its caller stopped waiting."""
        entered.set()
        gate.wait(5)
        cell.live[key] = value

    release = asyncio.Event()

    @tool(effect=Effect.DESTRUCTIVE, threaded=False)
    async def put_async(key: str, value: str) -> None:
        """An async write whose cancellation it finishes before it ends (its own task goes on)."""
        entered.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # finishing its work: the write is still in progress meanwhile
            cell.live[key] = value
            raise

    return [get, put_slowly, put_async]


@pytest.mark.parametrize("writer", ["thread", "task", "untracked"])
@pytest.mark.parametrize("reader_session", ["same", "other"])
async def test_clock_a_write_ends_when_its_work_does(writer: str, reader_session: str) -> None:
    cell = ObjectState({"k": "old"})
    gate, entered = threading.Event(), threading.Event()
    runtime = Runtime(store_tools(cell, gate, entered))
    writing = runtime.session("writer")
    reading = writing if reader_session == "same" else runtime.session("reader")
    if writer == "untracked":
        write = writing.begin_untracked_write()
        reading.speculate(ToolCall("get", {"key": "k"}))  # guessed while the effect is in progress
        await reading.wait_speculations()
        cell.live["k"] = "new"
        write.end()
    else:
        name = "put_slowly" if writer == "thread" else "put_async"
        call = asyncio.create_task(writing.execute(ToolCall(name, {"key": "k", "value": "new"})))
        await asyncio.to_thread(entered.wait, 5)
        call.cancel()  # the caller stops waiting; the write goes on
        with pytest.raises(asyncio.CancelledError):
            await call
        reading.speculate(ToolCall("get", {"key": "k"}))  # guessed while the write still runs
        await reading.wait_speculations()
        gate.set()
        for _ in range(200):
            if cell.live["k"] == "new":
                break
            await asyncio.sleep(0.005)
    await asyncio.sleep(0.02)
    outcome = await reading.execute_detailed(ToolCall("get", {"key": "k"}))
    assert outcome.value == "new" and outcome.kind == "miss"
    for s in {writing, reading}:
        await s.close()
    runtime.close(wait=True)


async def test_clock_a_read_that_declares_no_state_is_made_stale_by_any_sessions_write() -> None:
    cell = ObjectState({"k": "old"})
    runtime = Runtime(store_tools(cell, threading.Event(), threading.Event()))
    a, b = runtime.session("a"), runtime.session("b")
    a.speculate(ToolCall("get", {"key": "k"}))
    await a.wait_speculations()

    @tool(effect=Effect.DESTRUCTIVE, threaded=False)
    async def put(key: str, value: str) -> None:
        cell.live[key] = value

    c = runtime.session("c", tools=[put])
    await c.execute(ToolCall("put", {"key": "k", "value": "new"}))
    outcome = await a.execute_detailed(ToolCall("get", {"key": "k"}))
    assert (outcome.kind, outcome.value) == ("miss", "new")
    for s in (a, b, c):
        await s.close()
    runtime.close()


# --- one policy resolution ---------------------------------------------------------------------------

_TOOL_POLICIES = st.builds(ToolPolicy, effect=st.one_of(st.none(), st.sampled_from(list(Effect))),
                           speculate=st.booleans(), private=st.booleans())
_SERVER_TABLES = st.dictionaries(st.sampled_from(["git", "fs", "*"]), st.builds(
    ServerPolicy, trusted=st.booleans(), tools=st.dictionaries(st.sampled_from(["read", "write"]), _TOOL_POLICIES,
                                                               max_size=2)), max_size=3)
_HINTS = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"readOnlyHint": st.one_of(st.booleans(),
                                                                                             st.text(max_size=2))}))


@settings(max_examples=300, deadline=None)
@given(_SERVER_TABLES, st.booleans(), st.sampled_from(["read", "write", "other"]), _HINTS)
def test_policy_fails_closed_where_a_server_cannot_be_matched(servers: dict[str, ServerPolicy], trust: bool,
                                                            name: str, hints: Any) -> None:
    policy = Policy(servers=servers, trust_servers=trust)
    resolved = resolve(policy, name, server=UNKNOWN_SERVER, hints=hints)
    if policy.named_servers():
        assert not resolved.early and resolved.private and resolved.unmatched
        assert resolved.effect is Effect.DESTRUCTIVE
    for server in ("git", "fs", "other"):
        known = resolve(policy, name, server=server, hints=hints)
        table = policy.server(server)
        override = table.tools.get(name)
        if override is not None and override.effect is not None:
            assert known.effect is override.effect
        elif known.effect is Effect.READ_ONLY:  # a hint made it a read: only on a trusted server
            assert table.trusted and isinstance(hints, Mapping) and hints.get("readOnlyHint") is True
        if override is not None and not override.speculate:
            assert not known.speculate
        if override is not None and override.private:
            assert known.private


@pytest.mark.parametrize("server", ["git", None, "unknown"])
async def test_policy_through_a_runtime_session(server: str | None) -> None:
    ran: list[str] = []

    @tool(effect=Effect.DESTRUCTIVE, threaded=False)
    async def status(repo: str) -> str:
        """What the server says (it hints it is read-only)."""
        ran.append(repo)
        return "clean"

    hinted = Tool(status.name, status.fn, status.parameters, annotations={"readOnlyHint": True})
    policy = Policy(servers={"git": ServerPolicy(trusted=True, tools={"status": ToolPolicy(private=True)})})
    runtime = Runtime(policy=policy)
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    edge_server = UNKNOWN_SERVER if server == "unknown" else server
    session = runtime.session(tools=[hinted], server=edge_server)
    ticket = session.speculate(ToolCall("status", {"repo": "r"}))
    await session.wait_speculations()
    resolved = session.tools.get_tool("status")
    if server == "git":  # matched: trusted, so its hint counts; private as the table says
        assert ticket.launched and ran == ["r"] and resolved.private
    else:
        assert not ticket.launched and ran == []  # no table applies (no server) / cannot be matched
    if server == "unknown":
        assert resolved.private and any(e.kind is EventKind.POLICY for e in events)
        assert all("'r'" not in repr(e) and "status" not in e.tool for e in events)
    await session.close()
    runtime.close()


async def test_policy_resolving_a_resolved_tool_again_never_grants_more() -> None:
    """An edge that resolved a tool itself (speculation off, private) and hands it to a session resolving for
    another server (or none) keeps what its resolution took away; a tool's own server wins over the session's."""
    ran: list[str] = []

    async def read(path: str) -> str:
        ran.append(path)
        return "x"

    policy = Policy(servers={"fs": ServerPolicy(trusted=True, tools={"read": ToolPolicy(speculate=False)})})
    runtime = Runtime(policy=policy)
    base = Tool("read", read, {"type": "object", "properties": {"path": {"type": "string"}}},
                annotations={"readOnlyHint": True})
    resolved = resolve(policy, "read", server="fs", hints=base.annotations).apply(base)
    assert not resolved.speculate
    for server in (None, "other", UNKNOWN_SERVER):
        session = runtime.session(tools=[resolved], server=server)
        assert not session.speculate(ToolCall("read", {"path": "p"})).launched
        await session.close()
    own = Tool("read", read, base.parameters, annotations={"readOnlyHint": True}, server="fs")
    session = runtime.session(tools=[own], server="other")  # its own server's table: speculation off
    assert not session.speculate(ToolCall("read", {"path": "p"})).launched
    await session.close()
    trusted = Tool("read", read, base.parameters, annotations={"readOnlyHint": True}, server="git")
    runtime_git = Runtime(policy=Policy(servers={"git": ServerPolicy(trusted=True)}))
    session = runtime_git.session(tools=[trusted])  # no session server: the tool's own, trusted
    assert session.speculate(ToolCall("read", {"path": "q"})).launched
    await session.wait_speculations()
    assert ran == ["q"]
    await session.close()
    runtime.close()
    runtime_git.close()
