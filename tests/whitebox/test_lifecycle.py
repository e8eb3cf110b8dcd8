"""A speculation's life is an explicit state machine: every move is a legal one and is published.

The moves of hits, misses, refusals, joins, discards, expiries, failures and commits are watched through
``Telemetry.subscribe_transitions``; a property drives random sequences of guesses, calls and turn ends and
checks that every speculation's moves form a path of the table, starting PROPOSED and ending in a finished
state exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FakeClock
from forethought import Effect, Runtime, Tool, ToolCall, tool
from forethought._core.lifecycle import ALLOWED, FINISHED, IllegalTransition, State, move
from forethought.sandbox import ObjectState
from forethought.telemetry import Transition


def _tools(cell: ObjectState) -> list[Any]:
    @tool(effect=Effect.PURE, threaded=False)
    async def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    @tool(effect=Effect.PURE, threaded=False)
    async def broken(x: int) -> int:
        """Always fails."""
        raise ValueError("no")

    @tool(effect=Effect.ISOLATED_WRITE, state=cell, threaded=False)
    async def add(target: dict[str, int], n: int) -> int:
        """Adds to the cell."""
        target["n"] = target.get("n", 0) + n
        return target["n"]

    async def reverse(pin: str) -> str:
        return pin[::-1]

    secret = Tool("secret", reverse, {"type": "object", "properties": {"pin": {"type": "string"}}},
                  effect=Effect.PURE, private=True)
    return [double, broken, add, secret]


def _watch(runtime: Runtime) -> list[Transition]:
    moves: list[Transition] = []
    runtime.telemetry.subscribe_transitions(moves.append)
    return moves


async def test_a_hit_moves_proposed_queued_running_ready_claimed_served() -> None:
    runtime = Runtime(_tools(ObjectState({})))
    moves = _watch(runtime)
    session = runtime.session()
    session.speculate(ToolCall("double", {"x": 2}))
    await session.wait_speculations()
    assert (await session.execute_detailed(ToolCall("double", {"x": 2}))).kind == "hit"
    assert [(m.old, m.new) for m in moves] == [("proposed", "queued"), ("queued", "running"),
                                               ("running", "ready"), ("ready", "claimed"), ("claimed", "served")]
    assert moves[0].cause == "launched" and moves[-1].cause == "hit" and moves[0].key_hash
    await session.close()
    runtime.close()


async def test_a_commit_ends_committed_and_a_failure_is_discarded_failed() -> None:
    runtime = Runtime(_tools(ObjectState({})))
    moves = _watch(runtime)
    session = runtime.session()
    session.speculate(ToolCall("add", {"n": 3}))
    session.speculate(ToolCall("broken", {"x": 1}))
    await session.wait_speculations()
    assert (await session.execute_detailed(ToolCall("add", {"n": 3}))).kind == "hit"
    with pytest.raises(Exception, match="no"):
        await session.execute(ToolCall("broken", {"x": 1}))
    ends = [(m.tool, m.old, m.new, m.cause) for m in moves if m.new in ("committed", "discarded", "failed")]
    assert ("add", "claimed", "committed", "hit") in ends
    assert ("broken", "running", "failed", "") in ends and ("broken", "claimed", "discarded", "failed") in ends
    await session.close()
    runtime.close()


async def test_refused_joined_deferred_and_expired_are_moves_too() -> None:
    clock = FakeClock()
    runtime = Runtime(_tools(ObjectState({})), clock=clock)
    moves = _watch(runtime)
    session = runtime.session()
    session.speculate(ToolCall("double", {"x": "not a number"}))  # refused: invalid
    session.speculate(ToolCall("double", {"x": 5}))
    session.speculate(ToolCall("double", {"x": 5}), source="other")  # joins
    session.defer(ToolCall("double", {"x": 6}), "held", 0.5)
    await session.wait_speculations()
    clock.advance(3600)
    session.end_turn()
    news = [m.new for m in moves]
    assert {"refused", "joined", "deferred", "discarded"} <= set(news)
    await session.close()
    runtime.close()


async def test_a_private_tools_moves_carry_no_name_and_no_key() -> None:
    runtime = Runtime(_tools(ObjectState({})))
    moves = _watch(runtime)
    session = runtime.session()
    ticket = session.speculate(ToolCall("secret", {"pin": "7319"}))
    await session.wait_speculations()
    await session.execute(ToolCall("secret", {"pin": "7319"}))
    assert moves and all(m.tool == "<private>" and m.key_hash == "" for m in moves)
    assert ticket.key is not None and "7319" not in ticket.key and "secret" not in ticket.key
    await session.close()
    runtime.close()


def test_a_move_the_table_does_not_allow_raises() -> None:
    class Thing:
        state = State.SERVED
        sink = None

    for new in State:
        thing = Thing()
        if new in ALLOWED[State.SERVED]:
            continue
        with pytest.raises(IllegalTransition):
            move(thing, new)
    assert {State.REFUSED, State.JOINED, State.SERVED, State.COMMITTED, State.DISCARDED} == FINISHED


_ACTIONS = st.lists(st.tuples(st.sampled_from(["speculate", "execute", "end_turn", "advance", "revise"]),
                              st.sampled_from(["double", "broken", "add"]), st.integers(0, 2)), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ACTIONS)
async def test_every_speculation_walks_the_table_and_finishes_once(actions: list[tuple[str, str, int]]) -> None:
    clock = FakeClock()
    runtime = Runtime(_tools(ObjectState({})), clock=clock)
    moves = _watch(runtime)
    session = runtime.session()
    for action, name, x in actions:
        call = ToolCall(name, {"n": x} if name == "add" else {"x": x})
        if action == "speculate":
            session.speculate(call)
        elif action == "execute":
            with contextlib.suppress(Exception):
                await session.execute(call)
        elif action == "end_turn":
            session.end_turn()
        elif action == "advance":
            clock.advance(30)
        else:
            key = session.resolve(call)[2]
            session.revise(key, 0.0)
        await asyncio.sleep(0)
    await session.close()
    runtime.close()
    paths: dict[str, list[Transition]] = defaultdict(list)
    entry_ids: dict[str, int] = defaultdict(int)
    for m in moves:  # one speculation per (key, launch): a new launch of a key starts a new path
        if m.old == "proposed" and m.new == "queued":
            entry_ids[m.key_hash] += 1
        if m.old in ("proposed", "deferred") and m.new in ("refused", "joined", "deferred", "proposed"):
            continue  # a guess that never became a speculation of its own
        paths[f"{m.key_hash}#{entry_ids[m.key_hash]}"].append(m)
    for path in paths.values():
        assert path[0].old == "proposed" and path[0].new == "queued"
        for a, b in itertools.pairwise(path):
            assert a.new == b.old
        for m in path:
            assert State(m.new) in ALLOWED[State(m.old)]
        assert State(path[-1].new) in FINISHED  # closed: every one ended
        assert sum(State(m.new) in FINISHED for m in path) == 1
