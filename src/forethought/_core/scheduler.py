"""Spare-capacity execution: where speculative work may run, how much, and how authoritative work skips it.

Speculative runs hold a slot of the runtime's :class:`~forethought._core.capacity.PriorityCapacity` (a global
and a per-session limit, granted most valuable first, worse holders preempted), and sync tools run on a
thread pool reserved for speculation. Authoritative calls take no slot and use their own pool, so they
never queue behind speculative work. Per-turn budgets bound how many calls and cost units a session may
speculate between two turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from forethought._core.capacity import PriorityCapacity
from forethought._core.policy import Policy

T = TypeVar("T")

AUTHORITATIVE_THREADS = 32


@dataclass(slots=True)
class TurnBudget:
    """Calls and cost units a session may still speculate this turn."""

    max_calls: int
    max_cost: float
    calls: int = 0
    cost: float = 0.0

    def reserve(self, cost: float) -> str | None:
        """Take one call of ``cost`` from the budget; return why not, or ``None`` when granted."""
        if self.calls + 1 > self.max_calls:
            return f"turn budget of {self.max_calls} speculative calls used"
        if self.cost + cost > self.max_cost:
            return f"turn budget of {self.max_cost:g} cost units used"
        self.calls += 1
        self.cost += cost
        return None

    def refund(self, cost: float) -> None:
        """Give back one call of ``cost`` (a guess that was preempted before it ran)."""
        self.calls = max(0, self.calls - 1)
        self.cost = max(0.0, self.cost - cost)

    def reset(self) -> None:
        self.calls = 0
        self.cost = 0.0


class Scheduler:
    """Bounded concurrency for speculative work; a separate lane for authoritative work."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.capacity = PriorityCapacity(max(1, policy.max_concurrent), max(1, policy.max_concurrent_per_session))
        self._spec_pool: ThreadPoolExecutor | None = None
        self._auth_pool: ThreadPoolExecutor | None = None

    @property
    def speculative_running(self) -> int:
        """How many speculations hold a slot now."""
        return self.capacity.running

    def budget(self) -> TurnBudget:
        return TurnBudget(self.policy.max_calls_per_turn, self.policy.max_cost_per_turn)

    async def run_sync(self, fn: Callable[[], T], speculative: bool) -> T:
        """Run a blocking callable on the pool of its lane."""
        loop = asyncio.get_running_loop()
        if speculative:
            if self._spec_pool is None:
                self._spec_pool = ThreadPoolExecutor(max(1, self.policy.max_concurrent), "forethought-spec")
            pool = self._spec_pool
        else:
            if self._auth_pool is None:
                self._auth_pool = ThreadPoolExecutor(AUTHORITATIVE_THREADS, "forethought-auth")
            pool = self._auth_pool
        return await loop.run_in_executor(pool, fn)

    def close(self, wait: bool = False) -> None:
        """Stop both pools (queued work is cancelled); ``wait`` blocks until running tool threads end."""
        for pool in (self._spec_pool, self._auth_pool):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=True)
        self._spec_pool = self._auth_pool = None


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (a tool may return a coroutine from a sync wrapper)."""
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
