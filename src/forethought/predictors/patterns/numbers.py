"""How a parameter spells whole numbers: ``5`` or ``5.0``, learned per tool parameter and per whether the
message states the number.

Canonical keys tell ``5`` from ``5.0`` (a tool can tell them apart), so a guess must spell a whole number
the way the model does for that parameter. Values are derived as plain numbers (text, outputs and earlier
arguments lose the distinction on the way); this module remembers, per (tool, parameter), how often the
model wrote a whole number as an int or as a float, and re-spells guesses by the majority. A model copying
a number the user wrote tends to copy its spelling, and one it works out or chooses itself tends to write
it its own way: so the counts are kept apart for a number the user's message states ("30 gallons", and
apart again when written "30.0") and one it does not, and those decide first, the parameter's counts when
they are even. With no history the schema decides: ``integer`` gives an int, ``number`` a float.
Non-whole numbers, booleans and everything else pass through unchanged; lists are re-spelled item by item.

The counts are the predictor's counters (:mod:`counts`), so they are saved to its store and loaded from it
like everything else it learns: at most eight per parameter (int and float, overall and for each way the
message may state the number), under the :data:`PREFIX` of keys that never decay (a count of how the
model writes, as the in-memory counts were).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from forethought.predictors.patterns.counts import PLAIN_PREFIX, Counts
from forethought.predictors.patterns.derive_index import atoms_by_kind

NOT_STATED = "-"
"""How a number the message does not state is marked (:func:`stated`)."""
PREFIX = PLAIN_PREFIX + "#"
"""The counters' keys: ``PREFIX, tool, parameter[, how stated], i|f`` joined by :data:`SEP`."""
SEP = "\x1f"
_KINDS = ("i", "f")


@functools.lru_cache(maxsize=256)
def _stated(text: str) -> Mapping[float, str]:
    spelt: dict[float, str] = {}
    for atom in atoms_by_kind(text).get("number", ()):
        if atom.number is not None:
            spelt.setdefault(atom.number, "float" if "." in atom.text else "int")
    return spelt


def stated(text: str, value: float) -> str:
    """How ``text`` states the number ``value``: ``"int"`` (``30``, ``5,000``, ``ten``), ``"float"``
    (``30.0``), or :data:`NOT_STATED`."""
    return _stated(text).get(float(value), NOT_STATED) if text else NOT_STATED


def _whole(item: Any) -> bool:
    """A whole number a float can hold (so it can be spelt either way): not a bool, inf, nan or an int past
    1.8e308."""
    if isinstance(item, bool) or not isinstance(item, int | float):
        return False
    return item.is_integer() if isinstance(item, float) else abs(item) <= sys.float_info.max


class NumberSpelling:
    """Per-parameter counts of whole numbers seen as int and as float (overall, and by how the message
    stated them), and the re-spelling they imply; kept in ``counts`` (its own when none is given)."""

    def __init__(self, counts: Counts | None = None) -> None:
        self.counts = counts if counts is not None else Counts(None, keeps_pending=False)

    def copy(self) -> NumberSpelling:
        """An independent copy (of every counter its counts hold)."""
        clone = Counts(self.counts.half_life, keeps_pending=False)
        clone.load(self.counts.state())
        return NumberSpelling(clone)

    @staticmethod
    def _key(level: tuple[str, ...], as_float: bool) -> str:
        return SEP.join((PREFIX, *level, _KINDS[as_float]))

    def _seen(self, level: tuple[str, ...]) -> tuple[float, float] | None:
        """(ints, floats) counted at ``level``; None when neither was."""
        ints, floats = self.counts.get(self._key(level, False)), self.counts.get(self._key(level, True))
        return (ints, floats) if ints or floats else None

    def learn(self, tool: str, arguments: Mapping[str, Any], message: str = "") -> None:
        """Count how the call spelled each whole number it passed (top level and list items), overall and
        by how ``message`` (the user's latest) states it."""
        keys: list[str] = []
        for param, value in arguments.items():
            if not isinstance(param, str):
                continue
            for item in value if isinstance(value, list) else (value,):
                if not _whole(item):
                    continue
                as_float = isinstance(item, float)
                keys.append(self._key((tool, param), as_float))
                keys.append(self._key((tool, param, stated(message, item)), as_float))
        if keys:
            self.counts.add_plain([(key, 1.0) for key in keys])

    def spell(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any,
              message: str = "") -> Any:
        """``value`` with its whole numbers spelt as this parameter's calls spell them."""
        if isinstance(value, list):
            items = (schema or {}).get("items")
            return [self._one(tool, param, items if isinstance(items, Mapping) else None, v, message)
                    for v in value]
        return self._one(tool, param, schema, value, message)

    def _one(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any, message: str) -> Any:
        if not _whole(value):
            return value
        for level in ((tool, param, stated(message, value)), (tool, param)):
            counts = self._seen(level)
            if counts is not None and counts[0] != counts[1]:
                return float(value) if counts[1] > counts[0] else int(value)
        kind = (schema or {}).get("type")
        if kind == "number":
            return float(value)
        if kind == "integer":
            return int(value)
        return value

    def other_spelling(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any,
                       message: str = "") -> tuple[Any, float] | None:
        """``value`` (a whole number as :meth:`spell` gives it) spelt the other way, with the share of the
        parameter's whole numbers spelt so (those stated as this one is, with one more call spelt at the
        parameter's overall share); None when the parameter's calls always spelt it one way."""
        if not _whole(value):
            return None
        counts = self._seen((tool, param))
        if counts is None or counts[0] <= 0 or counts[1] <= 0:
            return None
        other = 0 if isinstance(value, float) else 1
        share = counts[other] / (counts[0] + counts[1])
        alike = self._seen((tool, param, stated(message, value)))
        if alike is not None and alike[0] >= 0 and alike[1] >= 0:  # counts, unless a store held other numbers
            share = (alike[other] + share) / (alike[0] + alike[1] + 1)
        return (int(value) if other == 0 else float(value)), share
