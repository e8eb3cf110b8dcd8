"""Value shapes: what kind of value a parameter takes, learned per parameter (a month is not a place).

A candidate value comes with the evidence of a rule or a constant, and says nothing of whether it is the
*kind* of thing the parameter takes: "December" read from "fly to Paris in December" is a fine string for
``city``, but ``city`` has only ever taken names of places. :func:`shape` puts a value in one of a few
generic classes (a date, a time of day, a month name, a weekday, a number, digits, an e-mail address, a
URL, a path, a code such as ``SFO``, an identifier, a name, a few words, a longer text, a boolean, a list,
an object, empty). :class:`ShapeModel` counts the shapes each parameter took (decayed counters, shrunk
towards the same parameter name on any tool); a candidate that names a time or is a number, for a parameter
that has almost never taken one (:data:`GUARDED_SHAPES`, :data:`RARE_SHARE`; after :data:`MIN_EVIDENCE`
values of the parameter name), gets a factor below 1 on its
score. The other shapes are guarded nowhere: on BFCL every wider use of them (all shapes, coarser classes,
any threshold) moved as many calls wrong as right (docs/patterns.md). The shapes of stored values also let
the argument model drop a date remembered from elsewhere when the message states one. Nothing here knows a
tool or a domain: shapes are plain text classes.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from typing import Any

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_dates import MONTHS, WEEKDAYS
from forethought.predictors.patterns.derive_lookup import date_of
from forethought.predictors.patterns.mentions import is_code

SHAPES = ("date", "datetime", "time", "month", "weekday", "number", "digits", "email", "url", "path", "code", "id",
          "name", "words", "text", "bool", "list", "object", "empty")
DATE_SHAPES = frozenset(("date", "datetime"))
TIME_SHAPES = frozenset(("time",))
SEP = "\x1f"
ANY = "*"
PRIOR_WEIGHT = 2.0
"""How many observations the parameter name's shapes on any tool count for, on a parameter of a tool."""
GUARDED_SHAPES = frozenset(("month", "weekday", "date", "datetime", "time"))
"""The shapes a parameter's candidates are checked for: words that name a time, numbers (what text offers
for any parameter: "fly to Paris in December", "room 12")."""
RARE_SHARE = 0.02
"""A guarded shape the parameter takes at least this often is not penalised."""
MIN_EVIDENCE = 10.0
"""Values the parameter must have taken (decayed) before its shapes count."""

_TIME = re.compile(r"^\s*([01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?:\s*[ap]\.?m\.?)?\s*$"
                   r"|^\s*\d{1,2}\s*[ap]\.?m\.?\s*$", re.I)
_DATE_LIKE = re.compile(r"^\d{4}[-/]\d{1,2}[-/]\d{1,2}$|^\d{1,2}[-/]\d{1,2}[-/]\d{4}$|^\d{8}$|\d{4}$")
"""What a whole date in one of the spellings read has (cheap to test before parsing it)."""
_DATETIME = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_EMAIL = re.compile(r"^[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+$")
_URL = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.I)
_ID = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-.:#]+$")
_NAME = re.compile(r"^[A-Z][\w'’\-.&]*(?:\s+(?:of|the|de|and|&)?\s*[A-Z0-9][\w'’\-.&]*){0,5}$")
MAX_WORDS = 5
MAX_CACHED = 4096


@functools.lru_cache(maxsize=8192)
def _text_shape(text: str) -> str:
    stripped = text.strip()
    if not stripped:
        return "empty"
    lowered = stripped.lower().rstrip(".")
    if lowered in MONTHS:
        return "month"
    if lowered in WEEKDAYS:
        return "weekday"
    if _DATETIME.match(stripped):
        return "datetime"
    if _TIME.match(stripped):
        return "time"
    if stripped.isdigit():
        return "digits"  # (before dates: strptime reads "897362" as the year 8973)
    if len(stripped) <= 24 and _DATE_LIKE.search(stripped) and date_of(stripped) is not None:
        return "date"
    if _EMAIL.match(stripped):
        return "email"
    if _URL.match(stripped):
        return "url"
    if "/" in stripped and " " not in stripped:
        return "path"
    if is_code(stripped):
        return "code"
    if " " not in stripped and _ID.match(stripped):
        return "id"
    words = stripped.split()
    if len(words) <= MAX_WORDS and _NAME.match(stripped):
        return "name"
    return "words" if len(words) <= MAX_WORDS else "text"


def shape(value: Any) -> str:
    """The shape of a value (one of :data:`SHAPES`)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return _text_shape(value)
    if isinstance(value, dt.datetime):
        return "datetime"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "empty" if value is None else "words"


class ShapeModel:
    """Per (tool, parameter): how often each shape was its value; the factor a candidate's shape earns."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self._cached: dict[tuple[str, str], tuple[int, dict[str, float] | None]] = {}
        """(tool, parameter) -> (the counts' version, its shares): a prediction asks many times, unchanged."""

    @staticmethod
    def _keys(tool: str, param: str) -> str:
        return SEP.join(("h", tool, param, ""))

    def learn(self, tool: str, param: str, value: Any) -> None:
        """Count the shape of a value the parameter took (here, and for the parameter name on any tool)."""
        found = shape(value)
        here, anywhere = self._keys(tool, param), self._keys(ANY, param)
        self.counts.add_ones([here, here + found, anywhere, anywhere + found])

    def _shares(self, tool: str, param: str) -> dict[str, float] | None:
        cached = self._cached.get((tool, param))
        if cached is not None and cached[0] == self.counts.version:
            return cached[1]
        if len(self._cached) > MAX_CACHED:
            self._cached.clear()
        shares = self._compute(tool, param)
        self._cached[(tool, param)] = (self.counts.version, shares)
        return shares

    def _compute(self, tool: str, param: str) -> dict[str, float] | None:
        stored, scale = self.counts.stored(), self.counts.scale
        here, anywhere = self._keys(tool, param), self._keys(ANY, param)
        total_here = stored.get(here, 0.0) * scale
        total_any = stored.get(anywhere, 0.0) * scale
        if total_here <= 0 and total_any <= 0:
            return None
        shares = {}
        for name in SHAPES:
            prior = stored.get(anywhere + name, 0.0) * scale / total_any if total_any > 0 else 0.0
            shares[name] = (stored.get(here + name, 0.0) * scale + PRIOR_WEIGHT * prior) / (total_here + PRIOR_WEIGHT)
        return shares

    def factor(self, tool: str, param: str, value: Any) -> float:
        """At most 1: a candidate of a calendar or number shape (a month, a weekday, a date, a time, a number)
        that the parameter has taken under :data:`RARE_SHARE` of the time, over at least
        :data:`MIN_EVIDENCE` values, scores its share over :data:`RARE_SHARE`; any other candidate 1."""
        found = shape(value)
        if found not in GUARDED_SHAPES:
            return 1.0
        shares = self._shares(tool, param)
        if shares is None or self.counts.get(self._keys(ANY, param)) < MIN_EVIDENCE:
            return 1.0  # (the parameter name on any tool: a tool's own values count there too)
        return min(1.0, shares[found] / RARE_SHARE)
