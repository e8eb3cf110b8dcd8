"""Does speculating slow the main model? A meter that compares the main model's speed with and without.

A speculator model draws its samples from a server that may be the main model's own, or share its CPU or
accelerator. Then every sample can slow the very generation it tries to overlap with, and on a busy
machine by more than it saves. :class:`InterferenceMeter` keeps moving averages (with their variance) of
the main model's decode seconds per token on steps where samples were drawn and on steps where none were
(steps the load or the cheaper predictors left without samples, plus a probe step now and then), and turns
their ratio into a level between 0 (no measurable harm) and 1 (the main model runs ``high`` times slower
or worse while speculating): the speculator scales its samples by ``1 - level``.

Decode time is the step's time after its first token, per token after the first, when the caller knows
when the first token came: a whole step's seconds per token mixes the time to first token into it, and
steps of different lengths (a short call, a long answer) would then differ by their length alone. A
slowdown only counts when it is clear: the difference of the two averages must exceed ``z`` (3) standard
errors, so the noise of a busy machine alone seldom turns sampling off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from forethought._core.pressure import level_between

__all__ = ["InterferenceMeter"]

EWMA_WEIGHT = 0.15
MIN_SAMPLES = 3
"""Steps needed on each side before the meter says anything."""


_EFFECTIVE_N = (2.0 - EWMA_WEIGHT) / EWMA_WEIGHT
"""How many recent values an exponentially weighted average stands for."""


@dataclass(slots=True)
class _Average:
    value: float = 0.0
    variance: float = 0.0
    count: int = 0

    def add(self, x: float) -> None:
        self.count += 1
        if self.count == 1:
            self.value = x
            return
        delta = x - self.value
        self.value += EWMA_WEIGHT * delta
        self.variance = (1.0 - EWMA_WEIGHT) * (self.variance + EWMA_WEIGHT * delta * delta)

    def squared_error(self) -> float:
        """The squared standard error of :attr:`value`."""
        return self.variance / min(float(self.count), _EFFECTIVE_N)


class InterferenceMeter:
    """Main-model seconds per token with and without samples drawn; a level from their ratio."""

    def __init__(self, low: float = 1.15, high: float = 1.6, probe_every: int = 5,
                 settled_probe_every: int = 25, z: float = 3.0) -> None:
        if not 1.0 <= low <= high or probe_every < 2 or settled_probe_every < probe_every or z < 0:
            raise ValueError("need 1 <= low <= high, 2 <= probe_every <= settled_probe_every and z >= 0")
        self.z = z
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

    def note(self, seconds: float, tokens: int, sampled: bool, first_token_s: float | None = None) -> None:
        """One main-model step took ``seconds`` for ``tokens`` completion tokens, with or without samples;
        its first token came ``first_token_s`` after it began (when known: then decode time is compared)."""
        if tokens <= 0 or not math.isfinite(seconds) or seconds < 0:
            return
        if first_token_s is not None and math.isfinite(first_token_s) and 0 <= first_token_s <= seconds:
            if tokens < 2:
                return  # one token: no decode time to compare
            per_token = (seconds - first_token_s) / (tokens - 1)
        else:
            per_token = seconds / tokens
        (self.with_samples if sampled else self.without).add(per_token)

    @property
    def ratio(self) -> float | None:
        """How many times slower the main model runs while samples are drawn (``None``: not known yet)."""
        if self.with_samples.count < MIN_SAMPLES or self.without.count < MIN_SAMPLES or self.without.value <= 0:
            return None
        return self.with_samples.value / self.without.value

    def level(self) -> float:
        """0 while no clear harm is measured (or too little is known), up to 1 at ``high`` times slower."""
        ratio = self.ratio
        if ratio is None:
            return 0.0
        noise = math.sqrt(self.with_samples.squared_error() + self.without.squared_error())
        if self.with_samples.value - self.without.value <= self.z * noise:
            return 0.0
        return level_between(ratio, self.low, self.high)
