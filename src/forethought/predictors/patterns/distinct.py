"""Distinct values: two parameters of one call rarely take the same value, learned per tool.

Each parameter's value is derived on its own, so two of them can pick the same candidate ("from LAX to
LAX", a ticket whose description is its title). Calls mostly pass different values to different
parameters, and how often they do not is learned like everything else: each observed call with two or
more comparable values (strings and numbers, not booleans or empty strings) is a *trial*, a *success* when
two of them are equal. The rate is shrunk towards the rate over all tools, which is shrunk towards an
uninformed prior. :func:`assign` fills a call's parameters best first, each with its best value that no
parameter filled before it took (when the tool's rate says values are distinct); a call that still
repeats a value is scored by the rate. Nothing here knows any tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.rates import ToolRate

PREFIX = "q"
"""Counter keys: ``q SEP tool SEP s`` (calls repeating a value) and ``q SEP tool SEP n`` (calls with two or
more comparable values); ``tool`` = ``*`` for all tools."""
PRIOR_WEIGHT = 2.0
PRIOR_RATE = 0.5
DISTINCT_BELOW = 0.5
"""A tool whose calls repeat a value less often than this has its parameters filled with distinct values."""


class _Candidate(Protocol):
    @property
    def value(self) -> Any: ...
    @property
    def key(self) -> str: ...
    @property
    def absent(self) -> bool: ...
    @property
    def score(self) -> float: ...


def comparable_key(value: Any) -> str | None:
    """The key of ``value`` when it counts for distinctness (a non-empty string or a number), else None."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    if isinstance(value, str) and not value.strip():
        return None
    try:
        return value_key(value.lower() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None


def repeats_a_value(values: Sequence[Any]) -> bool | None:
    """Whether two of ``values`` are equal (:func:`comparable_key`); None when fewer than two count."""
    keys = [k for k in map(comparable_key, values) if k is not None]
    if len(keys) < 2:
        return None
    return len(set(keys)) < len(keys)


class DistinctModel:
    """Per-tool rate of calls that pass one value to two parameters."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self._rate = ToolRate(counts, PREFIX, PRIOR_RATE, PRIOR_WEIGHT)


    def learn(self, tool: str, arguments: Mapping[str, Any]) -> None:
        """Count one observed call (a trial only with two or more comparable values)."""
        repeated = repeats_a_value(list(arguments.values()))
        if repeated is None:
            return
        self._rate.count(tool, repeated)

    def rate(self, tool: str) -> float:
        """How likely a call of ``tool`` with two or more comparable values repeats one of them."""
        return self._rate.rate(tool)


def clashing(choices: Mapping[str, Sequence[_Candidate]]) -> set[str]:
    """The parameters whose best value (:func:`comparable_key`) is another parameter's best value too."""
    owners: dict[str, list[str]] = {}
    for param, found in choices.items():
        key = None if not found or found[0].absent else comparable_key(found[0].value)
        if key is not None:
            owners.setdefault(key, []).append(param)
    return {param for params in owners.values() if len(params) > 1 for param in params}


def assign(choices: Mapping[str, Sequence[_Candidate]], distinct: bool) -> dict[str, int]:
    """For each parameter, the index of the candidate to use: its best, or (``distinct``) its best whose
    value no parameter with a better best score took (its best again when every one was taken)."""
    picked = {param: 0 for param in choices}
    if not distinct:
        return picked
    taken: set[str] = set()
    for param in sorted(choices, key=lambda p: (-choices[p][0].score, p)):
        found = choices[param]
        for i, candidate in enumerate(found):
            key = None if candidate.absent else comparable_key(candidate.value)
            if key is None or key not in taken:
                picked[param] = i
                break
        chosen = found[picked[param]]
        key = None if chosen.absent else comparable_key(chosen.value)
        if key is not None:
            taken.add(key)
    return picked
