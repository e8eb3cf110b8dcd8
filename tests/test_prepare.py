"""Prepare hooks: run for hints with the known arguments, once per tool per turn, never surfaced."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from conftest import spin
from forethought import Effect, Policy, Runtime, Tool, ToolCall, ToolPolicy, tool
from forethought.errors import ToolDefinitionError
from forethought.telemetry import EventKind
from forethought.testing import FixedPressure


def lookup(hook: Any, effect: Effect = Effect.READ_ONLY) -> Tool:
    @tool(effect=effect, prepare=hook)
    async def fetch(city: str, day: str) -> str:
        return f"{city} {day}"

    return fetch


async def test_a_hint_runs_the_hook_with_its_known_arguments_once_per_turn() -> None:
    seen: list[Mapping[str, Any]] = []

    async def warm(known: Mapping[str, Any]) -> None:
        seen.append(known)

    runtime = Runtime([lookup(warm)])
    events: list[tuple[EventKind, str]] = []
    runtime.telemetry.subscribe(lambda e: events.append((e.kind, e.detail)))
    session = runtime.session()
    known = {"city": "Oslo"}
    assert session.prepare("fetch", known, source="pattern")
    assert not session.prepare("fetch", {"city": "Rome"})  # once per tool per turn
    known["city"] = "changed"  # the hook got its own copy
    await spin(5)
    assert seen == [{"city": "Oslo"}]
    assert (EventKind.PREPARED, "ok") in events
    session.end_turn()
    assert session.prepare("fetch", {})
    await spin(5)
    assert seen == [{"city": "Oslo"}, {}]
    # The call itself is untouched by any of it.
    assert await session.execute(ToolCall("fetch", {"city": "Oslo", "day": "mon"})) == "Oslo mon"
    await session.close()


async def test_a_failing_or_sync_hook_is_counted_never_raised() -> None:
    threads: list[str] = []

    def warm(known: Mapping[str, Any]) -> None:
        threads.append(threading.current_thread().name)
        raise ConnectionError("cache down")

    runtime = Runtime([lookup(warm)])
    events: list[tuple[EventKind, str]] = []
    runtime.telemetry.subscribe(lambda e: events.append((e.kind, e.detail)))
    session = runtime.session()
    assert session.prepare("fetch", {"city": "x"})
    await session.wait_speculations(30)
    await session.close()
    assert threads and threads[0].startswith("forethought-spec")  # a sync hook never blocks the loop
    assert (EventKind.PREPARED, "ConnectionError") in events
    runtime.close()


@pytest.mark.parametrize("case", ["no hook", "unknown tool", "denied", "closed", "off", "not a name"])
async def test_no_hook_runs_where_it_must_not(case: str) -> None:
    ran: list[int] = []

    async def warm(known: Mapping[str, Any]) -> None:
        ran.append(1)

    policy = Policy(tools={"fetch": ToolPolicy(speculate=False)}) if case == "denied" else Policy(backoff=True)
    pressure = FixedPressure(1.0 if case == "off" else 0.0)
    runtime = Runtime([lookup(None if case == "no hook" else warm)], policy, pressure=pressure)
    session = runtime.session()
    if case == "closed":
        await session.close()
    name: Any = {"unknown tool": "nope", "not a name": ["fetch"]}.get(case, "fetch")
    assert not session.prepare(name, {"city": "x"})
    await spin(5)
    assert ran == []
    await session.close()


def test_a_hook_that_is_not_callable_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError, match="prepare is not callable"):
        lookup("warm")
