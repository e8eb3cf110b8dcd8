"""Freshness validators and partial hits: a changed token is a miss; a superset result serves a subset."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from forethought import Effect, PartialRule, Runtime, Tool, ToolCall
from forethought.telemetry import Event, EventKind

SEARCH_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
                 "required": ["q"]}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Files:
    """A fake file store whose version token is what the validator checks."""

    def __init__(self) -> None:
        self.contents = {"a": "one"}
        self.versions = {"a": 1}
        self.reads = 0

    def read(self, path: str) -> str:
        self.reads += 1
        return self.contents[path]

    def write(self, path: str, text: str) -> None:
        self.contents[path] = text
        self.versions[path] = self.versions.get(path, 0) + 1

    def token(self, call: ToolCall) -> int:
        return self.versions.get(call.arguments["path"], 0)


def read_tool(files: Files, validator: Any = None) -> Tool:
    return Tool(name="read", fn=files.read, effect=Effect.READ_ONLY, validator=validator or files.token,
                parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


async def test_unchanged_validator_token_is_a_hit() -> None:
    files = Files()
    runtime = Runtime([read_tool(files)])
    session = runtime.session()
    session.speculate(ToolCall("read", {"path": "a"}))
    await settle()
    outcome = await session.execute_detailed(ToolCall("read", {"path": "a"}))
    assert (outcome.kind, outcome.value, files.reads) == ("hit", "one", 1)
    await session.close()
    runtime.close()


async def test_changed_validator_token_is_a_miss_and_reads_fresh() -> None:
    files = Files()
    runtime = Runtime([read_tool(files)])
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    session.speculate(ToolCall("read", {"path": "a"}))
    await settle()
    files.write("a", "two")  # changed behind the runtime's back (not through a tool)
    outcome = await session.execute_detailed(ToolCall("read", {"path": "a"}))
    assert (outcome.kind, outcome.value, files.reads) == ("miss", "two", 2)
    assert EventKind.STALE in {e.kind for e in events}
    assert session.stats().stale == 1 and session.stats().hits == 0
    await session.close()
    runtime.close()


async def test_async_and_failing_validators() -> None:
    files = Files()
    calls = 0

    async def flaky(call: ToolCall) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError("cannot stat")
        return 1

    runtime = Runtime([read_tool(files, flaky)])
    session = runtime.session()
    session.speculate(ToolCall("read", {"path": "a"}))
    await settle()
    outcome = await session.execute_detailed(ToolCall("read", {"path": "a"}))
    assert outcome.kind == "miss" and outcome.value == "one"  # a validator that fails at claim: not fresh
    await session.close()
    runtime.close()


def covers(cached: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    return bool(cached["q"] == requested["q"] and cached["limit"] >= requested["limit"])


def narrow(requested: Mapping[str, Any], result: Any) -> Any:
    return result[: requested["limit"]]


def search_tool(log: list[tuple[str, int]]) -> Tool:
    async def search(q: str, limit: int = 10) -> list[str]:
        log.append((q, limit))
        return [f"{q}-{i}" for i in range(limit)]

    return Tool(name="search", fn=search, effect=Effect.READ_ONLY, parameters=SEARCH_SCHEMA,
                partial=PartialRule(covers, narrow))


async def test_subset_request_is_served_from_a_superset_as_partial_hit() -> None:
    log: list[tuple[str, int]] = []
    runtime = Runtime([search_tool(log)])
    events: list[Event] = []
    runtime.telemetry.subscribe(events.append)
    session = runtime.session()
    session.speculate(ToolCall("search", {"q": "cats", "limit": 10}))
    await settle()
    outcome = await session.execute_detailed(ToolCall("search", {"q": "cats", "limit": 5}))
    assert outcome.kind == "partial_hit"
    assert outcome.value == [f"cats-{i}" for i in range(5)]
    assert log == [("cats", 10)]  # served without running the tool again
    stats = session.stats()
    assert stats.partial_hits == 1 and stats.hits == 0 and stats.misses == 0 and stats.alpha == 1.0
    assert [e.kind for e in events if e.kind is EventKind.PARTIAL_HIT] == [EventKind.PARTIAL_HIT]
    assert runtime.stats().partial_hits == 1
    await session.close()
    runtime.close()


async def test_requests_the_cached_result_does_not_cover_run_normally() -> None:
    log: list[tuple[str, int]] = []
    runtime = Runtime([search_tool(log)])
    session = runtime.session()
    session.speculate(ToolCall("search", {"q": "cats", "limit": 5}))
    await settle()
    bigger = await session.execute_detailed(ToolCall("search", {"q": "cats", "limit": 8}))
    other = await session.execute_detailed(ToolCall("search", {"q": "dogs", "limit": 2}))
    assert (bigger.kind, len(bigger.value)) == ("miss", 8)
    assert (other.kind, other.value) == ("miss", ["dogs-0", "dogs-1"])
    exact = await session.execute_detailed(ToolCall("search", {"q": "cats", "limit": 5}))
    assert exact.kind == "hit"  # the exact key still claims its own entry
    assert session.stats().partial_hits == 0
    await session.close()
    runtime.close()


async def test_a_write_since_the_superset_started_prevents_a_partial_hit() -> None:
    log: list[tuple[str, int]] = []
    touch = Tool(name="touch", fn=lambda: None, effect=Effect.DESTRUCTIVE)
    runtime = Runtime([search_tool(log), touch])
    session = runtime.session()
    session.speculate(ToolCall("search", {"q": "cats"}))
    await settle()
    await session.execute(ToolCall("touch"))
    outcome = await session.execute_detailed(ToolCall("search", {"q": "cats", "limit": 3}))
    assert outcome.kind == "miss" and log == [("cats", 10), ("cats", 3)]
    await session.close()
    runtime.close()
