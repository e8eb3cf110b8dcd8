"""What a speculation is worth: a calibrated chance of a hit, the seconds it can hide, and its cost.

A predictor's ``confidence`` is its own belief. :class:`Calibration` turns it into an observed chance
that the guess is the model's call (per source and confidence bin, counted over every guess that ended),
smoothed towards the predictor's own figure while a bin has few observations. :func:`worth` prices one
speculation in expected seconds: ``p * hide_s - (1 - p) * waste_weight * run_s * cost_units``,
where ``hide_s`` is the part of the tool's typical runtime that can pass before the model's own call
(the expected time until that call, when the caller knows it) and ``waste_weight`` says what a wasted
tool second costs against a saved one. The scheduler admits, orders and preempts by this value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["BINS", "Calibration", "ReliabilityRow", "Worth", "worth"]

BINS = 10
"""Confidence bins per source: [0, 0.1), [0.1, 0.2), ... [0.9, 1.0]."""
PRIOR_WEIGHT = 4.0
"""Pseudo-observations at the predictor's own confidence: how slowly observations take over."""


def _bin(confidence: float) -> int:
    """The confidence bin (NaN and anything below 0 fall in the first, anything above 1 in the last)."""
    return min(BINS - 1, int(confidence * BINS)) if confidence > 0.0 else 0


@dataclass(frozen=True, slots=True)
class ReliabilityRow:
    """One line of the reliability table: guesses of ``source`` in one confidence bin and how they ended."""

    source: str
    low: float
    high: float
    guesses: int
    mean_confidence: float
    hit_rate: float
    calibrated: float
    """The P(hit) the scheduler now uses for a guess at the bin's mean confidence."""


class Calibration:
    """Observed hit rates per (source, confidence bin), shared by every session of a runtime."""

    def __init__(self, prior_weight: float = PRIOR_WEIGHT) -> None:
        self.prior_weight = prior_weight
        self._hits: dict[tuple[str, int], float] = {}
        self._guesses: dict[tuple[str, int], int] = {}
        self._confidence: dict[tuple[str, int], float] = {}

    def p_hit(self, source: str, confidence: float) -> float:
        """The chance that a guess of ``source`` at ``confidence`` is the model's call."""
        key = (source, _bin(confidence))
        n = self._guesses.get(key)
        if n is None:
            return confidence
        w = self.prior_weight
        return (self._hits[key] + w * confidence) / (n + w)

    def record(self, source: str, confidence: float, hit: bool) -> None:
        """Count one guess that ended: ``hit`` when the model's call was exactly it."""
        if not 0.0 <= confidence <= 1.0:  # NaN fails this too
            return
        key = (source, _bin(confidence))
        guesses = self._guesses
        if key in guesses:
            guesses[key] += 1
            self._hits[key] += hit
            self._confidence[key] += confidence
        else:
            guesses[key] = 1
            self._hits[key] = float(hit)
            self._confidence[key] = confidence

    def table(self, sources: Iterable[str] | None = None) -> list[ReliabilityRow]:
        """The reliability table: predicted against observed hit rate, per source and confidence bin."""
        wanted = None if sources is None else set(sources)
        rows = []
        for (source, b), n in sorted(self._guesses.items()):
            if wanted is not None and source not in wanted:
                continue
            mean = self._confidence[(source, b)] / n
            rows.append(ReliabilityRow(source, b / BINS, (b + 1) / BINS, n, mean, self._hits[(source, b)] / n,
                                       self.p_hit(source, mean)))
        return rows


class Worth(NamedTuple):
    """One speculation's price: chance of a hit, seconds a hit hides, expected cost; ``value`` the net.

    An immutable named tuple rather than a frozen dataclass: one is built for every guess, and a tuple is
    built several times faster."""

    p_hit: float
    hide_s: float
    cost_s: float

    @property
    def value(self) -> float:
        return self.p_hit * self.hide_s - self.cost_s


def worth(p_hit: float, run_s: float, eta_s: float | None, cost_units: float, waste_weight: float,
          ran_s: float = 0.0) -> Worth:
    """Price a speculation whose tool typically runs ``run_s`` and whose call is expected in ``eta_s``.

    A hit hides the tool time that passes before the model's own call arrives, and never more than the
    run (``eta_s=None``: unknown, the whole run). A miss wastes the run. A tool that takes no measurable
    time is worth exactly nothing either way (value 0: admitted at the default ``min_value_s``).
    ``ran_s``: how long the speculation has already run (pricing one that is running, to decide whether to
    keep it): the time it ran counts towards what a hit hides, and only the rest of the run is at risk.
    """
    ran = max(0.0, ran_s)
    hide = run_s if eta_s is None else max(0.0, min(run_s, ran + eta_s))
    cost = (1.0 - p_hit) * waste_weight * max(0.0, run_s - ran) * cost_units
    return Worth(p_hit, hide, cost)
