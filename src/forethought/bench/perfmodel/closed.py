"""Closed forms of client-side speculation (Nichols et al., arXiv 2512.15834, section on client-side speculation).

Per turn the main model generates for ``G`` seconds, a speculator for ``g`` seconds, the tool runs for ``T``
seconds, and the speculator's guess is right with probability ``alpha``. Over ``N`` turns:

* serial:       ``T_std  = N (G + T)``
* speculative:  ``T_spec = alpha N max(G, g + T) + (1 - alpha) N (G + T)``
* speedup:      ``S = T_std / T_spec``

:func:`lemma1_bound` is the largest speedup any acceptance rate gives for fixed ``G, g, T`` (``alpha = 1``
when ``g <= G``): ``(G + T) / max(G, g + T)``, strictly below 2 whenever ``g > 0``; its supremum 2 is approached as
``alpha -> 1``, ``g -> 0`` and ``T -> G``. :func:`efficiency` and :func:`efficiency_per_turn` divide a
measured speedup by the model's speedup for the measured parameters; the bench uses the per-turn form
(see docs/perfmodel.md for why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forethought.bench.perfmodel._checks import finite_nonnegative, finite_positive, positive_int, probability, require

SPEEDUP_SUPREMUM = 2.0
"""Overlapping one tool with one generation can at best halve a turn: the supremum of :func:`lemma1_bound`."""


def _check_times(G: float, g: float, T: float) -> None:
    finite_nonnegative("G", G)
    finite_nonnegative("g", g)
    finite_nonnegative("T", T)
    require(G + T > 0, "G + T must be > 0 (a turn takes some time)")


@dataclass(frozen=True, slots=True)
class SpecParams:
    """One closed-form scenario: acceptance rate, per-turn times in seconds, number of turns."""

    alpha: float
    G: float
    g: float
    T: float
    N: int = 1

    def __post_init__(self) -> None:
        probability("alpha", self.alpha)
        _check_times(self.G, self.g, self.T)
        positive_int("N", self.N)


@dataclass(frozen=True, slots=True)
class SpecTimes:
    """Serial and speculative wall time of a scenario, in seconds."""

    standard_s: float
    speculative_s: float

    @property
    def speedup(self) -> float:
        return self.standard_s / self.speculative_s

    @property
    def time_saved(self) -> float:
        """Fraction of the serial time that speculation removes."""
        return 1.0 - self.speculative_s / self.standard_s


def standard_time(G: float, T: float, N: int = 1) -> float:
    """``T_std = N (G + T)``."""
    _check_times(G, 0.0, T)
    positive_int("N", N)
    return N * (G + T)


def speculative_time(alpha: float, G: float, g: float, T: float, N: int = 1) -> float:
    """``T_spec = alpha N max(G, g + T) + (1 - alpha) N (G + T)``."""
    probability("alpha", alpha)
    _check_times(G, g, T)
    positive_int("N", N)
    return alpha * N * max(G, g + T) + (1.0 - alpha) * N * (G + T)


def times(params: SpecParams) -> SpecTimes:
    """Both closed-form times of ``params``."""
    p = params
    return SpecTimes(standard_time(p.G, p.T, p.N), speculative_time(p.alpha, p.G, p.g, p.T, p.N))


def speedup(alpha: float, G: float, g: float, T: float) -> float:
    """``T_std / T_spec`` (independent of ``N``): the model's speedup for these parameters."""
    return standard_time(G, T) / speculative_time(alpha, G, g, T)


def lemma1_bound(G: float, g: float, T: float) -> float:
    """The best speedup any acceptance rate can give: ``(G + T) / max(G, g + T)`` (``alpha = 1``), or 1 when
    the speculator is slower than the model (``g > G``: then ``alpha = 0`` is best). ``< 2`` whenever ``g > 0``.
    """
    return max(1.0, speedup(1.0, G, g, T))


def overlap_cap(G: float, T: float) -> float:
    """``(G + T) / max(G, T)``: what perfect overlap of one tool with one generation can give (``<= 2``)."""
    return speedup(1.0, G, 0.0, T)


def efficiency(measured_speedup: float, alpha: float, G: float, g: float, T: float) -> float:
    """Measured speedup divided by :func:`speedup` for the measured mean ``alpha, G, g, T``.

    1.0 means the runtime delivered everything the model allows; below 1.0 it lost time somewhere. Use
    :func:`efficiency_per_turn` when per-turn measurements exist: real turns vary and the model is not
    linear in them.
    """
    finite_positive("measured_speedup", measured_speedup)
    return measured_speedup / speedup(alpha, G, g, T)


def _check_turns(G: Sequence[float], g: Sequence[float], T: Sequence[float], hits: Sequence[bool]) -> None:
    require(len(G) > 0, "at least one turn is needed")
    require(
        len(G) == len(g) == len(T) == len(hits),
        f"per-turn lists differ in length: G={len(G)} g={len(g)} T={len(T)} hits={len(hits)}",
    )
    for i, (gi_main, gi_spec, ti) in enumerate(zip(G, g, T, strict=True)):
        finite_nonnegative(f"G[{i}]", gi_main)
        finite_nonnegative(f"g[{i}]", gi_spec)
        finite_nonnegative(f"T[{i}]", ti)
    require(sum(G) + sum(T) > 0, "the turns take no time at all")


def per_turn_times(G: Sequence[float], g: Sequence[float], T: Sequence[float], hits: Sequence[bool]) -> SpecTimes:
    """Serial time ``sum(G_i + T_i)`` and model-optimal speculative time of measured turns.

    A hit turn costs ``max(G_i, g_i + T_i)`` (its tool overlapped the generation), a miss ``G_i + T_i``.
    """
    _check_turns(G, g, T, hits)
    standard = sum(gm + t for gm, t in zip(G, T, strict=True))
    speculative = sum(max(gm, gs + t) if hit else gm + t for gm, gs, t, hit in zip(G, g, T, hits, strict=True))
    return SpecTimes(standard, speculative)


def per_turn_speedup(G: Sequence[float], g: Sequence[float], T: Sequence[float], hits: Sequence[bool]) -> float:
    """The model's speedup for measured turns: sum of serial turn times / sum of model-optimal turn times."""
    return per_turn_times(G, g, T, hits).speedup


def efficiency_per_turn(
    measured_speedup: float,
    G: Sequence[float],
    g: Sequence[float],
    T: Sequence[float],
    hits: Sequence[bool],
) -> float:
    """Measured speedup divided by :func:`per_turn_speedup` (the figure the bench reports)."""
    finite_positive("measured_speedup", measured_speedup)
    return measured_speedup / per_turn_speedup(G, g, T, hits)
