"""Does speculating slow the main model? A meter that compares the main model's speed with and without.

A speculator model draws its samples from a server that may be the main model's own, or share its CPU or
accelerator. Then every sample can slow the very generation it tries to overlap with, and on a busy
machine by more than it saves. :class:`InterferenceMeter` keeps moving averages of the main model's
seconds per completion token on steps where samples were drawn and on steps where none were (steps the
load or the cheaper predictors left without samples, plus a probe step now and then), and turns their
ratio into a level between 0 (no measurable harm) and 1 (the main model runs ``high`` times slower or
worse while speculating): the speculator scales its samples by ``1 - level``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from forethought._pressure import level_between

__all__ = ["InterferenceMeter"]

EWMA_WEIGHT = 0.15
MIN_SAMPLES = 3
"""Steps needed on each side before the meter says anything."""


@dataclass(slots=True)
class _Average:
    value: float = 0.0
    count: int = 0

    def add(self, x: float) -> None:
        self.count += 1
        self.value = x if self.count == 1 else self.value + EWMA_WEIGHT * (x - self.value)


class InterferenceMeter:
    """Main-model seconds per token with and without samples drawn; a level from their ratio."""

    def __init__(self, low: float = 1.15, high: float = 1.6, probe_every: int = 5,
                 settled_probe_every: int = 25) -> None:
        if not 1.0 <= low <= high or probe_every < 2 or settled_probe_every < probe_every:
            raise ValueError("need 1 <= low <= high and 2 <= probe_every <= settled_probe_every")
        self.low = low
        self.high = high
        self.probe_every = probe_every
        self.settled_probe_every = settled_probe_every
        self.with_samples = _Average()
        self.without = _Average()
        self._steps = 0

    def probe_now(self) -> bool:
        """Whether this step should draw no samples, to keep the comparison fresh (counts the step)."""
        self._steps += 1
        every = self.probe_every if self.without.count < MIN_SAMPLES * 2 else self.settled_probe_every
        return self._steps % every == 0

    def note(self, seconds: float, tokens: int, sampled: bool) -> None:
        """One main-model step took ``seconds`` for ``tokens`` completion tokens, with or without samples."""
        if tokens <= 0 or not math.isfinite(seconds) or seconds < 0:
            return
        (self.with_samples if sampled else self.without).add(seconds / tokens)

    @property
    def ratio(self) -> float | None:
        """How many times slower the main model runs while samples are drawn (``None``: not known yet)."""
        if self.with_samples.count < MIN_SAMPLES or self.without.count < MIN_SAMPLES or self.without.value <= 0:
            return None
        return self.with_samples.value / self.without.value

    def level(self) -> float:
        """0 while no harm is measured (or too little is known), up to 1 at ``high`` times slower."""
        ratio = self.ratio
        return 0.0 if ratio is None else level_between(ratio, self.low, self.high)
