"""Mention order in paired parameters: "from LAX to JFK" gives origin the first, destination the second.

Two parameters of one tool often take two values named in one message (an origin and a destination, a
source and a target, a first and a second file), and each parameter's value is derived on its own, so both
can come out swapped. :class:`PairOrder` learns, per tool and pair of parameters, how often the first
parameter's value is named before the second's (counted only on calls whose two values are both named in
the user's message); when a call's best values are named in the order the pair almost never has, and each
is a candidate of the other parameter, the two are swapped. Nothing here knows a tool: values are found in
the message by their words (:func:`~forethought.predictors.patterns.mentions.alnum_words`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.mentions import alnum_words

PREFIX = "o"
"""Counter keys: ``o SEP tool SEP p SEP q SEP n`` (calls naming both values) and ``... SEP s`` (calls naming
``p``'s first), for parameter names ``p`` < ``q``."""
SEP = "\x1f"
MIN_CALLS = 4.0
"""Calls naming both values before the pair's order counts."""
DECISIVE = 0.95
"""Share of one order above which the other is taken for a swap."""


class _Candidate(Protocol):
    @property
    def value(self) -> Any: ...
    @property
    def key(self) -> str: ...
    @property
    def absent(self) -> bool: ...


def named_at(value: Any, message: str) -> int | None:
    """Where ``message`` names ``value`` (a string of 2+ characters, by its words), or None."""
    if not isinstance(value, str) or len(value.strip()) < 2 or not message:
        return None
    found = alnum_words(message).find(alnum_words(value))
    return None if found < 0 else found


class PairOrder:
    """Per tool and pair of parameters: how often the first's value is named before the second's."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    @staticmethod
    def _base(tool: str, first: str, second: str) -> str:
        return SEP.join((PREFIX, tool, first, second, ""))

    def learn(self, tool: str, arguments: Mapping[str, Any], message: str) -> None:
        """Count, for each pair of the call's parameters whose values the message both names (apart), the
        order it names them in."""
        named = sorted((name, at) for name, value in arguments.items()
                       if (at := named_at(value, message)) is not None)
        keys = []
        for i, (first, first_at) in enumerate(named):
            for second, second_at in named[i + 1:]:
                if first_at != second_at:
                    base = self._base(tool, first, second)
                    keys.append(base + "n")
                    if first_at < second_at:
                        keys.append(base + "s")
        if keys:
            self.counts.add_ones(keys)

    def reorder(self, tool: str, choices: Mapping[str, Sequence[_Candidate]], picks: dict[str, int],
                message: str) -> dict[str, int]:
        """``picks`` (parameter -> index of its chosen candidate) with the values of a pair swapped where the
        message names them in the order the pair almost never has and each is a candidate of the other."""
        if not message:
            return picks
        params = sorted(p for p, found in choices.items() if found and not found[picks[p]].absent)
        if len(params) < 2:
            return picks
        picks = dict(picks)
        for i, first in enumerate(params):
            for second in params[i + 1:]:
                base = self._base(tool, first, second)
                calls = self.counts.get(base + "n")
                if calls < MIN_CALLS:
                    continue
                share = self.counts.get(base + "s") / calls
                a, b = choices[first][picks[first]], choices[second][picks[second]]
                at_a, at_b = named_at(a.value, message), named_at(b.value, message)
                if at_a is None or at_b is None or at_a == at_b:
                    continue
                wrong = (at_a < at_b and share <= 1 - DECISIVE) or (at_a > at_b and share >= DECISIVE)
                if not wrong:
                    continue
                swap_first = next((j for j, c in enumerate(choices[first]) if c.key == b.key), None)
                swap_second = next((j for j, c in enumerate(choices[second]) if c.key == a.key), None)
                if swap_first is not None and swap_second is not None:
                    picks[first], picks[second] = swap_first, swap_second
        return picks
