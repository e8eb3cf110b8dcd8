"""Times and dates as people write them, resolved against the conversation's own "now".

Users rarely write the date an argument needs: "9 AM" is ``09:00``, "November 5th" needs a year,
"tomorrow at 8" needs a today, "from the 5th to the 10th" needs a month. :func:`when_atoms` finds such
expressions in a text and gives each as an :class:`~forethought.predictors.patterns.text.Atom` of kind
:data:`WHEN` whose ``date`` is a :class:`datetime.date`, :class:`datetime.datetime` or
:class:`datetime.time`; the spelling an argument wants (ISO date, ``HH:MM``, a timestamp...) is a
transform learned per parameter like any other (:func:`~forethought.predictors.patterns.derive_values.date_variants`).

The reference is found in the context (:func:`reference_now`): a date stated in the system or developer
messages or in the request's metadata is *today* (relative words such as "tomorrow" or "Friday" are
resolved against it only); otherwise the first full date of the user's messages or of a recent output
gives the year of dates written without one. Plain English words only; nothing here knows a tool.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from forethought.predictors.patterns.derive_clock import clock_spans
from forethought.predictors.patterns.derive_dates import date_spans
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.text import Atom, first_date

WHEN = "when"
"""Atom kind of the times and dates found here."""
MAX_WHEN_CHARS = 4000
"""Texts are scanned up to this length."""
MAX_SCANNED_OUTPUTS = 4

_JOIN = re.compile(r"^\s*(?:,|at|@|t|,\s*at|on|by|from)?\s*$", re.I)
"""What may stand between a date and a time that belong together ("tomorrow at 8")."""

When = dt.date | dt.time
"""A date, a datetime (a date), or a time of day."""


@dataclass(frozen=True, slots=True)
class Reference:
    """What dates are resolved against: ``today`` when the context states one, else a date whose year
    stands for dates written without one."""

    today: dt.date | None = None
    year_of: dt.date | None = None

    @property
    def anchor(self) -> dt.date | None:
        return self.today or self.year_of


def _first_date(text: str) -> dt.date | None:
    return first_date(text[:MAX_WHEN_CHARS] if len(text) > MAX_WHEN_CHARS else text)


def first_output_date(output: str) -> dt.date | None:
    """The first full date of an output (remembered with its index: every later step of its session reads
    it)."""
    facts = output_index(output).facts
    if "first_date" not in facts:
        facts["first_date"] = _first_date(output)
    found: dt.date | None = facts["first_date"]
    return found


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def reference_now(system: str, metadata: Mapping[str, Any], user_texts: Iterable[str],
                  outputs: Iterable[str]) -> Reference:
    """The reference of a context: today from the system text or the metadata, else the year of the
    first full date of the user's messages, else of the latest outputs (newest first)."""
    today = _first_date(system) if system else None
    if today is None:
        for text in _strings(metadata):
            today = _first_date(text)
            if today is not None:
                break
    if today is not None:
        return Reference(today, today)
    for text in user_texts:
        found = _first_date(text)
        if found is not None:
            return Reference(None, found)
    for n, text in enumerate(outputs):
        if n >= MAX_SCANNED_OUTPUTS:
            break
        found = first_output_date(text)
        if found is not None:
            return Reference(None, found)
    return Reference()


@functools.lru_cache(maxsize=512)
def when_atoms(text: str, reference: Reference) -> tuple[Atom, ...]:
    """The times and dates of ``text`` (resolved against ``reference``), in the order it states them
    (:mod:`derive_dates`, :mod:`derive_clock`); a date followed by a time (``tomorrow at 8``) is also given
    as one datetime."""
    text = text[:MAX_WHEN_CHARS]
    dates = date_spans(text, reference.today, reference.anchor)
    times = clock_spans(text)
    atoms: dict[tuple[int, str], Atom] = {}
    spans: list[tuple[int, int, int, When]] = [*dates, *times]
    for order, start, end, when in spans:
        atoms.setdefault((order, type(when).__name__), Atom(text[start:end], WHEN, order, date=when))
    for _, d_start, d_end, day in dates:
        for _, t_start, t_end, clock in times:
            if t_start >= d_end and _JOIN.match(text[d_end:t_start]):
                moment = dt.datetime.combine(day, clock)
                atoms.setdefault((d_start, "datetime"), Atom(text[d_start:t_end], WHEN, d_start, date=moment))
                break
    return tuple(sorted(atoms.values(), key=lambda a: (a.start, len(a.text))))
