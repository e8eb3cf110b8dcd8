"""Equivalence promises off the home workload (issue 12): isolated results, arguments as given, versions
that belong to the state, and a hit that is never slower than a miss.

Each test is the smallest program that broke the promise before it was kept; time comes from a fake clock
or from gates, never from a timed assertion.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conftest import FakeClock, Gate, settle, spin
from forethought import Effect, PartialRule, Policy, Tool, ToolCall, ToolPolicy, tool
from forethought._core.runtime import Runtime, SettledSpeculation
from forethought.sandbox.objects import ObjectState

# --- 1. result isolation ---------------------------------------------------------------------------


async def test_a_served_result_belongs_to_its_caller_alone() -> None:
    @tool(effect=Effect.PURE, partial=PartialRule(
        covers=lambda cached, requested: requested["n"] <= cached["n"],
        narrow=lambda requested, result: result[: requested["n"]]))
    async def rows(n: int) -> list[dict[str, int]]:
        return [{"i": i} for i in range(n)]

    runtime = Runtime([rows])
    session = runtime.session()
    session.speculate(ToolCall("rows", {"n": 3}))
    watched: list[SettledSpeculation] = []
    key = session.resolve(ToolCall("rows", {"n": 3}))[2]
    assert session.on_settled(key, watched.append)
    await settle(session)
    first = await session.execute_detailed(ToolCall("rows", {"n": 2}))
    assert first.kind == "partial_hit"
    first.value[0]["i"] = 99  # the caller changes what it was given
    first.value.append({"i": -1})
    second = await session.execute_detailed(ToolCall("rows", {"n": 2}))
    assert second.kind == "partial_hit" and second.value == [{"i": 0}, {"i": 1}]
    exact = await session.execute_detailed(ToolCall("rows", {"n": 3}))
    assert exact.kind == "hit" and exact.value == [{"i": 0}, {"i": 1}, {"i": 2}]
    exact.value[2]["i"] = 42
    assert watched[0].value == [{"i": 0}, {"i": 1}, {"i": 2}]  # a watcher's view is its own too
    watched[0].value.clear()
    assert exact.value == [{"i": 0}, {"i": 1}, {"i": 42}]
    await session.close()
    runtime.close()


# --- 2. arguments as given -------------------------------------------------------------------------


async def test_a_tool_receives_the_callers_arguments_exactly() -> None:
    seen: list[Any] = []

    @tool(effect=Effect.PURE)
    async def scale(x: float, factor: float = 2.0) -> str:
        seen.append(x)
        return repr(x * factor)

    runtime = Runtime([scale])
    session = runtime.session()
    big = 2**60 + 1
    assert await session.execute(ToolCall("scale", {"x": big})) == repr(big * 2.0)
    assert seen[-1] == big and type(seen[-1]) is int  # not rounded to a float on the way in
    assert await session.execute(ToolCall("scale", {"x": 3})) == repr(3 * 2.0)
    assert type(seen[-1]) is int
    await session.close()
    runtime.close()


async def test_spellings_a_tool_can_tell_apart_never_share_a_result() -> None:
    @tool(effect=Effect.PURE)
    async def show(x: float) -> str:
        return repr(x)

    runtime = Runtime([show])
    session = runtime.session()
    session.speculate(ToolCall("show", {"x": 1.0}))
    await settle(session)
    outcome = await session.execute_detailed(ToolCall("show", {"x": 1}))
    assert (outcome.kind, outcome.value) == ("miss", "1")  # serially the tool sees the int 1
    session.end_turn()
    session.speculate(ToolCall("show", {"x": 1}))
    await settle(session)
    outcome = await session.execute_detailed(ToolCall("show", {"x": 1}))
    assert (outcome.kind, outcome.value) == ("hit", "1")
    await session.close()
    runtime.close()


# --- 3. versions belong to the state ---------------------------------------------------------------


def shared_tools(cell: ObjectState) -> list[Tool]:
    @tool(effect=Effect.READ_ONLY, reads=[cell], threaded=False)
    async def get(key: str) -> Any:
        return cell.live.get(key)

    @tool(effect=Effect.DESTRUCTIVE, writes=[cell], threaded=False)
    async def put(key: str, value: str) -> None:
        cell.live[key] = value

    return [get, put]


async def test_a_write_from_another_session_makes_a_read_speculation_stale() -> None:
    cell = ObjectState({"k": "old"})
    runtime = Runtime(shared_tools(cell))
    a, b = runtime.session("a"), runtime.session("b")
    a.speculate(ToolCall("get", {"key": "k"}))
    await settle(a)
    await b.execute(ToolCall("put", {"key": "k", "value": "new"}))
    outcome = await a.execute_detailed(ToolCall("get", {"key": "k"}))
    assert (outcome.kind, outcome.value) == ("miss", "new")
    assert a.stats().stale == 1
    await a.close()
    await b.close()
    runtime.close()


async def test_a_cancelled_threaded_write_counts_as_in_progress_until_its_thread_ends() -> None:
    """Serial: A then B, so the list ends ['A', 'B']; the write A is cancelled while its thread still runs."""
    release = threading.Event()
    entered = threading.Event()
    cell = ObjectState({"log": []})

    def slow_append(target: Any, item: str) -> int:
        if item == "A":
            entered.set()
            release.wait(5)
        target["log"].append(item)
        return len(target["log"])

    append = Tool(name="append", fn=slow_append, effect=Effect.ISOLATED_WRITE, state=cell, threaded=True,
                  parameters={"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]})
    read = Tool(name="read", fn=lambda: list(cell.live["log"]), effect=Effect.READ_ONLY, reads=(cell,),
                threaded=False)
    runtime = Runtime([append, read])
    a, b = runtime.session("a"), runtime.session("b")
    write_a = asyncio.create_task(a.execute(ToolCall("append", {"item": "A"})))
    await asyncio.to_thread(entered.wait, 5)
    write_a.cancel()  # the caller gives up; the thread keeps writing
    await asyncio.gather(write_a, return_exceptions=True)
    b.speculate(ToolCall("append", {"item": "B"}))  # a snapshot taken while A is still being written
    b.speculate(ToolCall("read", {}))
    await settle(b)
    release.set()
    await asyncio.to_thread(runtime.scheduler.close, True)  # A's thread has ended
    assert (await b.execute_detailed(ToolCall("append", {"item": "B"}))).kind == "miss"
    read_outcome = await b.execute_detailed(ToolCall("read", {}))
    assert (read_outcome.kind, read_outcome.value) == ("miss", ["A", "B"])
    assert cell.live["log"] == ["A", "B"]
    await a.close()
    await b.close()
    runtime.close()


# --- 4. a hit is never slower than a miss -----------------------------------------------------------


async def test_a_right_guess_with_no_history_is_waited_for_as_long_as_a_fresh_call_needs() -> None:
    """The speculation is half done when claimed; running the call afresh would take longer than waiting."""
    gate = Gate()
    runs: list[str] = []

    @tool(effect=Effect.READ_ONLY, expected_s=30.0)
    async def fetch(x: int) -> int:
        runs.append("run")
        await gate.wait()
        return x

    clock = FakeClock()
    runtime = Runtime([fetch], Policy(claim_wait_floor_s=0.01, claim_wait_factor=3.0), clock=clock)
    session = runtime.session()
    session.speculate(ToolCall("fetch", {"x": 1}))
    await spin()
    clock.advance(0.5)  # it has run 0.5 s of the 30 s a fresh call is declared to need
    claim = asyncio.create_task(session.execute_detailed(ToolCall("fetch", {"x": 1})))
    await asyncio.sleep(0.05)  # more than the 0.01 s floor: the old rule had abandoned it by now
    assert not claim.done() and runs == ["run"]
    gate.open()
    outcome = await claim
    assert outcome.kind == "hit" and runs == ["run"]
    await session.close()
    runtime.close()


async def test_the_policy_can_declare_a_tools_expected_latency() -> None:
    @tool(effect=Effect.PURE)
    async def f(x: int) -> int:
        return x

    runtime = Runtime([f], Policy(tools={"f": ToolPolicy(expected_s=4.0)}))
    assert runtime.tools["f"].expected_s == 4.0
    assert runtime.claim_wait_limit("f") >= 4.0
    runtime.close()


async def test_an_untracked_write_makes_reads_speculated_before_its_end_stale() -> None:
    """A code action's own statement (not a tool) wrote what a read-only tool reads: the read guessed before
    the write ended is not served."""
    files = {"f": "old"}

    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def read(name: str) -> str:
        return files[name]

    runtime = Runtime([read])
    session = runtime.session()
    session.speculate(ToolCall("read", {"name": "f"}))
    await settle(session)
    with session.untracked_write():
        files["f"] = "new"
    outcome = await session.execute_detailed(ToolCall("read", {"name": "f"}))
    assert (outcome.kind, outcome.value) == ("miss", "new")
    session.speculate(ToolCall("read", {"name": "f"}))  # guessed after the write ended: servable
    await settle(session)
    outcome = await session.execute_detailed(ToolCall("read", {"name": "f"}))
    assert (outcome.kind, outcome.value) == ("hit", "new")
    await session.close()
    runtime.close()


async def test_a_read_only_watcher_costs_no_copy_and_a_copying_one_keeps_every_value_apart() -> None:
    made: list[list[int]] = []

    @tool(effect=Effect.PURE, threaded=False)
    async def rows(n: int) -> list[int]:
        made.append(list(range(n)))
        return made[-1]

    runtime = Runtime([rows])
    session = runtime.session()
    for copy in (False, True):
        session.speculate(ToolCall("rows", {"n": 3}))
        key = session.resolve(ToolCall("rows", {"n": 3}))[2]
        seen: list[SettledSpeculation] = []
        assert session.on_settled(key, seen.append, copy=copy)
        await settle(session)
        outcome = await session.execute_detailed(ToolCall("rows", {"n": 3}))
        assert outcome.kind == "hit" and outcome.value == [0, 1, 2] and seen[0].value == [0, 1, 2]
        if copy:  # the watcher and the caller each have their own
            assert seen[0].value is not made[-1] and outcome.value is not made[-1]
        else:  # a read-only watcher: the original, for it and for the call it served
            assert seen[0].value is made[-1] and outcome.value is made[-1]
        session.end_turn()
    await session.close()
    runtime.close()
