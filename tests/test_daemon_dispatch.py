"""One response read as it streams: a call starts early only while every earlier call of its message is one the
daemon knows changes nothing; a call it cannot see begins a write nobody's guess outlives.

The rule is attacked with every sequence of call kinds (hypothesis) on a real core session, with events in
the order the decoders emit them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, Tool
from forethought.daemon.dispatch import Kind, StepDispatch
from forethought.daemon.linked import LinkedCall
from forethought.llm.events import MessageDone, ToolCallArgumentsDelta, ToolCallClosed, ToolCallStarted

KINDS = list(Kind)


def _dispatch(kinds: dict[str, Kind]) -> tuple[StepDispatch, list[str], list[str], Runtime]:
    ran: list[str] = []
    unseen: list[str] = []

    def make(name: str) -> Tool:
        async def fn(**_: Any) -> str:
            ran.append(name)
            return name

        return Tool(name, fn, {"type": "object", "properties": {"k": {"type": "integer"}}}, effect=Effect.READ_ONLY)

    early = {name: LinkedCall(make(name)) for name, kind in kinds.items() if kind is Kind.EARLY}
    runtime = Runtime([c.tool for c in early.values()])
    session = runtime.session()
    dispatch = StepDispatch(session, lambda name: kinds.get(name, Kind.UNSEEN), early.get, unseen.append)
    return dispatch, ran, unseen, runtime


def _events(index: int, name: str, good: bool) -> list[Any]:
    raw = '{"k": 1}' if good else '{"k": '
    return [ToolCallStarted(index, f"c{index}", name), ToolCallArgumentsDelta(index, raw),
            ToolCallClosed(index, f"c{index}", name, {"k": 1} if good else None, raw, None if good else "cut off")]


@settings(max_examples=200, deadline=None)
@given(message=st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), max_size=7))
def test_a_call_starts_early_only_after_calls_that_change_nothing(message: list[tuple[Kind, bool]]) -> None:
    async def run() -> None:
        kinds = {f"t{i}": kind for i, (kind, _) in enumerate(message)}
        dispatch, ran, unseen, runtime = _dispatch(kinds)
        for i, (_, good) in enumerate(message):
            for event in _events(i, f"t{i}", good):
                dispatch.event(event)
        dispatch.event(MessageDone("tool_calls"))
        await asyncio.sleep(0.01)
        expected, clear = [], True
        for i, (kind, good) in enumerate(message):
            if clear and good and kind is Kind.EARLY:
                expected.append(f"t{i}")
            clear = clear and good and kind.transparent
        assert ran == expected
        assert dispatch.launched == len(expected)
        assert bool(unseen) == any(kind is Kind.UNSEEN for kind, _ in message)
        assert dispatch.done
        await dispatch.session.close()
        runtime.close()

    asyncio.run(run())


async def test_an_unreadable_response_begins_the_unseen_write_and_ends_the_step() -> None:
    dispatch, ran, unseen, runtime = _dispatch({"t0": Kind.EARLY})
    dispatch.unreadable("the stream broke")
    for event in _events(0, "t0", True):  # anything after that starts nothing
        dispatch.event(event)
    await asyncio.sleep(0.01)
    assert ran == [] and unseen == ["the response could not be read (the stream broke)"] and dispatch.done
    runtime.close()


async def test_a_call_closed_without_its_start_is_classified_at_its_close() -> None:
    dispatch, ran, unseen, runtime = _dispatch({"t0": Kind.EARLY, "bash": Kind.UNSEEN})
    dispatch.event(ToolCallClosed(0, "c0", "bash", {"k": 1}, '{"k": 1}'))
    dispatch.event(ToolCallClosed(1, "c1", "t0", {"k": 1}, '{"k": 1}'))
    await asyncio.sleep(0.01)
    assert ran == [] and len(unseen) == 1
    runtime.close()
