"""Mentions: which of a set of known values (schema enums, values used before) a message names.

A value is mentioned when its alphanumeric words occur, in order and whole, among the message's (case
ignored): ``'New York'`` in "fly to new york!", ``'in_progress'`` in "mark it in progress". Of several
mentioned values the one named last is taken, or the one named first (two pseudo rules of
:mod:`~forethought.predictors.patterns.args`: "from LAX to JFK" names two values of one vocabulary).
Nothing here knows any tool.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

_NOT_ALNUM = re.compile(r"[\W_]+")
"""Runs of characters that are not alphanumeric (in the sense of ``str.isalnum``)."""


@functools.lru_cache(maxsize=4096)
def alnum_words(text: str) -> str:
    """``text`` lower-cased as its alphanumeric words, each between single spaces."""
    return " " + " ".join(_NOT_ALNUM.sub(" ", text.lower()).split()) + " "


def mention_forms(values: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    """The values that can be mentioned (strings of 2+ characters), each with its words as matched."""
    return tuple((value, alnum_words(value)) for value in values if isinstance(value, str) and len(value) >= 2)


def mentioned(forms: Sequence[tuple[str, str]], message: str, first: bool = False) -> str | None:
    """The value (of :func:`mention_forms`) whose words occur last (``first``: first) in ``message``; the
    first in ``forms`` on a tie."""
    text = alnum_words(message)
    best, best_at = None, -1
    for value, form in forms:
        if first:
            at = text.find(form)
            if at >= 0 and (best_at < 0 or at < best_at):
                best, best_at = value, at
            continue
        at = text.rfind(form)
        if at > best_at:
            best, best_at = value, at
    return best
