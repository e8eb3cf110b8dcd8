"""Value transforms: the small, named changes that turn a value found somewhere into an argument.

About a third of argument values never appear verbatim before the call: ``'Zeta Corp'`` becomes
``'ZETA'``, ``"20,000 USD"`` becomes ``20000.0``, ``"October 15, 2026"`` becomes ``'2026-10-15'``,
``"#RoadTrip"`` becomes ``['#RoadTrip']``. Each such change is a named transform here, so a derivation
rule can record it ("the first proper noun, upper-cased, first word") and replay it on the next session.

:func:`string_variants`, :func:`number_variants`, :func:`date_variants` list every (name, value) a source
gives; :func:`apply_transform` recomputes one by name; :func:`value_key` compares values the way
schema-aware keys do (``1`` and ``1.0`` alike).
"""

from __future__ import annotations

import datetime as dt
import json
import json.encoder
import math
import sys
from collections.abc import Iterator
from typing import Any

from forethought.predictors.patterns.text import parse_number

TIME_FORMATS = ("%H:%M", "%H:%M:%S", "%I:%M %p", "%I %p", "%H%M")
"""Spellings of a time of day."""
DATETIME_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S",
                    "%Y-%m-%dT%H:%M:%SZ", "%m/%d/%Y %H:%M")
"""Spellings of a date with its time."""
EPOCH = "epoch"
"""The transform giving a datetime's Unix timestamp (seconds, as UTC)."""
_TIME_DIRECTIVES = frozenset("HIMSpf")
_DATE_DIRECTIVES = frozenset("YmdBbyaAjU")
DATE_FORMATS = ("%Y-%m-%d", "%m/%d/%Y", "%d/%m/%Y", "%Y/%m/%d", "%d-%m-%Y", "%m-%d-%Y", "%Y%m%d",
                "%B %d, %Y", "%d %B %Y", "%b %d, %Y")
"""Date spellings a date found in text may be rewritten to."""

MAX_ROUND_DIGITS = 3
_BIG_INT = 1 << 1000
_json_string = json.encoder.encode_basestring
"""What ``json.dumps(text, ensure_ascii=False)`` returns for a string."""
_CASES = ("id", "lower", "upper", "title", "cap")
_PARTS = ("all", "first", "last")


def value_key(value: Any) -> str:
    """A canonical string for comparing argument values (integral floats equal ints, keys sorted)."""
    kind = value.__class__
    # Scalars, exactly as the general path below writes them, without its cost.
    if kind is str:
        return _json_string(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is int and -_BIG_INT < value < _BIG_INT:  # (beyond, the general path: no float holds it)
        return int.__repr__(value)
    if kind is float:
        if not math.isfinite(value):
            return _json_string(str(value))
        return int.__repr__(int(value)) if value.is_integer() else float.__repr__(value)

    return json.dumps(_normalized(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _normalized(v: Any) -> Any:
    """``v`` with whole floats as ints and non-JSON values as text, for :func:`value_key` (a module-level
    function: a nested recursive one would be a reference cycle per call)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v  # (float(v) would overflow past 1.8e308; an int is whole already)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return int(v) if v.is_integer() else v
    if isinstance(v, list | tuple):
        return [_normalized(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _normalized(x) for k, x in v.items()}
    return str(v)


def _case(text: str, case: str) -> str:
    if case == "lower":
        return text.lower()
    if case == "upper":
        return text.upper()
    if case == "title":
        return text.title()
    if case == "cap":
        return text[:1].upper() + text[1:]
    return text


def _part(text: str, part: str) -> str | None:
    pieces = text.split()
    if part == "all":
        return text
    if len(pieces) < 2:
        return None
    return pieces[0] if part == "first" else pieces[-1]


def string_variants(text: str) -> Iterator[tuple[str, Any]]:
    """Every (transform name, value) a string source offers: case and word-part changes, prefixes, numbers."""
    for part in _PARTS:
        piece = _part(text, part)
        if piece is None:
            continue
        for case in _CASES:
            yield f"{part}.{case}", _case(piece, case)
    stripped = text.strip(" .,;:!?")
    if stripped != text:
        yield "strip", stripped
    if text[:1] in "#@" and len(text) > 1:
        yield "untag", text[1:]
    elif " " not in text:
        yield "hash", "#" + text
        yield "at", "@" + text
    if " " in text:
        yield "joined", "".join(w[:1].upper() + w[1:] for w in text.split())
        yield "snake", "_".join(text.lower().split())
    number = parse_number(text)
    if number is not None:
        yield from number_variants(number, prefix="num.")


def number_variants(number: float, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (transform name, value) a number offers: itself, rounded, and as a string."""
    yield prefix + "id", int(number) if number.is_integer() else number
    if not number.is_integer():
        for digits in range(MAX_ROUND_DIGITS + 1):
            yield f"{prefix}round{digits}", round(number, digits) if digits else float(round(number))
        yield f"{prefix}floor", float(math.floor(number))
    yield prefix + "str", str(int(number)) if number.is_integer() else str(number)


def date_variants(date: dt.date | dt.time) -> Iterator[tuple[str, Any]]:
    """Every (transform name, value) a date, datetime or time of day offers: one per spelling in
    :data:`DATE_FORMATS`, :data:`DATETIME_FORMATS` or :data:`TIME_FORMATS` (and a datetime's Unix
    timestamp, read as UTC)."""
    if isinstance(date, dt.datetime):
        for fmt in DATETIME_FORMATS:
            yield "date:" + fmt, date.strftime(fmt)
        yield "date:" + EPOCH, int(date.replace(tzinfo=dt.UTC).timestamp())
    formats = TIME_FORMATS if isinstance(date, dt.time) else DATE_FORMATS
    for fmt in formats:
        yield "date:" + fmt, date.strftime(fmt)


def _spell(date: dt.date | dt.time, fmt: str) -> Any:
    """``date`` in the spelling ``fmt`` (a strftime format or :data:`EPOCH`); None when the format needs
    what the value lacks (a time of a plain date, a date of a time of day)."""
    if fmt == EPOCH:
        return int(date.replace(tzinfo=dt.UTC).timestamp()) if isinstance(date, dt.datetime) else None
    directives = set(fmt[i + 1] for i in range(len(fmt) - 1) if fmt[i] == "%")
    if isinstance(date, dt.time):
        return None if directives & _DATE_DIRECTIVES else date.strftime(fmt)
    if not isinstance(date, dt.datetime) and directives & _TIME_DIRECTIVES:
        return None
    return date.strftime(fmt)


def finite_float(value: int | float) -> float | None:
    """``value`` as a finite float; None for what no finite float holds (inf, nan, an int past 1.8e308)."""
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def json_variants(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (transform name, value) a JSON value found in an output or argument offers (a number no
    finite float holds offers only itself)."""
    if isinstance(value, bool) or value is None:
        yield "id", value
    elif isinstance(value, int | float):
        number = finite_float(value)
        if number is None:
            yield "id", value
        else:
            yield from number_variants(number)
    elif isinstance(value, str):
        yield from string_variants(value)
    else:
        yield "id", value


def apply_transform(name: str, value: Any, date: dt.date | dt.time | None = None) -> Any:
    """Recompute transform ``name`` on ``value``; None when it does not apply."""
    if name.startswith("date:"):
        return None if date is None else _spell(date, name[5:])
    if isinstance(value, bool) or value is None or isinstance(value, list | dict):
        return value if name == "id" else None
    if isinstance(value, int | float):
        number = finite_float(value)
        if number is None:
            return value if name == "id" else None
        return dict(number_variants(number)).get(name)
    if not isinstance(value, str):
        return None
    if name.startswith("num."):
        number = parse_number(value)
        return None if number is None else dict(number_variants(number, prefix="num.")).get(name)
    if "." in name and name.split(".", 1)[0] in _PARTS:
        part, case = name.split(".", 1)
        piece = _part(value, part)
        return None if piece is None else _case(piece, case)
    return dict(string_variants(value)).get(name)
