"""Argument checks shared by the performance-model modules: one place that says what a bad value raises.

Model parameters come from the CLI or from measured benchmark figures; a value out of range is the
caller's mistake, reported as a :class:`ValueError` that names the parameter.
"""

from __future__ import annotations

import math


def require(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(message)


def finite_nonnegative(name: str, value: float) -> None:
    """``value`` must be a finite number >= 0."""
    require(math.isfinite(value) and value >= 0, f"{name} must be a finite number >= 0, got {value!r}")


def finite_positive(name: str, value: float) -> None:
    """``value`` must be a finite number > 0."""
    require(math.isfinite(value) and value > 0, f"{name} must be a finite number > 0, got {value!r}")


def probability(name: str, value: float) -> None:
    """``value`` must lie in [0, 1]."""
    require(math.isfinite(value) and 0.0 <= value <= 1.0, f"{name} must be between 0 and 1, got {value!r}")


def positive_int(name: str, value: int) -> None:
    """``value`` must be an integer >= 1."""
    require(isinstance(value, int) and value >= 1, f"{name} must be an integer >= 1, got {value!r}")
