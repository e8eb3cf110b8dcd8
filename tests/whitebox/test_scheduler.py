"""Spare-capacity scheduling: per-turn budgets, global and per-session slots, separate thread lanes."""

from __future__ import annotations

import asyncio
import threading

from conftest import Gate, spin
from forethought import Policy
from forethought._core.scheduler import Scheduler, TurnBudget, maybe_await


def test_turn_budget_counts_calls_and_cost() -> None:
    budget = TurnBudget(max_calls=3, max_cost=5.0)
    assert budget.reserve(2.0) is None
    assert budget.reserve(2.0) is None
    assert budget.reserve(2.0) == "turn budget of 5 cost units used"
    assert budget.reserve(1.0) is None
    assert budget.reserve(0.0) == "turn budget of 3 speculative calls used"
    assert (budget.calls, budget.cost) == (3, 5.0)
    budget.reset()
    assert budget.reserve(5.0) is None


async def test_slots_bound_global_and_per_session_concurrency() -> None:
    scheduler = Scheduler(Policy(max_concurrent=3, max_concurrent_per_session=2))
    capacity = scheduler.capacity
    gate = Gate()
    running: list[str] = []

    async def job(name: str, owner: str) -> None:
        slot = capacity.request(owner, 0.0, lambda: None)
        try:
            await capacity.wait(slot)
            running.append(name)
            await gate.wait()
        finally:
            capacity.release(slot)

    tasks = [asyncio.ensure_future(job(f"a{i}", "a")) for i in range(4)]
    tasks += [asyncio.ensure_future(job(f"b{i}", "b")) for i in range(4)]
    await spin(10)
    assert running == ["a0", "a1", "b0"]
    assert scheduler.speculative_running == 3
    gate.open()
    await asyncio.gather(*tasks)
    assert sorted(running) == [f"{s}{i}" for s in "ab" for i in range(4)]
    assert scheduler.speculative_running == 0


async def test_authoritative_lane_runs_while_the_speculative_lane_is_blocked() -> None:
    scheduler = Scheduler(Policy(max_concurrent=1))
    release = threading.Event()
    blocked = threading.Event()

    def block() -> str:
        blocked.set()
        release.wait(timeout=30)
        return "spec"

    try:
        spec = asyncio.ensure_future(scheduler.run_sync(block, speculative=True))
        queued = asyncio.ensure_future(scheduler.run_sync(lambda: "queued", speculative=True))
        assert await asyncio.to_thread(blocked.wait, 30)
        assert await scheduler.run_sync(lambda: "auth", speculative=False) == "auth"
        assert not queued.done()
        release.set()
        assert await asyncio.gather(spec, queued) == ["spec", "queued"]
    finally:
        release.set()
        scheduler.close()


async def test_maybe_await_accepts_values_coroutines_and_futures() -> None:
    async def coro() -> int:
        return 2

    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(3)
    assert [await maybe_await(1), await maybe_await(coro()), await maybe_await(future)] == [1, 2, 3]
