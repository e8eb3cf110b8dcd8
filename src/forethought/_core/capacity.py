"""Speculative capacity by priority: slots go to the most valuable waiting guess; worse holders yield.

A speculation asks for a slot with its value (expected seconds saved minus expected cost, see
:mod:`forethought._core.pricing`). A slot counts against two limits, the runtime's and the session's. Waiting
requests are granted best value first (ties: first come). When every slot a request could use is held,
a request whose value beats the worst holder's by more than ``margin`` seconds preempts it: the holder's
``on_preempt`` callback cancels its task, and the slot passes on when that task releases it. Authoritative
calls never ask for a slot.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["PREEMPT_MARGIN_S", "PriorityCapacity", "SlotRequest"]

PREEMPT_MARGIN_S = 0.005
"""How much more (in expected seconds saved) a waiting guess must be worth to cancel a running one."""


@dataclass(eq=False, slots=True)
class SlotRequest:
    """One speculation's claim on capacity: its session, value and what to do when it must yield."""

    owner: Hashable
    value: float
    on_preempt: Callable[[], None]
    seq: int
    granted: asyncio.Future[None] | None = None
    holding: bool = False
    preempted: bool = False
    released: bool = False


class PriorityCapacity:
    """Slots under a global and a per-owner limit, granted by value, with preemption of worse holders."""

    def __init__(self, limit: int, per_owner: int, margin_s: float = PREEMPT_MARGIN_S) -> None:
        self.limit = max(0, limit)
        self.per_owner = max(0, per_owner)
        self.margin_s = margin_s
        self._holders: list[SlotRequest] = []
        self._waiting: list[SlotRequest] = []
        self._owner_holding: dict[Hashable, int] = {}
        self._seq = itertools.count()
        self.preemptions = 0

    @property
    def running(self) -> int:
        """How many slots are held."""
        return len(self._holders)

    @property
    def queued(self) -> int:
        """How many requests wait for a slot."""
        return len(self._waiting)

    def request(self, owner: Hashable, value: float, on_preempt: Callable[[], None]) -> SlotRequest:
        """Ask for a slot: granted at once when one is free, else queued (preempting a worse holder)."""
        req = SlotRequest(owner, value, on_preempt, next(self._seq))
        if self._fits(owner):
            self._grant(req)
            return req
        self._waiting.append(req)
        victim = self._victim(req)
        if victim is not None:
            victim.preempted = True
            self.preemptions += 1
            victim.on_preempt()
        return req

    async def wait(self, req: SlotRequest) -> None:
        """Wait until ``req`` holds a slot (returns at once when it already does)."""
        if req.holding:
            return
        if req.granted is None:
            req.granted = asyncio.get_running_loop().create_future()
        await req.granted

    def release(self, req: SlotRequest) -> None:
        """Give up ``req`` (held or still waiting); idempotent. The freed slot goes to the best waiter."""
        if req.released:
            return
        req.released = True
        if req.holding:
            req.holding = False
            self._holders.remove(req)
            left = self._owner_holding[req.owner] - 1
            if left:
                self._owner_holding[req.owner] = left
            else:
                del self._owner_holding[req.owner]
            self._grant_waiting()
        else:
            self._waiting.remove(req)

    def _fits(self, owner: Hashable) -> bool:
        return len(self._holders) < self.limit and self._owner_holding.get(owner, 0) < self.per_owner

    def _grant(self, req: SlotRequest) -> None:
        req.holding = True
        self._holders.append(req)
        self._owner_holding[req.owner] = self._owner_holding.get(req.owner, 0) + 1
        if req.granted is not None and not req.granted.done():
            req.granted.set_result(None)

    def _grant_waiting(self) -> None:
        """Grant the best waiting requests that fit, best value first, then first come."""
        while self._waiting:
            fitting = [r for r in self._waiting if self._fits(r.owner)]
            if not fitting:
                return
            best = max(fitting, key=lambda r: (r.value, -r.seq))
            self._waiting.remove(best)
            self._grant(best)

    def _victim(self, req: SlotRequest) -> SlotRequest | None:
        """The worst holder whose slot ``req`` could take, if ``req`` is worth clearly more than it.

        The holder must be in the owner's own slots when the owner is at its limit; any holder otherwise.
        A holder already preempted (its task still stopping) is not chosen twice.
        """
        own_full = self._owner_holding.get(req.owner, 0) >= self.per_owner
        candidates = [h for h in self._holders if not h.preempted and (not own_full or h.owner == req.owner)]
        if not candidates or self.per_owner == 0 or self.limit == 0:
            return None
        worst = min(candidates, key=lambda h: (h.value, -h.seq))
        if req.value > worst.value + self.margin_s:
            return worst
        return None
