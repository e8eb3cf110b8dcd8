"""How a parameter spells whole numbers: ``5`` or ``5.0``, learned per tool parameter.

Canonical keys tell ``5`` from ``5.0`` (a tool can tell them apart), so a guess must spell a whole number
the way the model does for that parameter. Values are derived as plain numbers (text, outputs and earlier
arguments lose the distinction on the way); this module remembers, per (tool, parameter), how often the
model wrote a whole number as an int or as a float, and re-spells guesses by the majority. With no
history the schema decides: ``integer`` gives an int, ``number`` a float. Non-whole numbers, booleans and
everything else pass through unchanged; lists are re-spelled item by item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class NumberSpelling:
    """Per-parameter counts of whole numbers seen as int and as float, and the re-spelling they imply."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[int]] = {}

    def copy(self) -> NumberSpelling:
        clone = NumberSpelling()
        clone._seen = {key: list(counts) for key, counts in self._seen.items()}
        return clone

    def learn(self, tool: str, arguments: Mapping[str, Any]) -> None:
        """Count how the call spelled each whole number it passed (top level and list items)."""
        for param, value in arguments.items():
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, bool) or not isinstance(item, int | float):
                    continue
                if isinstance(item, float) and not item.is_integer():
                    continue
                counts = self._seen.setdefault((tool, param), [0, 0])
                counts[isinstance(item, float)] += 1

    def spell(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any) -> Any:
        """``value`` with its whole numbers spelt as this parameter's calls spell them."""
        if isinstance(value, list):
            items = (schema or {}).get("items")
            return [self._one(tool, param, items if isinstance(items, Mapping) else None, v) for v in value]
        return self._one(tool, param, schema, value)

    def _one(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value
        if isinstance(value, float) and not value.is_integer():
            return value
        counts = self._seen.get((tool, param))
        if counts is not None and counts[0] != counts[1]:
            as_float = counts[1] > counts[0]
        else:
            kind = (schema or {}).get("type")
            if kind == "number":
                as_float = True
            elif kind == "integer":
                as_float = False
            else:
                return value
        return float(value) if as_float else int(value)

    def other_spelling(self, tool: str, param: str, schema: Mapping[str, Any] | None, value: Any
                       ) -> tuple[Any, float] | None:
        """``value`` (a whole number as :meth:`spell` gives it) spelt the other way, with the share of the
        parameter's whole numbers spelt so; None when the parameter's calls always spelt it one way."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not value.is_integer():
            return None
        counts = self._seen.get((tool, param))
        if counts is None or not counts[0] or not counts[1]:
            return None
        as_float = isinstance(value, float)
        share = counts[0 if as_float else 1] / (counts[0] + counts[1])
        return (int(value) if as_float else float(value)), share
