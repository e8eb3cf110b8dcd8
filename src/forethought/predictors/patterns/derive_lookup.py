"""Lookup keys: the forms of a value that every transform of
:mod:`~forethought.predictors.patterns.derive_values` preserves, under which an output's leaves are filed
(:mod:`derive_outputs`) and a target value is looked up, so that explaining a value reads a few table entries
instead of every leaf.

A string is keyed by its alphanumeric characters, case-folded (``s:``), whole and by its first and last
words; a number (or a text that reads as one) by its integer part (``n:``; a target also by the integers next
to it, which rounding may give); a target that reads as a date also by its ISO form (``d:``, the key of a
date found inside an output's text field); a text longer than :data:`MAX_KEYED_BYTES`
by itself (``x:``: a long value is a copy, not a case change of one); anything else by its value key
(``v:``). Nothing here knows about any particular tool.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from forethought.predictors.patterns.derive_values import DATE_FORMATS, value_key
from forethought.predictors.patterns.text import NUMBER_WORDS, parse_number

MAX_KEYED_BYTES = 2048
"""A list or object larger than this (roughly, in bytes) is not filed under its whole value; a longer text
is filed as a copy."""
MIN_DATE_DIGITS = 5


_NOT_ALNUM = re.compile(r"[\W_]+")
_json_string = json.encoder.encode_basestring
"""What :func:`~forethought.predictors.patterns.derive_values.value_key` gives for a string."""


def alnum(text: str) -> str:
    """``text`` case-folded (upper-cased first: every case change maps to one form), only its word
    characters but ``_`` (what case and spelling changes keep)."""
    return _NOT_ALNUM.sub("", text.upper().casefold())


def _number_keys(number: int | float) -> tuple[str, ...]:
    """Lookup keys of a number a target may be: integer parts that round or floor to it."""
    if not abs(number) <= 1e15:  # (nan, inf and ints no float holds too)
        return ()
    base = math.floor(number)
    return (f"n:{base - 1}", f"n:{base}", f"n:{base + 1}")


@functools.lru_cache(maxsize=4096)
def date_of(text: str) -> dt.date | None:
    """``text`` read as a whole date in one of the spellings of
    :data:`~forethought.predictors.patterns.derive_values.DATE_FORMATS` (each has a four-digit year and a
    day), or None."""
    if len(text) > 24 or sum(ch.isdigit() for ch in text) < MIN_DATE_DIGITS:
        return None
    for fmt in DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def target_keys(value: Any) -> tuple[str, ...]:
    """The lookup keys under which a leaf that can give ``value`` (or ``[value]``) is filed."""
    single = value[0] if isinstance(value, list) and len(value) == 1 else None
    keys: list[str] = []
    for item in (value,) if single is None or isinstance(single, list | dict) else (value, single):
        if isinstance(item, str):
            keys.append("s:" + alnum(item))
            if len(item) > MAX_KEYED_BYTES:
                keys.append("x:" + item)  # as a long leaf is filed (:func:`_long_string_keys`)
            number = parse_number(item)
            if number is not None:
                keys.extend(_number_keys(number))
            date = date_of(item)
            if date is not None:
                keys.append("d:" + date.isoformat())
        elif isinstance(item, int | float) and not isinstance(item, bool):
            keys.extend(_number_keys(item))
        else:
            keys.append("v:" + value_key(item))
    return tuple(dict.fromkeys(keys))


_NUMERIC = re.compile(r"\s*[-+]?\$?\s*[\d.]")
"""How a text that :func:`parse_number` reads as a number written in digits starts."""
MAX_NUMBER_WORD = 10


def string_keys(text: str) -> list[str]:
    """The lookup keys of a short text (remembered joined in one string: a cached tuple would be one more
    object for the garbage collector to visit, per distinct text)."""
    return _joined_string_keys(text).split(_KEY_SEP)


_KEY_SEP = "\x1d"
"""Joins the lookup keys of one text (no key holds it: they are made of alphanumerics and digits)."""


@functools.lru_cache(maxsize=8192)
def _joined_string_keys(text: str) -> str:
    keys = ["s:" + alnum(text)]
    pieces = text.split()
    if len(pieces) > 1:
        keys.append("s:" + alnum(pieces[0]))
        keys.append("s:" + alnum(pieces[-1]))
    if _NUMERIC.match(text) or (len(text) <= MAX_NUMBER_WORD and text.strip().lower() in NUMBER_WORDS):
        number = parse_number(text)
        if number is not None and math.isfinite(number) and abs(number) <= 1e15:
            keys.append(f"n:{math.floor(number)}")
    return _KEY_SEP.join(dict.fromkeys(keys))


def _long_string_keys(text: str) -> tuple[str, ...]:
    """The lookup keys of a text longer than :data:`MAX_KEYED_BYTES`: the text itself (a long value is a
    copy, not a case change of one; reading every character to fold it would cost more than all the rest
    of the index) and the keys of its first and last words."""
    keys = ["x:" + text]
    head, tail = text.split(None, 1), text.rsplit(None, 1)
    if len(head) > 1:
        keys.append("s:" + alnum(head[0]))
        keys.append("s:" + alnum(tail[-1]))
    return tuple(dict.fromkeys(keys))


def leaf_keys(leaf: Any) -> Sequence[str]:
    if isinstance(leaf, str):
        return string_keys(leaf) if len(leaf) <= MAX_KEYED_BYTES else _long_string_keys(leaf)
    if isinstance(leaf, int | float) and not isinstance(leaf, bool):
        return (f"n:{math.floor(leaf)}",) if abs(leaf) <= 1e15 else ()  # (never inf, nan or past a float)
    return ("v:" + value_key(leaf),)
