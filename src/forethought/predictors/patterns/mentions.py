"""Mentions: which of a set of known values (schema enums, values used before) a message names.

Also *abbreviations*: a code among the known values (or the items of a recent output's list) whose letters
spell, in order, a name of the message from its first letter ("MSFT" for "Microsoft", "CRH" for
"Crescent Hollow"): the message names the thing, the tool wants its code.

A value is mentioned when its alphanumeric words occur, in order and whole, among the message's (case
ignored): ``'New York'`` in "fly to new york!", ``'in_progress'`` in "mark it in progress". Of several
mentioned values the one named last is taken, or the one named first (two pseudo rules of
:mod:`~forethought.predictors.patterns.args`: "from LAX to JFK" names two values of one vocabulary).
Also *glosses*: the values a parameter's description explains ("Mode ('l' for lines, 'w' for words)"),
each mentioned when the message names its meaning ("tally up the words").
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


MIN_CODE = 2
MAX_CODE = 6
"""Length of a code that may abbreviate a name ("SFO", "MSFT")."""


def is_code(value: Any) -> bool:
    """Whether ``value`` looks like a code that may abbreviate a name: 2-6 upper-case letters and digits,
    at least one a letter."""
    return (isinstance(value, str) and MIN_CODE <= len(value) <= MAX_CODE and value.isalnum()
            and value.isupper())


@functools.lru_cache(maxsize=8192)
def _name_letters(name: str) -> tuple[str, frozenset[int]]:
    """A name's letters and digits, lower-cased, and the places where one of its words starts."""
    letters: list[str] = []
    starts: set[int] = set()
    for word in _NOT_ALNUM.split(name.lower()):
        if word:
            starts.add(len(letters))
            letters.extend(word)
    return "".join(letters), frozenset(starts)


@functools.lru_cache(maxsize=8192)
def abbreviation_fit(code: str, name: str) -> tuple[int, int] | None:
    """How well ``code`` abbreviates ``name`` ("MSFT" of "Microsoft", "CRH" of "Crescent Hollow"): its
    letters occur in order in the name's, the first at the name's first; None when they do not, or when
    the code *is* the name. The fit: letters at a word's start, then minus the span they take (greedy,
    leftmost)."""
    letters, starts = _name_letters(name)
    code = code.lower()
    if not code or not letters or letters == code or len(letters) <= len(code) or letters[0] != code[0]:
        return None
    at, initials = 0, 1
    for char in code[1:]:
        found = letters.find(char, at + 1)
        if found < 0:
            return None
        at = found
        initials += found in starts
    return initials, -at


@functools.lru_cache(maxsize=256)
def abbreviated(codes: tuple[str, ...], names: tuple[str, ...], first: bool = False) -> str | None:
    """The code (of ``codes``, those :func:`is_code` accepts) that abbreviates the last name of ``names``
    (in message order; ``first``: the first) that any code abbreviates, best fit first, then the first in
    ``codes``. A name written in capitals is a code itself (mentioned, not abbreviated)."""
    ordered = names if first else tuple(reversed(names))
    for name in ordered:
        if name.isupper():
            continue
        best, best_fit = None, None
        for code in codes:
            if not is_code(code):
                continue
            fit = abbreviation_fit(code, name)
            if fit is not None and (best_fit is None or fit > best_fit):
                best, best_fit = code, fit
        if best is not None:
            return best
    return None


_GLOSS = re.compile(r"""['"`‘“]([^'"`’”\s]{1,40})['"`’”]\s*(?:for|=|:|means)\s+"""  # 'value' for
                    r"""([A-Za-z][A-Za-z ]{0,40}?)(?>\s*)(?=[,;.)\]]|(?<=\s)or\b|$)""")  # words, to punctuation
"""A value glossed in a description: a quoted value, "for" (or "=", ":", "means"), and the words it stands
for up to the next punctuation: ``'l' for lines``, ``"r" = read only``. The space after the words is taken
whole (an atomic group), so a long run of spaces costs linear time, not quadratic."""
MAX_GLOSSED_CHARS = 4000
"""Only a description's first characters are read for glosses (descriptions may come from untrusted
servers; a code's explanation sits near the start)."""


@functools.lru_cache(maxsize=1024)
def glosses(description: str) -> tuple[tuple[str, str], ...]:
    """The values a parameter's description glosses ("Mode ('l' for lines, 'w' for words)"), each with the
    words it stands for, as :func:`mention_forms` gives them (matched by :func:`mentioned`)."""
    return tuple((value, alnum_words(words)) for value, words in _GLOSS.findall(description[:MAX_GLOSSED_CHARS])
                 if alnum_words(words).strip())
