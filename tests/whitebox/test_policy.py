"""Policy files fail fast naming the key or line; telemetry never carries argument values."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from forethought import Effect, Policy, Runtime, Tool, ToolCall, load_policy
from forethought._core.policy_file import policy_from_mapping
from forethought.errors import PolicyError, ToolExecutionError
from forethought.sandbox.objects import ObjectState
from forethought.telemetry import Event, EventKind

GOOD = """
max_concurrent = 4
min_confidence = 0.3

[breaker]
window = 10
max_waste_rate = 0.8

[tools.search]
effect = "read_only"
ttl_s = 5.0
cost_units = 2

[tools.send_email]
speculate = false
private = true
private_arguments = ["body"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_a_valid_file_loads(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, GOOD))
    assert policy.max_concurrent == 4 and policy.min_confidence == 0.3
    assert policy.breaker.window == 10 and policy.breaker.max_waste_rate == 0.8
    search = policy.for_tool("search")
    assert search.effect is Effect.READ_ONLY and search.ttl_s == 5.0 and search.cost_units == 2
    email = policy.for_tool("send_email")
    assert not email.speculate and email.private and email.private_arguments == frozenset({"body"})
    assert policy.for_tool("unlisted").speculate


def test_policy_overrides_reach_the_runtime_tools() -> None:
    t = Tool(name="search", fn=lambda q: q, effect=Effect.DESTRUCTIVE)
    runtime = Runtime([t], policy_from_mapping({"tools": {"search": {"effect": "pure", "ttl_s": 3}}}))
    assert runtime.tools["search"].effect is Effect.PURE and runtime.tools["search"].ttl_s == 3


@pytest.mark.parametrize(("text", "named"), [
    ("max_concurrent = 4\nmax_concurrnet = 5\n", "max_concurrnet"),
    ("max_concurrent = 'four'\n", "max_concurrent"),
    ("max_concurrent = 2.5\n", "max_concurrent"),
    ("min_confidence = true\n", "min_confidence"),
    ("[breaker]\nwindw = 3\n", "breaker.windw"),
    ("[breaker]\nwindow = 2.5\n", "breaker.window"),
    ("breaker = 3\n", "breaker"),
    ("tools = 3\n", "tools"),
    ("[tools.search]\neffect = 'sideways'\n", "tools.search.effect"),
    ("[tools.search]\nspeculate = 'yes'\n", "tools.search.speculate"),
    ("[tools.search]\nttl_s = 0\n", "tools.search.ttl_s"),
    ("[tools.search]\ncost_units = -1\n", "tools.search.cost_units"),
    ("[tools.search]\nprivate_arguments = 'body'\n", "tools.search.private_arguments"),
    ("[tools.search]\nprivat = true\n", "tools.search.privat"),
    ("[tools]\nsearch = 1\n", "tools.search"),
])
def test_invalid_keys_fail_fast_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert f"'{named}'" in message and str(path) in message


@pytest.mark.parametrize(("text", "line"), [
    ("max_concurrent = 4\nmin_confidence = = 0.3\n", 2),
    ("[breaker]\nwindow = 3\n\n[tools.search\n", 4),
    ("max_concurrent = 1\nmax_concurrent = 2\n", 2),
])
def test_syntax_errors_name_the_line(tmp_path: Path, text: str, line: int) -> None:
    with pytest.raises(PolicyError, match=f"line {line}"):
        load_policy(write(tmp_path, text))


@pytest.mark.parametrize(("text", "words"), [
    ("min_confidence = 1.5\n", "min_confidence"),
    ("max_concurrent = -1\n", "max_concurrent"),
    ("speculation_timeout_s = 0\n", "speculation_timeout_s"),
])
def test_out_of_range_values_are_refused(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        load_policy(write(tmp_path, text))


def test_a_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(tmp_path / "absent.toml")


def test_policy_is_a_frozen_value() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Policy().max_concurrent = 3  # type: ignore[misc]


# --- privacy -----------------------------------------------------------------------------------------

SECRET = "s3cr3t-Zq9"


def _event_text(event: Event) -> str:
    return " ".join(str(getattr(event, f.name)) for f in dataclasses.fields(event))


async def test_telemetry_events_never_carry_argument_values() -> None:
    """Speculation outcomes, for stateless and snapshot tools, leak neither values nor raw keys."""
    cell = ObjectState({"notes": []})

    async def lookup(user: str, mode: str = "fast") -> str:
        await asyncio.sleep(0)
        if user.endswith("boom"):
            raise ValueError(f"no such user {user}")
        return f"profile of {user}"

    def note(target: Any, text: str) -> int:
        target["notes"].append(text)
        return len(target["notes"])

    lookup_tool = Tool(name="lookup", fn=lookup, effect=Effect.READ_ONLY, parameters={
        "type": "object", "properties": {"user": {"type": "string"}, "mode": {"enum": ["fast", "slow"]}},
        "required": ["user"]})
    note_tool = Tool(name="note", fn=note, effect=Effect.ISOLATED_WRITE, state=cell, parameters={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    runtime = Runtime([lookup_tool, note_tool], policy_from_mapping({"min_confidence": 0.2}))
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()

    hit = ToolCall("lookup", {"user": SECRET})
    session.speculate(hit, source="p", confidence=0.9)
    session.speculate(hit, source="q", confidence=0.9)  # deduplicated
    session.speculate(ToolCall("lookup", {"user": SECRET + "-wrong"}), source="p")  # wasted
    session.speculate(ToolCall("lookup", {"user": SECRET + "-low"}), source="p", confidence=0.1)  # rejected
    session.speculate(ToolCall("note", {"text": SECRET + "-note"}), source="p")  # committed
    session.speculate(ToolCall("note", {"text": SECRET + "-conflict"}), source="p")  # conflicts
    await session.wait_speculations()
    assert await session.execute(hit) == f"profile of {SECRET}"
    await session.execute(ToolCall("note", {"text": SECRET + "-note"}))
    await session.execute(ToolCall("note", {"text": SECRET + "-conflict"}))
    await session.execute(ToolCall("lookup", {"user": SECRET + "-miss"}))
    with pytest.raises(ToolExecutionError):
        await session.execute(ToolCall("lookup", {"user": "boom"}))
    session.end_turn()
    await session.close()

    kinds = {e.kind for e in events}
    assert {EventKind.HIT, EventKind.MISS, EventKind.DEDUPLICATED, EventKind.WASTED,
            EventKind.REJECTED, EventKind.COMMITTED, EventKind.CONFLICT} <= kinds
    for event in events:
        text = _event_text(event)
        assert SECRET not in text, event
        assert len(event.key_hash) in (0, 12) and "{" not in event.key_hash
    assert SECRET.encode() not in generate_latest(runtime.telemetry.registry)
    runtime.close()


async def test_schema_rejections_do_not_leak_the_offending_value() -> None:
    t = Tool(name="lookup", fn=lambda user, mode="fast": user, effect=Effect.PURE, parameters={
        "type": "object", "properties": {"user": {"type": "string"}, "mode": {"enum": ["fast", "slow"]}}})
    runtime = Runtime([t])
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    session.speculate(ToolCall("lookup", {"user": "x", "mode": SECRET}))
    session.speculate(ToolCall(SECRET, {"user": "x"}))
    assert [e.kind for e in events] == [EventKind.REJECTED, EventKind.REJECTED]
    for event in events:
        assert SECRET not in _event_text(event), event
    await session.close()
    runtime.close()


async def test_a_failing_speculation_does_not_leak_its_exception_message() -> None:
    async def lookup(user: str) -> str:
        raise ValueError(f"no such user {user}")

    runtime = Runtime([Tool(name="lookup", fn=lookup, effect=Effect.PURE)])
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    session.speculate(ToolCall("lookup", {"user": SECRET}))
    await session.wait_speculations()
    with pytest.raises(ToolExecutionError):
        await session.execute(ToolCall("lookup", {"user": SECRET}))
    await session.close()
    assert EventKind.FAILED in {e.kind for e in events}
    for event in events:
        assert SECRET not in _event_text(event), event
    runtime.close()
