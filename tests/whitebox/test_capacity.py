"""Priority capacity: best value first, per-owner and global limits, preemption of worse holders only."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought._core.capacity import PriorityCapacity, SlotRequest


def _requests(capacity: PriorityCapacity, specs: list[tuple[str, float]],
              preempted: list[str]) -> dict[str, SlotRequest]:
    return {name: capacity.request(owner, value, lambda n=name: preempted.append(n))
            for name, (owner, value) in zip([f"r{i}" for i in range(len(specs))], specs, strict=True)}


def test_free_slots_are_granted_at_once_and_the_rest_wait() -> None:
    capacity = PriorityCapacity(limit=2, per_owner=2, margin_s=1.0)
    preempted: list[str] = []
    reqs = _requests(capacity, [("a", 0.5), ("a", 0.5), ("a", 0.5)], preempted)
    assert [r.holding for r in reqs.values()] == [True, True, False]
    assert (capacity.running, capacity.queued, preempted) == (2, 1, [])


def test_a_freed_slot_goes_to_the_most_valuable_waiter_then_first_come() -> None:
    capacity = PriorityCapacity(limit=1, per_owner=1, margin_s=100.0)  # no preemption here
    preempted: list[str] = []
    reqs = _requests(capacity, [("a", 0.0), ("a", 0.1), ("a", 0.3), ("a", 0.3), ("a", 0.2)], preempted)
    order = []
    holder = reqs["r0"]
    for _ in range(4):
        capacity.release(holder)
        holder = next(r for r in reqs.values() if r.holding)
        order.append(next(n for n, r in reqs.items() if r is holder))
    assert order == ["r2", "r3", "r4", "r1"]


def test_a_clearly_better_request_preempts_the_worst_holder_only() -> None:
    capacity = PriorityCapacity(limit=2, per_owner=2, margin_s=0.05)
    preempted: list[str] = []
    reqs = _requests(capacity, [("a", 0.2), ("a", 0.1)], preempted)
    capacity.request("a", 0.12, lambda: preempted.append("close"))  # not better by the margin: waits
    assert preempted == []
    capacity.request("a", 0.5, lambda: preempted.append("best"))
    assert preempted == ["r1"]  # the worst holder yields, once
    capacity.request("a", 0.9, lambda: preempted.append("better still"))
    assert preempted == ["r1", "r0"]  # r1 is already stopping: the next worst is chosen
    capacity.release(reqs["r1"])
    capacity.release(reqs["r0"])
    holders = sorted(r.value for r in capacity._holders)
    assert holders == [0.5, 0.9]


def test_an_owner_at_its_own_limit_preempts_only_its_own_holders() -> None:
    capacity = PriorityCapacity(limit=4, per_owner=1, margin_s=0.0)
    preempted: list[str] = []
    _requests(capacity, [("a", 0.1), ("b", 0.0)], preempted)
    capacity.request("a", 0.9, lambda: preempted.append("a2"))
    assert preempted == ["r0"]  # b's worse holder is not a's to take


def test_release_is_idempotent_and_frees_waiting_requests_too() -> None:
    capacity = PriorityCapacity(limit=1, per_owner=1)
    holder = capacity.request("a", 0.0, lambda: None)
    waiter = capacity.request("a", 0.0, lambda: None)
    capacity.release(waiter)
    capacity.release(waiter)
    assert capacity.queued == 0 and capacity.running == 1
    capacity.release(holder)
    capacity.release(holder)
    assert capacity.running == 0


async def test_wait_returns_once_granted() -> None:
    capacity = PriorityCapacity(limit=1, per_owner=1)
    first = capacity.request("a", 0.0, lambda: None)
    second = capacity.request("a", 0.0, lambda: None)
    await capacity.wait(first)
    waiting = asyncio.ensure_future(capacity.wait(second))
    await asyncio.sleep(0)
    assert not waiting.done()
    capacity.release(first)
    await asyncio.wait_for(waiting, 5)
    assert second.holding


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3),
       st.lists(st.tuples(st.sampled_from("abc"), st.floats(-1, 1), st.booleans()), max_size=30))
def test_limits_always_hold_and_nothing_is_lost(limit: int, per_owner: int,
                                                ops: list[tuple[str, float, bool]]) -> None:
    """Random requests and releases (a preempted holder releases at once): never more holders than the
    limits allow, every request ends holding, waiting or released, and a free slot never idles while a
    request that fits waits."""
    capacity = PriorityCapacity(limit, per_owner, margin_s=0.1)
    live: list[SlotRequest] = []
    preemptions = 0
    stopping: list[SlotRequest] = []  # a victim's callback (any earlier request's) reports it here

    def stop() -> None:
        stopping.extend(r for r in live if r.preempted and not r.released and r not in stopping)

    for owner, value, release_one in ops:
        if release_one and live:
            capacity.release(live.pop(0))
            continue
        stopping.clear()
        req = capacity.request(owner, value, stop)
        live.append(req)
        preemptions += len(stopping)
        for r in stopping:
            capacity.release(r)
            live.remove(r)
        holders = [r for r in live if r.holding]
        assert len(holders) <= limit
        for o in "abc":
            assert sum(1 for r in holders if r.owner == o) <= per_owner
        assert capacity.running == len(holders)
        assert capacity.queued == sum(1 for r in live if not r.holding)
        for r in live:
            if not r.holding:
                assert not (capacity.running < limit
                            and sum(1 for h in holders if h.owner == r.owner) < per_owner)
    assert preemptions == capacity.preemptions
