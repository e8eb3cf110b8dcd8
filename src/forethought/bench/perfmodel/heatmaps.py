"""Heatmaps (PNG) of modelled speedup, a grid of panels like Figure 3 of Nichols et al. (arXiv 2512.15834).

:func:`plot_speedup_heatmaps` shows the client-side closed form over ``g/G`` x ``T/G``, one panel per
acceptance rate; :func:`plot_engine_heatmaps` shows the engine-side arm over the client round-trip cost
``C/G`` x ``T/G``. Figures are drawn with matplotlib's object API on an Agg canvas, so no global backend
is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from forethought.bench.perfmodel._checks import finite_nonnegative, probability, require
from forethought.bench.perfmodel.closed import SPEEDUP_SUPREMUM, speedup
from forethought.bench.perfmodel.engine import arm_times

DEFAULT_ALPHAS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
DEFAULT_T_RATIOS: tuple[float, ...] = tuple(round(0.025 * i, 3) for i in range(1, 121))  # T/G in 0.025 .. 3.0
DEFAULT_G_RATIOS: tuple[float, ...] = tuple(round(0.02 * i, 2) for i in range(0, 51))  # g/G in 0 .. 1.0
ENGINE_T_RATIOS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 61))  # T/G in 0.05 .. 3.0
DEFAULT_C_RATIOS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 21))  # C/G in 0 .. 1.0
CONTOURS: tuple[float, ...] = (1.1, 1.25, 1.5, 1.75)
ENGINE_TURNS = 20
DPI = 120


def _check_axes(alphas: Sequence[float], *ratio_axes: Sequence[float]) -> None:
    require(len(alphas) > 0, "at least one alpha is needed")
    for a in alphas:
        probability("alpha", a)
    for axis in ratio_axes:
        require(len(axis) >= 2, "each ratio axis needs at least two values")
        for value in axis:
            finite_nonnegative("ratio", value)


def speedup_grid(alpha: float, g_ratios: Sequence[float], t_ratios: Sequence[float]) -> list[list[float]]:
    """Client-side speedup with ``G = 1``: rows follow ``g_ratios``, columns ``t_ratios``."""
    return [[speedup(alpha, 1.0, g, t) for t in t_ratios] for g in g_ratios]


def engine_grid(
    alpha: float, g_ratio: float, c_ratios: Sequence[float], t_ratios: Sequence[float], post_ratio: float
) -> list[list[float]]:
    """Engine-side speedup over serial with ``G = 1``: rows follow ``c_ratios``, columns ``t_ratios``."""
    return [
        [
            arm_times(
                alpha=alpha, G=1.0, g=g_ratio, T=t, round_trip_s=c, post_s=post_ratio, turns=ENGINE_TURNS
            ).speedup_engine
            for t in t_ratios
        ]
        for c in c_ratios
    ]


def _panels(
    path: Path,
    grids: Sequence[list[list[float]]],
    alphas: Sequence[float],
    x: Sequence[float],
    y: Sequence[float],
    labels: tuple[str, str, str, str],
    vmax: float,
) -> Path:
    xlabel, ylabel, colorbar_label, title = labels
    fig = Figure(figsize=(3.4 * len(alphas) + 1.2, 3.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(alphas), sharey=True, squeeze=False)[0]
    mesh = None
    for ax, alpha, grid in zip(axes, alphas, grids, strict=True):
        mesh = ax.pcolormesh(list(x), list(y), grid, shading="nearest", cmap="viridis", vmin=1.0, vmax=vmax)
        levels = [level for level in (*CONTOURS, 2.0, 2.5) if level < max(max(row) for row in grid)]
        if levels:
            lines = ax.contour(list(x), list(y), grid, levels=levels, colors="white", linewidths=0.7)
            ax.clabel(lines, fontsize=7, fmt="%.3g")
        best = max(max(row) for row in grid)
        ax.set_title(f"α = {alpha:g}  (max {best:.2f}x)", fontsize=10)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    if mesh is not None:
        fig.colorbar(mesh, ax=list(axes), label=colorbar_label, shrink=0.9)
    fig.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def plot_speedup_heatmaps(
    path: Path,
    *,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    g_ratios: Sequence[float] = DEFAULT_G_RATIOS,
    t_ratios: Sequence[float] = DEFAULT_T_RATIOS,
) -> Path:
    """Write the client-side closed-form speedup over ``g/G`` x ``T/G``, one panel per alpha, to ``path``."""
    _check_axes(alphas, g_ratios, t_ratios)
    grids = [speedup_grid(a, g_ratios, t_ratios) for a in alphas]
    labels = (
        "T / G (tool time / generation time)",
        "g / G (speculator / main model)",
        "speedup T_std / T_spec",
        "Client-side speculation: T_std / T_spec (Lemma 1: < 2 for g > 0, 2 only at g = 0, T = G, α = 1)",
    )
    return _panels(path, grids, alphas, t_ratios, g_ratios, labels, SPEEDUP_SUPREMUM)


def plot_engine_heatmaps(
    path: Path,
    *,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    g_ratio: float = 0.15,
    post_ratio: float = 0.05,
    c_ratios: Sequence[float] = DEFAULT_C_RATIOS,
    t_ratios: Sequence[float] = ENGINE_T_RATIOS,
) -> Path:
    """Write the engine-side speedup over ``C/G`` x ``T/G`` (fixed ``g/G``), one panel per alpha, to ``path``."""
    _check_axes(alphas, c_ratios, t_ratios)
    finite_nonnegative("g_ratio", g_ratio)
    finite_nonnegative("post_ratio", post_ratio)
    grids = [engine_grid(a, g_ratio, c_ratios, t_ratios, post_ratio) for a in alphas]
    vmax = max(SPEEDUP_SUPREMUM, max(max(max(row) for row in grid) for grid in grids))
    labels = (
        "T / G",
        "C / G (client round trip / generation)",
        "speedup over serial",
        f"Engine-side speculation over serial (g/G = {g_ratio:.2f}, post o/G = {post_ratio:.2f}, {ENGINE_TURNS} turns)",
    )
    return _panels(path, grids, alphas, t_ratios, c_ratios, labels, vmax)
