"""Model-based equivalence beyond BFCL: several sessions, shared state, every way a speculation can end.

A hypothesis state machine drives three sessions of one runtime over one shared :class:`ObjectState`
with async and threaded tools of every effect: a PURE tool with a partial-hit rule and mutable results,
READ_ONLY reads of the shared state (declared with ``reads=``), an ISOLATED_WRITE tool on a worker thread
(run against snapshots when speculated), and a DESTRUCTIVE write declared with ``writes=``. Steps guess
right and wrong, let speculations run, advance a fake clock past TTLs, end turns, cancel authoritative
calls at an arbitrary await point, and mutate whatever a call returned.

The serial model is the obvious one: authoritative calls applied one after another to a dict. Every
output equals the model's at that point; after every step the live state equals the model (a cancelled
write may or may not have happened, exactly as serially: the live state must be one of the two, and the
model follows it).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Coroutine
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from forethought import Effect, FakeClock, PartialRule, Runtime, Session, Tool, ToolCall, tool
from forethought._core.policy import BreakerPolicy, Policy
from forethought.sandbox.objects import ObjectState

POLICY = Policy(max_calls_per_turn=10_000, max_cost_per_turn=1e9, claim_wait_floor_s=5.0,
                breaker=BreakerPolicy(max_waste_rate=1.0, max_error_rate=1.0))
SESSIONS = ("a", "b", "c")
KEYS = st.sampled_from(["x", "y"])
TTL_S = 5.0


def make_tools(cell: ObjectState) -> list[Tool]:
    @tool(effect=Effect.PURE, ttl_s=TTL_S, partial=PartialRule(
        covers=lambda cached, requested: requested["n"] <= cached["n"],
        narrow=lambda requested, result: result[: requested["n"]]))
    async def rows(n: int) -> list[dict[str, int]]:
        await asyncio.sleep(0)
        return [{"i": i} for i in range(n)]

    @tool(effect=Effect.READ_ONLY, reads=[cell], ttl_s=TTL_S)
    async def get(key: str) -> list[str]:
        await asyncio.sleep(0)
        return list(cell.live.get(key, []))

    @tool(effect=Effect.READ_ONLY, reads=[cell], ttl_s=TTL_S, threaded=True)
    def size(key: str) -> int:
        return len(cell.live.get(key, []))

    def push(target: Any, key: str, item: str) -> int:
        items = target.setdefault(key, [])
        items.append(item)
        return len(items)

    @tool(effect=Effect.DESTRUCTIVE, writes=[cell])
    async def drop(key: str) -> list[str] | None:
        await asyncio.sleep(0)
        value: list[str] | None = cell.live.pop(key, None)
        return value

    schema = {"type": "object", "properties": {"key": {"type": "string"}, "item": {"type": "string"}},
              "required": ["key", "item"]}
    push_tool = Tool(name="push", fn=push, effect=Effect.ISOLATED_WRITE, state=cell, threaded=True, ttl_s=TTL_S,
                     parameters=schema)
    return [rows, get, size, push_tool, drop]


def apply(model: dict[str, list[str]], call: ToolCall) -> Any:
    args = call.arguments
    if call.name == "rows":
        return [{"i": i} for i in range(args["n"])]
    if call.name == "get":
        return list(model.get(args["key"], []))
    if call.name == "size":
        return len(model.get(args["key"], []))
    if call.name == "push":
        model.setdefault(args["key"], []).append(args["item"])
        return len(model[args["key"]])
    return model.pop(args["key"], None)


CALLS = st.one_of(
    st.builds(lambda n: ToolCall("rows", {"n": n}), st.integers(0, 4)),
    st.builds(lambda n, k: ToolCall(n, {"key": k}), st.sampled_from(["get", "size", "drop"]), KEYS),
    st.builds(lambda k, i: ToolCall("push", {"key": k, "item": i}), KEYS, st.sampled_from(["p", "q"])),
)
SESSION = st.sampled_from(SESSIONS)


class SharedStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.cell = ObjectState({})
        self.model: dict[str, list[str]] = {}
        self.runtime = Runtime(make_tools(self.cell), POLICY, clock=self.clock)
        self.sessions: dict[str, Session] = {name: self.runtime.session(name) for name in SESSIONS}

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    async def _speculate(self, session: Session, calls: list[ToolCall]) -> None:
        for call in calls:
            session.speculate(call, source="hypothesis")

    @rule(name=SESSION, calls=st.lists(CALLS, min_size=1, max_size=3))
    def speculate(self, name: str, calls: list[ToolCall]) -> None:
        self.run(self._speculate(self.sessions[name], calls))

    @rule(spins=st.integers(1, 6))
    def let_speculations_run(self, spins: int) -> None:
        async def spin() -> None:
            for _ in range(spins):
                await asyncio.sleep(0)

        self.run(spin())

    @rule(seconds=st.sampled_from([1.0, TTL_S]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(name=SESSION)
    def end_turn(self, name: str) -> None:
        self.sessions[name].end_turn()

    @rule(name=SESSION, call=CALLS, guess_first=st.booleans(), spins=st.integers(0, 3), mutate=st.booleans())
    def execute(self, name: str, call: ToolCall, guess_first: bool, spins: int, mutate: bool) -> None:
        session = self.sessions[name]

        async def go() -> Any:
            if guess_first:
                session.speculate(call, source="right")
            for _ in range(spins):
                await asyncio.sleep(0)
            return await session.execute(call)

        value = self.run(go())
        expected = apply(self.model, call)
        assert value == expected, (call, value, expected)
        if mutate and isinstance(value, list):  # the caller owns what it got: changing it changes nothing else
            value.append({"junk": 1} if call.name == "rows" else "junk")
            if value[:-1] and isinstance(value[0], dict):
                value[0]["i"] = -1

    def check(self, session: Session, call: ToolCall, mutate: bool = True) -> None:
        value = self.run(session.execute(call))
        expected = apply(self.model, call)
        assert value == expected, (call, value, expected)
        if mutate and isinstance(value, list):
            value.append({"junk": 1} if call.name == "rows" else "junk")
            if value[:-1] and isinstance(value[0], dict):
                value[0]["i"] = -1

    @rule(reader=SESSION, writer=SESSION, key=KEYS, write=st.sampled_from(["push", "drop"]),
          settle=st.booleans())
    def a_guess_races_another_sessions_write(self, reader: str, writer: str, key: str, write: str,
                                            settle: bool) -> None:
        session = self.sessions[reader]
        self.run(self._speculate(session, [ToolCall("get", {"key": key}), ToolCall("size", {"key": key})]))
        if settle:
            self.run(session.wait_speculations(timeout=5.0))
        arguments = {"key": key, "item": "w"} if write == "push" else {"key": key}
        self.check(self.sessions[writer], ToolCall(write, arguments))
        self.check(session, ToolCall("get", {"key": key}))
        self.check(session, ToolCall("size", {"key": key}))

    @rule(name=SESSION, n=st.integers(1, 4), data=st.data())
    def partial_hits_then_the_exact_hit(self, name: str, n: int, data: st.DataObject) -> None:
        session = self.sessions[name]
        self.run(self._speculate(session, [ToolCall("rows", {"n": n})]))
        self.run(session.wait_speculations(timeout=5.0))
        for m in data.draw(st.lists(st.integers(0, n), max_size=3)):
            self.check(session, ToolCall("rows", {"n": m}))
        self.check(session, ToolCall("rows", {"n": n}))

    @rule(name=SESSION, call=CALLS, spins=st.integers(0, 4))
    def cancel_an_authoritative_call(self, name: str, call: ToolCall, spins: int) -> None:
        session = self.sessions[name]

        async def go() -> None:
            task = asyncio.ensure_future(session.execute(call))
            for _ in range(spins):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        self.run(go())
        self.runtime.scheduler.close(wait=True)  # a cancelled threaded write finishes on its thread first
        without = copy.deepcopy(self.model)
        with_call = copy.deepcopy(self.model)
        apply(with_call, call)
        live = self.cell.live
        assert live in (without, with_call), (call, live, without, with_call)
        self.model = copy.deepcopy(live)  # serially, too, a cancelled call may or may not have happened

    @precondition(lambda self: any(s.speculation_count() for s in self.sessions.values()))
    @rule(name=SESSION)
    def wait_for_speculations(self, name: str) -> None:
        self.run(self.sessions[name].wait_speculations(timeout=5.0))

    @invariant()
    def live_state_equals_the_serial_model(self) -> None:
        assert self.cell.live == self.model

    def teardown(self) -> None:
        for session in self.sessions.values():
            self.run(session.close())
        self.runtime.close(wait=True)
        self.loop.close()


TestSharedStateMachine = SharedStateMachine.TestCase
TestSharedStateMachine.settings = settings(max_examples=30, stateful_step_count=25, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow],
                                           report_multiple_bugs=False)
