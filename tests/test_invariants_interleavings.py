"""The invariants of docs/design.md ("Invariants") all at once: random interleavings of speculate,
execute, settle and turn ends give exactly the outputs of a serial model."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FakeState, settle
from forethought import Effect, Policy, Runtime, ToolCall, tool
from invariant_helpers import OPEN_BREAKER

KEYS = ("a", "b")
calls_strategy = st.one_of(
    st.builds(lambda k: ToolCall("get", {"key": k}), st.sampled_from(KEYS)),
    st.builds(lambda k, v: ToolCall("put", {"key": k, "value": v}), st.sampled_from(KEYS), st.integers(0, 3)),
    st.builds(lambda by: ToolCall("incr", {"by": by}), st.integers(1, 2)),
    st.just(ToolCall("peek", {})),
)
operations = st.lists(st.one_of(
    st.tuples(st.just("speculate"), calls_strategy),
    st.tuples(st.just("execute"), calls_strategy),
    st.tuples(st.just("settle"), st.none()),
    st.tuples(st.just("end_turn"), st.none()),
    st.tuples(st.just("spin"), st.none()),
), max_size=40)


def serial_model(ops: list[tuple[str, Any]]) -> list[Any]:
    kv: dict[str, int] = {}
    n = 0
    out: list[Any] = []
    for op, call in ops:
        if op != "execute":
            continue
        if call.name == "get":
            out.append(kv.get(call.arguments["key"], -1))
        elif call.name == "put":
            kv[call.arguments["key"]] = call.arguments["value"]
            out.append(None)
        elif call.name == "incr":
            n += call.arguments["by"]
            out.append(n)
        else:
            out.append(n)
    return out


async def run_interleaved(ops: list[tuple[str, Any]]) -> list[Any]:
    kv: dict[str, int] = {}
    state = FakeState({"n": 0})

    @tool(effect=Effect.READ_ONLY)
    async def get(key: str) -> int:
        await asyncio.sleep(0)
        return kv.get(key, -1)

    @tool(effect=Effect.DESTRUCTIVE)
    async def put(key: str, value: int) -> None:
        await asyncio.sleep(0)
        kv[key] = value

    @tool(effect=Effect.ISOLATED_WRITE, state=state)
    async def incr(target: dict[str, int], by: int) -> int:
        await asyncio.sleep(0)
        target["n"] += by
        return target["n"]

    @tool(effect=Effect.READ_ONLY, state=state)
    async def peek(target: dict[str, int]) -> int:
        return target["n"]

    runtime = Runtime([get, put, incr, peek], Policy(max_calls_per_turn=1000, breaker=OPEN_BREAKER))
    session = runtime.session()
    out: list[Any] = []
    for op, call in ops:
        if op == "speculate":
            session.speculate(call)
        elif op == "execute":
            out.append(await session.execute(call))
        elif op == "settle":
            await settle(session)
        elif op == "spin":
            await asyncio.sleep(0)
        else:
            session.end_turn()
    await session.close()
    stats = session.stats()
    assert stats.saved_s >= 0 and stats.hits + stats.misses == len(out)
    return out


@settings(max_examples=150, deadline=None)
@given(operations)
def test_random_interleavings_give_exactly_the_serial_outputs(ops: list[tuple[str, Any]]) -> None:
    assert asyncio.run(run_interleaved(ops)) == serial_model(ops)
