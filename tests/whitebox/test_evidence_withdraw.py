"""Weighing sources together, in the session: a guess revised below what it is worth is withdrawn, its
outcome still learnt at the call (or as a miss at the turn's end), its accounting done once; what is
finished, claimed, certain or still worth its run is kept."""

from __future__ import annotations

import math
from typing import Any

import pytest

from conftest import Gate, settle, spin
from evidence_fakes import NO_BACKOFF, tools
from forethought import Policy, Runtime, ToolCall, tool
from forethought.telemetry import EventKind


async def test_a_revised_guess_below_its_cost_is_withdrawn_and_its_outcome_learnt_at_the_call() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    ticket = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.6)
    assert ticket.key is not None
    await spin()
    assert ticket.launched and ran == ["find x"]
    assert not session.revise(ticket.key, 0.5)  # still worth it: kept
    assert session.has_speculation(ticket.key)
    assert session.revise(ticket.key, 0.01)  # worth less than its waste now: withdrawn
    assert not session.has_speculation(ticket.key)
    kinds = [e.kind for e in events if e.kind in (EventKind.CANCELLED, EventKind.WITHDRAWN, EventKind.WASTED)]
    assert kinds == [EventKind.WITHDRAWN, EventKind.WASTED]
    assert all("revised to 0.01" in e.detail for e in events if e.kind is EventKind.WITHDRAWN)
    assert session.stats().withdrawn == 1 and session.stats().cancelled == 0
    assert runtime.telemetry.wasted_by_source.keys() == {"listed"}
    assert runtime.calibration.table() == []  # nothing learnt yet: the call decides
    gate.open()
    out = await session.execute_detailed(ToolCall("find", {"q": "x"}))
    assert out.kind == "miss" and out.value == "id-x"  # a withdrawn guess is never served
    (row,) = runtime.calibration.table()
    assert row.source == "listed" and row.guesses == 1 and row.hit_rate == 1.0
    assert session.stats().launched == 1
    await session.close()


async def test_a_withdrawn_guess_no_call_matched_counts_as_a_miss_at_the_turn_end() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    ticket = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.6)
    assert ticket.key is not None
    await spin()
    assert session.revise(ticket.key, 0.0)
    gate.open()
    await session.execute(ToolCall("read", {"id": "y"}))
    assert runtime.calibration.table() == []
    session.end_turn()
    (row,) = runtime.calibration.table()
    assert row.guesses == 1 and row.hit_rate == 0.0
    session.end_turn()  # learnt once
    assert runtime.calibration.table()[0].guesses == 1
    await session.close()


async def test_revise_keeps_what_is_finished_claimed_or_absent() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    gate.open()
    done = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.6)
    assert done.key is not None
    await settle(session)
    assert not session.revise(done.key, 0.0)  # its tool time is spent: keeping it costs nothing more
    assert (await session.execute_detailed(ToolCall("find", {"q": "x"}))).kind == "hit"
    assert not session.revise(done.key, 0.0)  # claimed and gone
    assert not session.revise("no such key", 0.0)
    await session.close()


@pytest.mark.parametrize("bad", [math.nan, -0.5, 1.01])
async def test_revise_with_a_nonsense_chance_is_a_clear_error_and_loses_nothing(bad: float) -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    ticket = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.6)
    assert ticket.key is not None
    await spin()
    with pytest.raises(ValueError, match="p_hit"):
        session.revise(ticket.key, bad)
    assert session.has_speculation(ticket.key)
    gate.open()
    assert (await session.execute_detailed(ToolCall("find", {"q": "x"}))).kind == "hit"
    await session.close()


async def test_a_withdrawn_queued_guess_gives_its_turn_budget_back() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), Policy(backoff=False, max_calls_per_turn=1))
    session = runtime.session()
    first = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.6)
    assert first.key is not None
    assert first.launched  # not started yet: its task runs after we return
    assert session.revise(first.key, 0.0)
    second = session.speculate(ToolCall("find", {"q": "y"}), source="listed", confidence=0.6)
    assert second.launched, second.reason
    gate.open()
    await settle(session)
    assert ran == ["find y"]
    await session.close()


# --- found in review ---------------------------------------------------------------------------------

async def test_a_small_revision_late_in_the_step_keeps_a_running_guess() -> None:
    from forethought._core.clock import FakeClock

    gate, ran, clock = Gate(), list[str](), FakeClock()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF, clock=clock)
    session = runtime.session()
    ticket = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.95)
    assert ticket.key is not None
    await spin()
    clock.advance(0.12)  # it has run 0.12 s of its 1 s; the call is due now
    assert not session.revise(ticket.key, 0.9475, eta_s=0.0)  # a hit still saves those 0.12 s: kept
    assert session.has_speculation(ticket.key)
    assert session.revise(ticket.key, 0.01, eta_s=0.0)  # unlikely now: the rest of its run is not worth it
    gate.open()
    await session.close()


async def test_a_guess_someone_proposed_as_certain_is_never_withdrawn() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    call = ToolCall("find", {"q": "x"})
    ticket = session.speculate(call, source="listed", confidence=0.3)
    session.speculate(call, source="stream", confidence=1.0)  # the model's own streamed call joins it
    assert ticket.key is not None
    await spin()
    assert not session.revise(ticket.key, 0.0)
    gate.open()
    assert (await session.execute_detailed(call)).kind == "hit"
    assert ran == ["find x"]
    await session.close()


async def test_a_guess_withdrawn_twice_in_a_turn_learns_every_vote() -> None:
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), NO_BACKOFF)
    session = runtime.session()
    call = ToolCall("find", {"q": "x"})
    first = session.speculate(call, source="listed", confidence=0.6)
    assert first.key is not None
    await spin()
    assert session.revise(first.key, 0.0)
    session.speculate(call, source="other", confidence=0.6)
    await spin()
    assert session.revise(first.key, 0.0)
    gate.open()
    assert (await session.execute_detailed(call)).kind == "miss"
    assert {(r.source, r.guesses, r.hit_rate) for r in runtime.calibration.table()} == {("listed", 1, 1.0),
                                                                                        ("other", 1, 1.0)}
    await session.close()


async def test_a_ticket_says_whether_only_its_price_rejected_it() -> None:
    gate, ran = Gate(), list[str]()

    @tool(expected_s=1.0)  # undeclared effect: DESTRUCTIVE
    async def wipe() -> str:
        return "wiped"

    runtime = Runtime([*tools(gate, ran), wipe], Policy(backoff=False, min_value_s=0.5))
    session = runtime.session()
    cheap = session.speculate(ToolCall("find", {"q": "x"}), source="listed", confidence=0.2)
    never = session.speculate(ToolCall("wipe", {}), source="listed", confidence=0.99)
    sure = session.speculate(ToolCall("find", {"q": "y"}), source="listed", confidence=0.99)
    assert cheap.status == "rejected" and cheap.priced_out
    assert never.status == "rejected" and not never.priced_out
    assert sure.launched and not sure.priced_out
    gate.open()
    await session.close()
