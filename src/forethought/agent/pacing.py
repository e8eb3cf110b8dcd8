"""Pacing returns to the model server: admit agents coming back with tool results by the server's load.

When many agents' tools finish together (speculation makes that likelier: results are ready the moment the
model asks) they all send their conversations back at once, and the tool time saved turns into queueing at
the model server. A :class:`ReturnPacer` shared by those agents keeps the number of returning requests that
wait for their first token under a limit that follows the server's measured time to first token (TTFT):
while TTFT stays near the best recently seen the limit grows by about its square root per sample; when TTFT
rises the limit shrinks in proportion (a gradient rule in the manner of TCP Vegas). A conversation's first
request is not a return and is never held. Time comes from an injectable clock.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator

from forethought._core.clock import SYSTEM_CLOCK, Clock
from forethought.llm.events import LLMEvent

__all__ = ["ReturnPacer"]

BEST_DECAY = 1.02
"""Per sample, the best TTFT seen drifts up by this factor, so an old lucky sample is forgotten."""


class ReturnPacer:
    """A concurrency limit on returning model requests, steered by the server's time to first token."""

    def __init__(self, initial_limit: int = 8, min_limit: int = 1, max_limit: int = 256, smoothing: float = 0.2,
                 clock: Clock | None = None) -> None:
        if not 1 <= min_limit <= initial_limit <= max_limit or not 0.0 < smoothing <= 1.0:
            raise ValueError("need 1 <= min_limit <= initial_limit <= max_limit and 0 < smoothing <= 1")
        self.limit = float(initial_limit)
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.smoothing = smoothing
        self._now = (clock or SYSTEM_CLOCK).monotonic
        self.in_flight = 0
        self.held = 0
        """How many returns had to wait for admission."""
        self.waited_s = 0.0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._best: float | None = None
        self._ewma: float | None = None

    async def acquire(self) -> None:
        """Wait until a returning request may go (first come, first served)."""
        if self.in_flight < math.floor(self.limit) and not self._waiters:
            self.in_flight += 1
            return
        self.held += 1
        started = self._now()
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._release_slot()  # admitted as it was cancelled: pass the slot on
            raise
        finally:
            self.waited_s += self._now() - started

    def release(self, ttft_s: float | None) -> None:
        """A returning request got its first token after ``ttft_s`` (``None``: it failed first)."""
        if ttft_s is not None and ttft_s >= 0 and math.isfinite(ttft_s):
            self.observe(ttft_s)
        self._release_slot()

    def observe(self, ttft_s: float) -> None:
        """Move the limit by one TTFT sample."""
        best = ttft_s if self._best is None else min(self._best * BEST_DECAY, ttft_s)
        ewma = ttft_s if self._ewma is None else self._ewma + self.smoothing * (ttft_s - self._ewma)
        self._best, self._ewma = best, ewma
        gradient = 1.0 if ewma <= 0 else max(0.5, min(1.0, best / ewma))
        target = self.limit * gradient + math.sqrt(self.limit)
        self.limit = max(self.min_limit, min(self.max_limit, self.limit + self.smoothing * (target - self.limit)))
        self._wake()

    def _release_slot(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < math.floor(self.limit):
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    async def paced(self, stream: AsyncIterator[LLMEvent]) -> AsyncIterator[LLMEvent]:
        """``stream`` (not yet started) sent once admitted; the slot is given back at its first event."""
        await self.acquire()
        sent = self._now()
        holding = True
        try:
            async for event in stream:
                if holding:
                    holding = False
                    self.release(self._now() - sent)
                yield event
        finally:
            if holding:
                self.release(None)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
