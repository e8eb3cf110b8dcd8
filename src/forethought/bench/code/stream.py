"""Streaming a message at a fixed token rate: the schedule both arms of the code benchmark replay.

A message is cut into token-like pieces (a word with its leading space, a run of punctuation, a run of
whitespace such as a newline plus indentation), and piece ``i`` is due ``(i + 1) / tokens_per_s`` seconds
after the stream starts. The schedule is computed once and handed to every arm, so all of them see the
same deltas at the same offsets.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

_TOKEN = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


@dataclass(frozen=True, slots=True)
class StreamSchedule:
    """Deltas and the offset (seconds from the start) at which each is due."""

    deltas: tuple[str, ...]
    times: tuple[float, ...]

    @property
    def duration(self) -> float:
        return self.times[-1] if self.times else 0.0

    def time_of_offset(self, offset: int) -> float:
        """When the character at ``offset`` of the message has been streamed."""
        ends: list[int] = []
        total = 0
        for delta in self.deltas:
            total += len(delta)
            ends.append(total)
        index = bisect.bisect_right(ends, offset)
        return self.times[min(index, len(self.times) - 1)] if self.times else 0.0

    def as_pairs(self) -> list[list[float | str]]:
        return [[t, d] for t, d in zip(self.times, self.deltas, strict=True)]


def schedule(message: str, tokens_per_s: float) -> StreamSchedule:
    """The deltas of ``message`` at ``tokens_per_s``."""
    if tokens_per_s <= 0:
        raise ValueError("tokens_per_s must be > 0")
    deltas = tuple(_TOKEN.findall(message))
    if "".join(deltas) != message:
        raise ValueError("tokenizer lost characters")
    return StreamSchedule(deltas, tuple((i + 1) / tokens_per_s for i in range(len(deltas))))


async def replay(plan: StreamSchedule) -> AsyncIterator[str]:
    """Yield the deltas at their offsets from now."""
    start = time.monotonic()
    for at, delta in zip(plan.times, plan.deltas, strict=True):
        wait = start + at - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        yield delta
