"""Ordinals: "the first stock on the list", "the second file", "the last one" pick an item of an output list.

A user often points at an item of a list an earlier call returned by its position instead of its value.
:func:`message_ordinal` reads the position the message names first (``0`` for "first", ``1`` for
"second" or "2nd", ``-1`` for "last", ``-2`` for "second to last"); :func:`ordinal_path` turns a leaf's
path (``watchlist[0]``, ``items[2].id``) into a pattern with its outermost list index left open
(``watchlist[#]``) when that index is the one the message names, and :func:`at_ordinal` fills the pattern
in again for another message. A derivation rule built on it (source ``ord``) reads "the item of this list
that the message's ordinal names", whatever the list holds. Plain English only; nothing here knows a tool.
"""

from __future__ import annotations

import functools
import re

OPEN = "[#]"
"""The open list index of a path pattern."""
MAX_TEXT = 4096
"""Message text read for an ordinal (its start)."""

_WORDS = {
    "first": 0, "initial": 0, "second": 1, "third": 2, "fourth": 3, "fifth": 4, "sixth": 5, "seventh": 6,
    "eighth": 7, "ninth": 8, "tenth": 9, "last": -1, "final": -1, "penultimate": -2,
}
"""Ordinal words (not "1st", "2nd": those mostly write days of a month)."""
_DETERMINERS = ("the", "my", "that", "this", "its", "our", "your", "their", "his", "her")
_ORDINAL = re.compile(r"\b(?:" + "|".join(_DETERMINERS) + r")\s+(" + "|".join(sorted(_WORDS, key=len, reverse=True))
                      + r")\b(?!-)(?:\s+(to\s+last|from\s+(?:the\s+)?(?:last|end|bottom)))?", re.IGNORECASE)
"""An ordinal word after a determiner ("the second file", "my last order"; not "first class", "Lastly",
"a last-minute change")."""
_INDEX = re.compile(r"\[(-?\d+)\]")


@functools.lru_cache(maxsize=1024)
def message_ordinal(text: str) -> int | None:
    """The list position the first ordinal word of ``text`` names (0-based; negative from the end), or
    None when it names none. "the second to last" and "the second from the end" count from the end."""
    if not isinstance(text, str):
        return None
    found = _ORDINAL.search(text[:MAX_TEXT])
    if found is None:
        return None
    position = _WORDS[found.group(1).lower()]
    if found.group(2) and position >= 0:
        return -1 - position
    return position


def ordinal_path(path: str, ordinal: int) -> str | None:
    """``path`` with its outermost list index opened (:data:`OPEN`) when that index is ``ordinal``."""
    found = _INDEX.search(path)
    if found is None or int(found.group(1)) != ordinal:
        return None
    return path[: found.start()] + OPEN + path[found.end():]


def at_ordinal(pattern: str, ordinal: int) -> str:
    """The path of ``pattern`` (from :func:`ordinal_path`) at list position ``ordinal``."""
    return pattern.replace(OPEN, f"[{ordinal}]", 1)
