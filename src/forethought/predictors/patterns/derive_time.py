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

from forethought.predictors.patterns.derive_index import atoms_by_kind
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.text import Atom, first_date

WHEN = "when"
"""Atom kind of the times and dates found here."""
MAX_WHEN_CHARS = 4000
"""Texts are scanned up to this length."""
MAX_SCANNED_OUTPUTS = 4

_MONTHS = {name: i + 1 for i, name in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
_MONTHS.update({name[:3]: i for name, i in list(_MONTHS.items()) if name != "may"})
_MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAYS = {name: i for i, name in enumerate(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"

_CLOCK_12 = re.compile(r"\b(\d{1,2})(?::([0-5]\d))?\s*([ap])\.?\s?m\b\.?", re.I)
_CLOCK_24 = re.compile(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?(?![\d:])")
_AT_HOUR = re.compile(r"\bat\s+(\d{1,2})(?::([0-5]\d))?\b(?!\s*(?:[ap]\.?\s?m\b|%|/|-|\.\d|:\d))", re.I)
_NOON = re.compile(r"\b(noon|midday|midnight)\b", re.I)
_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\.?\s+(?:the\s+)?{_ORD}\b(?!\s*,?\s*\d{{4}})(?!:)", re.I)
_DAY_MONTH = re.compile(rf"\b(?:the\s+)?{_ORD}\s+(?:of\s+)?({_MONTH_RE})\b\.?(?!\s*,?\s*\d{{4}})", re.I)
_LATER_DAY = re.compile(r"\b(?:to|until|till|through|and|-)\s+(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)\b", re.I)
_RELATIVE = re.compile(r"\b(day after tomorrow|day before yesterday|today|tonight|tomorrow|yesterday)\b", re.I)
_IN_DAYS = re.compile(r"\bin\s+(\d{1,2}|a|one|two|three|four|five|six|seven)\s+(day|week)s?\b", re.I)
_WEEKDAY = re.compile(r"\b(?:(next|this|coming|on)\s+)?(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
                      re.I)
_NEXT_DAY = re.compile(r"\b(?:the\s+)?(next|following|previous)\s+day\b", re.I)
_SMALL = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
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


def _date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _resolve_yearless(month: int, day: int, reference: Reference) -> dt.date | None:
    anchor = reference.anchor
    if anchor is None:
        return None
    found = _date(anchor.year, month, day)
    if found is not None and reference.today is not None and found < reference.today:
        found = _date(anchor.year + 1, month, day)
    return found


def _hour(hour: int, minute: int, half: str | None) -> dt.time | None:
    if half is not None:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half.lower() == "p" else 0)
    return dt.time(hour, minute) if 0 <= hour < 24 and 0 <= minute < 60 else None


def _times(text: str) -> list[tuple[int, int, dt.time]]:
    found: dict[int, tuple[int, int, dt.time]] = {}
    for m in _CLOCK_12.finditer(text):
        t = _hour(int(m.group(1)), int(m.group(2) or 0), m.group(3))
        if t is not None:
            found[m.start()] = (m.start(), m.end(), t)
    for m in _CLOCK_24.finditer(text):
        if m.start() not in found and not any(s <= m.start() < e for s, e, _ in found.values()):
            found[m.start()] = (m.start(), m.end(), dt.time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)))
    for m in _AT_HOUR.finditer(text):
        start = m.start(1)
        if not any(s <= start < e for s, e, _ in found.values()):
            t = _hour(int(m.group(1)), int(m.group(2) or 0), None)
            if t is not None:
                found[start] = (start, m.end(), t)
    for m in _NOON.finditer(text):
        found[m.start()] = (m.start(), m.end(), dt.time(0 if m.group(1).lower() == "midnight" else 12))
    return sorted(found.values(), key=lambda x: x[0])


def _dates(text: str, reference: Reference) -> list[tuple[int, int, dt.date]]:
    found: list[tuple[int, int, dt.date]] = []
    for m in _MONTH_DAY.finditer(text):
        d = _resolve_yearless(_MONTHS[m.group(1).lower()], int(m.group(2)), reference)
        if d is not None:
            found.append((m.start(), m.end(), d))
    for m in _DAY_MONTH.finditer(text):
        d = _resolve_yearless(_MONTHS[m.group(2).lower()], int(m.group(1)), reference)
        if d is not None and not any(s <= m.start() < e or m.start() <= s < m.end() for s, e, _ in found):
            found.append((m.start(), m.end(), d))
    for atom in atoms_by_kind(text).get("date", ()):
        if isinstance(atom.date, dt.date):
            found.append((atom.start, atom.start + len(atom.text), atom.date))
    today = reference.today
    if today is not None:
        for m in _RELATIVE.finditer(text):
            word = m.group(1).lower()
            shift = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1, "day after tomorrow": 2,
                     "day before yesterday": -2}[word]
            found.append((m.start(), m.end(), today + dt.timedelta(days=shift)))
        for m in _IN_DAYS.finditer(text):
            count = int(m.group(1)) if m.group(1).isdigit() else _SMALL[m.group(1).lower()]
            found.append((m.start(), m.end(), today + dt.timedelta(days=count * (7 if m.group(2).lower() == "week"
                                                                                 else 1))))
        for m in _WEEKDAY.finditer(text):
            ahead = (_WEEKDAYS[m.group(2).lower()] - today.weekday()) % 7 or 7
            found.append((m.start(), m.end(), today + dt.timedelta(days=ahead)))
    found.sort(key=lambda x: x[0])
    extra: list[tuple[int, int, dt.date]] = []
    for m in _LATER_DAY.finditer(text):
        earlier = [d for s, e, d in found if e <= m.start() and m.start() - e < 40]
        if earlier:
            d = _date(earlier[-1].year, earlier[-1].month, int(m.group(1)))
            if d is not None:
                extra.append((m.start(1), m.end(), d))
    for m in _NEXT_DAY.finditer(text):
        earlier = [d for s, e, d in found if e <= m.start()]
        base = earlier[-1] if earlier else today
        if base is not None:
            step = -1 if m.group(1).lower() == "previous" else 1
            extra.append((m.start(), m.end(), base + dt.timedelta(days=step)))
    return sorted(found + extra, key=lambda x: x[0])


@functools.lru_cache(maxsize=512)
def when_atoms(text: str, reference: Reference) -> tuple[Atom, ...]:
    """The times and dates of ``text`` (resolved against ``reference``), in order; a date followed by a
    time (``tomorrow at 8``) is also given as one datetime."""
    text = text[:MAX_WHEN_CHARS]
    times = _times(text)
    dates = _dates(text, reference)
    atoms: dict[tuple[int, str], Atom] = {}
    spans: list[tuple[int, int, When]] = [*dates, *times]
    for start, end, when in spans:
        atoms.setdefault((start, type(when).__name__), Atom(text[start:end], WHEN, start, date=when))
    for d_start, d_end, day in dates:
        for t_start, t_end, clock in times:
            if t_start >= d_end and _JOIN.match(text[d_end:t_start]):
                moment = dt.datetime.combine(day, clock)
                atoms.setdefault((d_start, "datetime"), Atom(text[d_start:t_end], WHEN, d_start, date=moment))
                break
    return tuple(sorted(atoms.values(), key=lambda a: (a.start, len(a.text))))
