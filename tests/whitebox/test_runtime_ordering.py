"""CallOrder: early-dispatched authoritative calls take effect in issue order (writes after every earlier
call, reads after earlier writes, pure calls free), checked by the order in which tools actually run."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import Gate, spin
from forethought import Effect, Runtime, Session, Tool, ToolCall, tool
from forethought._core.ordering import CallOrder


def gated_tools(order: list[str], gates: dict[str, Gate]) -> list[Tool]:
    async def run(label: str) -> str:
        order.append(f"start {label}")
        gate = gates.get(label)
        if gate is not None:
            await gate.wait()
        order.append(f"end {label}")
        return label

    @tool(effect=Effect.DESTRUCTIVE)
    async def write(label: str) -> str:
        return await run(label)

    @tool(effect=Effect.READ_ONLY)
    async def read(label: str) -> str:
        return await run(label)

    @tool(effect=Effect.PURE)
    async def compute(label: str) -> str:
        return await run(label)

    return [write, read, compute]


def dispatch(session: Session, name: str, label: str) -> asyncio.Task[Any]:
    """Issue an authoritative call early, as streaming dispatch does (the order is fixed right here)."""
    return asyncio.get_running_loop().create_task(session.execute(ToolCall(name, {"label": label})))


async def test_writes_wait_for_earlier_calls_and_reads_for_earlier_writes() -> None:
    order: list[str] = []
    gates = {"r1": Gate(), "w1": Gate(), "r2": Gate()}
    session = Runtime(gated_tools(order, gates)).session()
    tasks = [dispatch(session, "read", "r1"), dispatch(session, "write", "w1"), dispatch(session, "read", "r2"),
             dispatch(session, "compute", "p1"), dispatch(session, "read", "r3")]
    await spin(10)
    # r1 runs; w1 waits for r1; r2 and r3 wait for w1; the pure call runs at once.
    assert order == ["start r1", "start p1", "end p1"]
    gates["r1"].open()
    await spin(10)
    assert order[3:] == ["end r1", "start w1"]
    gates["w1"].open()
    await spin(10)
    assert order[5] == "end w1"
    assert sorted(order[6:8]) == ["start r2", "start r3"]  # reads after the write run together
    gates["r2"].open()
    assert await asyncio.gather(*tasks) == ["r1", "w1", "r2", "p1", "r3"]
    await session.close()


async def test_consecutive_writes_keep_their_issue_order() -> None:
    order: list[str] = []
    gates = {f"w{i}": Gate() for i in range(4)}
    session = Runtime(gated_tools(order, gates)).session()
    tasks = [dispatch(session, "write", f"w{i}") for i in range(4)]
    for i in (3, 2, 1, 0):  # release in reverse: the calls still take effect in issue order
        gates[f"w{i}"].open()
    await asyncio.gather(*tasks)
    assert order == [f"{what} w{i}" for i in range(4) for what in ("start", "end")]
    await session.close()


async def test_a_failed_or_cancelled_call_releases_the_calls_behind_it() -> None:
    order: list[str] = []
    gates = {"w1": Gate()}
    session = Runtime(gated_tools(order, gates)).session()
    first = dispatch(session, "write", "w1")
    second = dispatch(session, "write", "w2")
    await spin()
    first.cancel()
    assert await second == "w2"
    assert order == ["start w1", "start w2", "end w2"]
    await session.close()


async def test_call_order_primitive() -> None:
    order = CallOrder()
    r1, waits = order.begin(Effect.READ_ONLY)
    assert waits == []
    w1, waits = order.begin(Effect.ISOLATED_WRITE)
    assert len(waits) == 1
    r2, waits_r2 = order.begin(Effect.READ_ONLY)
    assert len(waits_r2) == 1
    pure, waits_p = order.begin(Effect.PURE)
    assert pure is None and waits_p == []
    w2, waits_w2 = order.begin(Effect.DESTRUCTIVE)
    assert len(waits_w2) == 2  # the read r2 and the write w1
    order.end(r1)
    await spin()
    assert waits[0].done() and not waits_r2[0].done()
    order.end(w1)
    order.end(r2)
    await spin()
    assert all(w.done() for w in waits_w2)
    order.end(w2)
    order.end(w2)  # idempotent
    with order.issue(Effect.READ_ONLY) as waits_after:
        assert waits_after == []


async def test_many_finished_reads_do_not_accumulate() -> None:
    order = CallOrder()
    for _ in range(1000):
        ticket, _waits = order.begin(Effect.READ_ONLY)
        order.end(ticket)
    pending, _waits = order.begin(Effect.READ_ONLY)
    ticket, waits = order.begin(Effect.DESTRUCTIVE)
    assert len(waits) == 1  # only the one unfinished read, not the thousand finished ones
    order.end(pending)
    order.end(ticket)
