"""The reliability table: how often each guess source was right at each confidence, against what it said.

Every arm's runtime calibrates its sources as it runs (:class:`~forethought._core.pricing.Calibration`). The
bench merges those counts over an arm's repeats into one table per arm (``results.reliability[ARM]``):
per source and confidence bin, the guesses that ended, their mean stated confidence, the observed hit
rate and the P(hit) the scheduler used at the end. A well-calibrated source has hit rate close to its
mean confidence; the scheduler prices guesses by the observed figure either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from forethought._core.pricing import ReliabilityRow

__all__ = ["merge_reliability", "print_reliability"]


def merge_reliability(repeats: Iterable[Sequence[ReliabilityRow]]) -> list[dict[str, Any]]:
    """One table from several repeats' rows: counts added, rates weighted by guesses, the last P(hit) kept."""
    merged: dict[tuple[str, float], dict[str, Any]] = {}
    for rows in repeats:
        for row in rows:
            slot = merged.setdefault((row.source, row.low), {
                "source": row.source, "low": row.low, "high": row.high, "guesses": 0, "_conf": 0.0, "_hits": 0.0,
                "calibrated": row.calibrated})
            slot["guesses"] += row.guesses
            slot["_conf"] += row.mean_confidence * row.guesses
            slot["_hits"] += row.hit_rate * row.guesses
            slot["calibrated"] = row.calibrated
    out = []
    for key in sorted(merged):
        slot = merged[key]
        n = slot["guesses"]
        out.append({"source": slot["source"], "low": slot["low"], "high": slot["high"], "guesses": n,
                    "mean_confidence": slot.pop("_conf") / n if n else 0.0,
                    "hit_rate": slot.pop("_hits") / n if n else 0.0, "calibrated": slot["calibrated"]})
    return out


def print_reliability(console: Console, tables: Mapping[str, Sequence[Mapping[str, Any]]], arm: str) -> None:
    """Print ``arm``'s reliability table (nothing when it has none)."""
    rows = tables.get(arm) or []
    if not rows:
        return
    table = Table(title=f"reliability of guesses ({arm}): stated confidence vs observed hit rate")
    for column in ("source", "confidence", "guesses", "mean stated", "observed", "P(hit) used"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for row in rows:
        table.add_row(str(row["source"]), f"{row['low']:.1f}-{row['high']:.1f}", str(row["guesses"]),
                      f"{row['mean_confidence']:.2f}", f"{row['hit_rate']:.2f}", f"{row['calibrated']:.2f}")
    console.print(table)
