"""Private means private: planted secrets never reach an output channel the core owns.

A private tool and a tool with a private argument are speculated, hit, missed, wasted, rejected (bad
arguments), failed and conflicted; then every channel is searched for the secrets: telemetry events (their
repr and every field), log records at every level of every logger, the Prometheus text, ticket, outcome
and settled-speculation reprs, and the messages of every exception raised. Key hashes are keyed with a
per-runtime secret, and absent for calls of private tools.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from conftest import settle
from forethought import Effect, Policy, Tool, ToolPolicy, tool
from forethought._core.calls import ToolCall, parse_arguments_json
from forethought._core.policy_file import policy_from_mapping
from forethought._core.runtime import Runtime, SettledSpeculation
from forethought.errors import ForethoughtError
from forethought.sandbox.objects import ObjectState
from forethought.telemetry import Event, key_hash

PIN = "q7319"  # a letter in it: a bare digit run could turn up inside any float a channel prints
TOKEN = "tok-SECRET-4242"
SECRETS = (PIN, TOKEN)


def private_tools(cell: ObjectState) -> list[Tool]:
    @tool(effect=Effect.READ_ONLY)
    async def unlock(account: str, pin: str) -> str:
        if pin == "0000":
            raise ValueError(f"wrong pin {pin}")
        return f"unlocked {account}"

    @tool(effect=Effect.PURE)
    async def login(user: str, token: str, mode: str = "fast") -> str:
        if token.endswith("bad"):
            raise RuntimeError(f"token {token} refused")
        return f"hello {user}"

    def remember(target: Any, note: str) -> int:
        target["notes"].append(note)
        return len(target["notes"])

    note = Tool(name="remember", fn=remember, effect=Effect.ISOLATED_WRITE, state=cell, parameters={
        "type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]})
    return [unlock, login, note]


POLICY = Policy(max_calls_per_turn=100, tools={
    "unlock": ToolPolicy(private=True),
    "remember": ToolPolicy(private=True),
    "login": ToolPolicy(private_arguments=frozenset({"token"})),
})


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


async def test_planted_secrets_reach_no_output_channel(caplog: pytest.LogCaptureFixture) -> None:
    cell = ObjectState({"notes": []})
    runtime = Runtime(private_tools(cell), POLICY)
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    outputs: list[str] = []
    errors: list[BaseException] = []
    caplog.set_level(logging.DEBUG)
    session = runtime.session()

    def watch(settled: SettledSpeculation) -> None:
        outputs.append(repr(settled))

    calls = [ToolCall("unlock", {"account": "acct", "pin": PIN}),
             ToolCall("login", {"user": "ann", "token": TOKEN}),
             ToolCall("remember", {"note": f"pin is {PIN}"})]
    for call in calls:
        ticket = session.speculate(call, source="p", confidence=0.9)
        outputs.append(repr(ticket))
        assert ticket.key is not None
        session.on_settled(ticket.key, watch)
    outputs.append(repr(session.speculate(ToolCall("unlock", {"account": "acct", "pin": PIN + "9"}))))  # wasted
    outputs.append(repr(session.speculate(ToolCall("remember", {"note": TOKEN}))))  # will conflict
    outputs.append(repr(session.speculate(ToolCall("login", {"user": "ann", "token": 5, "x": TOKEN}))))
    outputs.append(repr(session.speculate(ToolCall("login", {"user": "ann", "token": TOKEN, "mode": TOKEN}))))
    await settle(session)
    for call in calls:
        outputs.append(repr(await session.execute_detailed(call)))
    await session.execute(ToolCall("remember", {"note": TOKEN}))
    for bad in (ToolCall("unlock", {"account": "acct", "pin": "0000"}),
                ToolCall("login", {"user": "ann", "token": TOKEN + "bad"}),
                ToolCall("login", {"user": "ann", "token": 7, "mode": TOKEN}),
                ToolCall("unlock", {"account": "acct", "pin": PIN, "extra": PIN})):
        with pytest.raises(ForethoughtError) as info:
            await session.execute(bad)
        errors.append(info.value)
    with pytest.raises(ForethoughtError) as info:
        parse_arguments_json('{"pin": "' + PIN + '", }', "unlock")
    errors.append(info.value)
    session.end_turn()
    await session.close()

    assert events, "the scenario emitted no events"
    for event in events:
        assert not leaks(repr(event)), event
        assert event.tool != "unlock" and event.tool != "remember"  # private tools are not even named
    for event in events:
        if event.tool == "<private>":
            assert event.key_hash == ""
    assert not leaks(runtime.telemetry.exposition().decode())
    assert b'tool="unlock"' not in runtime.telemetry.exposition()
    for record in caplog.records:
        assert not leaks(record.getMessage()), record.getMessage()
        assert not leaks(caplog.text)
    for text in outputs:
        assert not leaks(text), text
    assert len(errors) == 5
    for exc in errors:
        assert not leaks(str(exc)) and not leaks(repr(exc)), exc
    runtime.close()


def test_invalid_arguments_name_the_path_not_the_value() -> None:
    t = Tool(name="f", fn=lambda **kw: kw, effect=Effect.PURE, parameters={
        "type": "object", "properties": {"units": {"enum": ["metric", "imperial"]}, "n": {"type": "integer"},
                                         "x": {"type": "number"}}})
    for arguments in ({"units": TOKEN}, {"n": 1.5}, {"n": TOKEN}, {"x": float("nan")}):
        with pytest.raises(ForethoughtError) as info:
            t.arguments.keyed(ToolCall("f", arguments))
        message = str(info.value)
        assert "argument " in message and not leaks(message) and "1.5" not in message and "nan" not in message


SECRET_NUMBER = 4111111111111111


@pytest.mark.parametrize("arguments", [
    {"card": {SECRET_NUMBER: "visa"}}, {"card": {"nested": {SECRET_NUMBER: 1}}}, {SECRET_NUMBER: "x"},
    {"card": [{(SECRET_NUMBER, PIN): 1}]},
])
async def test_a_non_string_object_key_is_named_by_its_kind_never_quoted(arguments: dict[Any, Any]) -> None:
    def fn(**kw: Any) -> Any:
        return kw
    open_tool = Tool("secret_tool_name", fn, parameters={"type": "object", "properties": {"card": {}}},
                     effect=Effect.READ_ONLY, private=True)
    runtime = Runtime([open_tool])
    session = runtime.session()
    ticket = session.speculate(ToolCall("secret_tool_name", arguments), source="p", confidence=0.9)
    assert ticket.status == "rejected"
    with pytest.raises(ForethoughtError) as info:
        await session.execute(ToolCall("secret_tool_name", arguments))
    for text in (repr(ticket), str(ticket.reason), str(info.value), repr(info.value)):
        assert str(SECRET_NUMBER) not in text and PIN not in text, text
        assert "secret_tool_name" not in text, text  # a private tool's name stays out of both too
    assert "an object key is a" in str(info.value)
    await session.close()
    runtime.close()


def test_key_hashes_are_keyed_per_runtime() -> None:
    key = 'login\x1f{"token":"7319"}'
    a, b = Runtime(), Runtime()
    assert a.telemetry.key_hash(key) != b.telemetry.key_hash(key)
    assert a.telemetry.key_hash(key) == a.telemetry.key_hash(key)
    assert a.telemetry.key_hash(key) != key_hash(key)
    # 10,000 PINs hashed without the secret find nothing: the unkeyed digest is not what events carry.
    seen = a.telemetry.key_hash(key)
    assert all(key_hash('login\x1f{"token":"' + f"{n:04d}" + '"}') != seen for n in range(10_000))
    a.close()
    b.close()


def test_policy_files_set_privacy() -> None:
    policy = policy_from_mapping({"tools": {"unlock": {"private": True},
                                            "login": {"private_arguments": ["token"]}}})
    runtime = Runtime(private_tools(ObjectState({"notes": []})), policy)
    assert runtime.tools["unlock"].private and not runtime.tools["login"].private
    assert runtime.tools["login"].private_arguments == frozenset({"token"})
    runtime.close()


async def test_an_agent_s_pattern_store_never_holds_a_private_value(tmp_path: Any) -> None:
    """Privacy declared by the runtime's policy (a private tool, a tool with a private argument): the Agent's
    predictors never learn those calls, so nothing of them reaches the pattern store's files."""
    from forethought import PatternPredictor
    from forethought.agent.loop import Agent
    from forethought.llm.fake import FakeLLMClient, scripted_message
    from forethought.predictors.patterns.store import SqlitePatternStore

    def lookup_account(account: str) -> str:
        return "balance 10"

    def lookup_topic(topic: str, page: int = 1) -> str:
        return "ok"

    tools = [tool(lookup_account, effect=Effect.READ_ONLY), tool(lookup_topic, effect=Effect.READ_ONLY)]
    policy = Policy(tools={"lookup_account": ToolPolicy(private=True),
                           "lookup_topic": ToolPolicy(private_arguments=frozenset({"topic"}))})
    predictor = PatternPredictor.for_tools({t.name: dict(t.parameters) for t in tools},
                                           SqlitePatternStore(tmp_path / "patterns.sqlite"))
    plan = [[ToolCall("lookup_account", {"account": TOKEN})], [ToolCall("lookup_topic", {"topic": PIN, "page": 2})],
            [ToolCall("lookup_account", {"account": TOKEN})]]

    def respond(request: Any) -> Any:
        step = sum(1 for m in request.messages if m["role"] == "assistant")
        return scripted_message("x", plan[step]) if step < len(plan) else scripted_message("done")

    agent = Agent(FakeLLMClient(respond=respond), "m", tools, Runtime(policy=policy), predictors=[predictor])
    await agent.run([{"role": "user", "content": "check my account"}])
    await agent.close()
    predictor.close()
    for path in tmp_path.iterdir():
        assert not leaks(path.read_bytes().decode("utf-8", "replace")), path.name


def _agent_with_store(tmp_path: Any, plan: list[list[ToolCall]], first: list[dict[str, Any]],
                      runs: int = 1) -> Any:
    """Run an Agent (a private tool ``vault_secret_lookup`` and a public ``weather``) ``runs`` times with a
    SQLite pattern store; the store's keys and its files' bytes after."""
    import asyncio
    import sqlite3

    from forethought import PatternPredictor
    from forethought.agent.loop import Agent
    from forethought.llm.fake import FakeLLMClient, scripted_message
    from forethought.predictors.patterns.store import SqlitePatternStore

    def vault_secret_lookup(account: str) -> str:
        return json.dumps({"holder": TOKEN, "city": "Paris"})

    def weather(city: str) -> str:
        return "sunny"

    tools = [tool(vault_secret_lookup, effect=Effect.READ_ONLY), tool(weather, effect=Effect.READ_ONLY)]
    policy = Policy(tools={"vault_secret_lookup": ToolPolicy(private=True)})
    predictor = PatternPredictor.for_tools({t.name: dict(t.parameters) for t in tools},
                                           SqlitePatternStore(tmp_path / "patterns.sqlite"))

    def respond(request: Any) -> Any:
        step = sum(1 for m in request.messages if m["role"] == "assistant")
        return scripted_message("x", plan[step]) if step < len(plan) else scripted_message("done")

    async def go() -> None:
        for _ in range(runs):
            agent = Agent(FakeLLMClient(respond=respond), "m", tools, Runtime(policy=policy), predictors=[predictor])
            await agent.run(first)
            await agent.close()

    asyncio.run(go())
    predictor.close()
    conn = sqlite3.connect(tmp_path / "patterns.sqlite")
    keys = [k for (k,) in conn.execute("select key from pattern_counts")]
    conn.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    return keys, raw


@pytest.mark.parametrize("first", [
    [{"role": "user", "content": "look up my account then the weather"}],
    [{"role": "system", "content": "You are an autonomous account checker."}],  # calls only: no user text
])
def test_a_private_call_leaves_nothing_in_the_store_through_later_calls(tmp_path: Any,
                                                                       first: list[dict[str, Any]]) -> None:
    """A private call sits in the history (and messages) of the public calls learnt after it: neither its
    name, nor its argument, nor its output reaches the pattern store, while the public calls are learnt."""
    plan = [[ToolCall("vault_secret_lookup", {"account": PIN})], [ToolCall("weather", {"city": "Paris"})]]
    keys, raw = _agent_with_store(tmp_path, plan, first, runs=3)
    assert any("weather" in k for k in keys)  # the public call was learnt
    for secret in (PIN, TOKEN, "vault_secret_lookup"):
        assert not [k for k in keys if secret in k], secret
        assert secret.encode() not in raw, secret


def test_learnable_context_drops_private_calls_and_keeps_the_rest() -> None:
    from forethought.agent.learnable import learnable
    from forethought.predictors.base import ObservedCall, PredictionContext

    secret = ObservedCall(ToolCall("vault", {"a": PIN}), TOKEN)
    public = ObservedCall(ToolCall("weather", {"city": "Oslo"}), "sunny")
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "vault", "arguments": PIN}},
                    {"id": "2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "1", "content": TOKEN},
                {"role": "tool", "tool_call_id": "2", "content": "sunny"},
                {"role": "assistant", "content": "x", "tool_calls": [
                    {"id": "3", "type": "function", "function": {"name": "vault", "arguments": PIN}}]},
                {"role": "tool", "tool_call_id": "3", "content": TOKEN}]
    context = PredictionContext("s", messages, "hi", (secret, public), {"vault": {}, "weather": {}},
                                [{"type": "function", "function": {"name": "vault"}},
                                 {"type": "function", "function": {"name": "weather"}}])
    cleaned = learnable(context, lambda name: name == "vault")
    assert cleaned.history == (public,)
    assert list(cleaned.tools) == ["weather"] and len(cleaned.openai_tools) == 1
    assert not leaks(repr(cleaned)) and "vault" not in repr(cleaned)
    assert [m["role"] for m in cleaned.messages] == ["user", "assistant", "tool", "assistant"]
    assert cleaned.messages[-1] == {"role": "assistant", "content": "x"}
    assert learnable(cleaned, lambda name: name == "vault") is cleaned  # nothing private: the same context


def test_predicting_from_a_private_context_changes_no_counter() -> None:
    """Prediction contexts keep private calls (the predictors may use them to guess); predicting never adds
    to what a predictor keeps, so nothing of them can be saved."""
    from forethought import PatternPredictor
    from forethought.predictors.base import ObservedCall, PredictionContext

    predictor = PatternPredictor()
    predictor.counts.keeps_pending = True
    tools = {"vault": {"type": "object", "properties": {"a": {"type": "string"}}},
             "weather": {"type": "object", "properties": {"city": {"type": "string"}}}}
    for city in ("Oslo", "Paris", "Rome"):
        context = PredictionContext("s", [], f"weather in {city}", (), tools)
        predictor.observe(context, ObservedCall(ToolCall("weather", {"city": city}), "sunny"))
    before = predictor.counts.state()
    secret = ObservedCall(ToolCall("vault", {"a": PIN}), f"city {TOKEN}")
    context = PredictionContext("t", [], "", (secret,), tools)
    predictor.predict_now(context)
    predictor.predict_after(context, secret)
    assert predictor.counts.state() == before
    assert not any(leaks(k) for k in predictor.counts.take_pending()[0])
