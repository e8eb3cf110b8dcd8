"""The speculation store: claim by exact key, at most once, expiry listing, per-tool lookup."""

from __future__ import annotations

import asyncio

import pytest

from forethought import Effect, FakeClock, Tool, ToolCall
from forethought._core.entry import Entry
from forethought._core.store import SpeculationStore


def make_entry(key: str, tool: Tool, expires: float = 100.0) -> Entry:
    return Entry(key=key, call=ToolCall(tool.name, {}), arguments={}, given={}, tool=tool, source="p", confidence=0.5,
                 created=0.0, expires=expires, now=FakeClock(0.0).monotonic)


A = Tool("a", lambda: 1, effect=Effect.PURE)
B = Tool("b", lambda: 2, effect=Effect.PURE)


def test_pop_claims_at_most_once() -> None:
    store = SpeculationStore()
    entry = make_entry("a\x1f{}", A)
    store.add(entry)
    assert "a\x1f{}" in store and len(store) == 1 and store.get("a\x1f{}") is entry
    assert store.pop("a\x1f{}") is entry
    assert store.pop("a\x1f{}") is None and len(store) == 0


def test_a_second_entry_for_a_key_is_refused() -> None:
    store = SpeculationStore()
    store.add(make_entry("k", A))
    with pytest.raises(ValueError, match="already in the store"):
        store.add(make_entry("k", A))


def test_lookup_by_tool_and_expiry() -> None:
    store = SpeculationStore()
    store.add(make_entry("a1", A, expires=5.0))
    store.add(make_entry("a2", A, expires=50.0))
    store.add(make_entry("b1", B, expires=5.0))
    assert sorted(e.key for e in store.of_tool("a")) == ["a1", "a2"]
    assert sorted(e.key for e in store.expired(5.0)) == ["a1", "b1"]
    assert store.expired(4.99) == []
    store.pop("a1")
    assert [e.key for e in store.of_tool("a")] == ["a2"]
    assert sorted(e.key for e in store) == ["a2", "b1"]


async def test_run_seconds_and_succeeded_follow_the_task() -> None:
    entry = make_entry("k", A)
    assert entry.run_seconds == 0.0 and not entry.succeeded()

    async def work() -> int:
        return 1

    entry.task = asyncio.get_running_loop().create_task(work())
    entry.started, entry.finished = 10.0, 12.5
    await entry.task
    assert entry.run_seconds == 2.5 and entry.succeeded()
    entry.error = RuntimeError("x")
    assert not entry.succeeded()
    store = SpeculationStore()
    store.add(entry)
    assert store.running_count() == 0
