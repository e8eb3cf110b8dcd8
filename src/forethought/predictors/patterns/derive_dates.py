"""Calendar dates as people write them in a sentence, resolved against the conversation's *today*.

A date is rarely written the way an argument wants it: "December 10th" needs a year, "December 10th to
15th" states a second date by its day alone, "two days later" and "the third day" count from a date
stated before, "one night on November 14" implies the day after, "next Friday" needs a today.
:func:`date_spans` finds every date a text states, each with the span of the words that state it, in
order of where they are stated; a date implied by words placed before its base (the end of "one night on
November 14") is placed right after that base.

Conventions (held by the generated suite of :mod:`forethought.bench.date_suite`): a date written without
its year is its next occurrence on or after today (with no today, in the year of the reference); a range
end written by its day alone is in the month of its start, or the month after when the day is smaller;
"today", "tonight" and "this morning / afternoon / evening" are today; a weekday alone ("Friday", "this
Friday", "coming Friday", "on Friday") is the first such day after today, "next Friday", "Friday next
week" and "next week on Friday" that weekday of the week (Monday to Sunday) after this one; "N days later /
after that / afterwards" and "N days earlier / before that" count from the nearest date stated before
(today when none); "N nights" from a day end N days later; "the third day" of a stay or trip is two days
after the nearest date stated before it, "the last day" of an "N-day" one is N - 1 days after. Words that
need a today (relative words, weekdays, "in N days") give nothing without one. Plain English only;
nothing here knows a tool.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from forethought.predictors.patterns.derive_index import atoms_by_kind

Span = tuple[int, int, dt.date]
"""Where a date is stated in a text (start, end) and the date."""
Placed = tuple[int, int, int, dt.date]
"""A date with its place in the order of the text (usually its start; for a date implied by words before
its base, the base's end), the span of the words stating it, and the date."""

MONTHS = {name: i + 1 for i, name in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
MONTHS.update({name[:3]: i for name, i in list(MONTHS.items()) if name != "may"})
MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
WEEKDAYS = {name: i for i, name in enumerate(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
_WEEKDAY_RE = "|".join(WEEKDAYS)
COUNTS = {"a": 1, "an": 1, "one": 1, "single": 1, "a single": 1, "two": 2, "three": 3, "four": 4, "five": 5,
          "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
          "fourteen": 14, "fifteen": 15, "twenty": 20, "thirty": 30, "a couple of": 2, "a few": 3}
"""Numbers written as words, as counts of days, weeks or nights."""
_COUNT_RE = r"(\d{1,3}|" + "|".join(sorted(COUNTS, key=len, reverse=True)) + ")"
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
            "ninth": 9, "tenth": 10}
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
NEAR = 40
"""Characters between a date and the words that count from it, at most."""
LEAP_CYCLE = 8
"""Years looked ahead for a date without its year (a February 29th may be eight years away: 2096 to 2104)."""

_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\.?\s+(?:the\s+)?{_ORD}\b(?!\s*,?\s*\d{{4}})(?!:)", re.I)
_DAY_MONTH = re.compile(rf"\b(?:the\s+)?{_ORD}\s+(?:of\s+)?({_MONTH_RE})\b\.?(?!\s*,?\s*\d{{4}})", re.I)
_RANGE_END = re.compile(r"(?:\b(?:to|until|till|through|thru|and)\s+(?:the\s+)?|\s*[-–]\s*)(\d{1,2})(st|nd|rd|th)?\b"
                        r"(?!\s*(?:[:.]\d|%|am\b|pm\b|a\.m|p\.m|o'clock|minutes?|hours?|days?|nights?|weeks?|"
                        r"people|guests|persons|of\b|" + _MONTH_RE + r"))", re.I)
"""The end of a range written by its day alone ("to 15th", "through 12", "-15"): not a time, a count of
things, or a day followed by its own month (a date of its own)."""
_BARE_DAY = re.compile(r"\b(?:from|between)\s+the\s+(\d{1,2})(?:st|nd|rd|th)\b", re.I)
"""A range start written by its day alone, its month stated with the end ("from the 10th to the 15th of
December")."""
_RELATIVE = re.compile(r"\b(day after tomorrow|day before yesterday|today|tonight|tomorrow|yesterday|"
                       r"this (?:morning|afternoon|evening))\b", re.I)
_RELATIVE_SHIFT = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1, "day after tomorrow": 2,
                   "day before yesterday": -2}
_IN_DAYS = re.compile(rf"\bin\s+{_COUNT_RE}\s+(day|week)s?\b", re.I)
_WEEKDAY = re.compile(rf"\b(?:(next\s+week\s+on|next|this\s+coming|this|coming|on)\s+)?({_WEEKDAY_RE})\b"
                      r"(\s+(?:of\s+)?next\s+week)?", re.I)
_NEXT_DAY = re.compile(r"\b(?:the\s+)?(next|following|previous)\s+day\b", re.I)
_LATER = re.compile(rf"\b{_COUNT_RE}\s+(day|week)s?\s+(later|after\s+that|afterwards|earlier|before\s+that|before|"
                    r"after)\b", re.I)
_NIGHTS = re.compile(rf"\b{_COUNT_RE}\s+nights?\b", re.I)
_NTH_DAY = re.compile(r"\b(?:the|its|our|my)\s+(" + "|".join(ORDINALS) + r"|last|final)\s+day\b(?!\s+of\b)", re.I)
_LENGTH = re.compile(rf"\b{_COUNT_RE}[-\s]days?\b", re.I)


def count(word: str) -> int | None:
    """A count written in digits or words ("3", "three", "a couple of"), or None."""
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else COUNTS.get(word)


def make_date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def yearless(month: int, day: int, today: dt.date | None, anchor: dt.date | None) -> dt.date | None:
    """``month`` / ``day`` in the year of ``anchor``, rolled to the next year when before ``today``."""
    if anchor is None:
        return None
    for year in range(anchor.year, anchor.year + LEAP_CYCLE + 1):  # February 29th: the next leap year
        found = make_date(year, month, day)
        if found is not None and (today is None or found >= today):
            return found
    return None


def _month_after(date: dt.date) -> tuple[int, int]:
    return (date.year + 1, 1) if date.month == 12 else (date.year, date.month + 1)


def _overlaps(spans: Iterable[Span], start: int, end: int) -> bool:
    return any(s < end and start < e for s, e, _ in spans)


def _stated(text: str, today: dt.date | None, anchor: dt.date | None) -> list[Span]:
    """The dates written out (with or without a year) and those that need a today."""
    found: list[Span] = []
    for atom in atoms_by_kind(text).get("date", ()):
        if isinstance(atom.date, dt.date):
            found.append((atom.start, atom.start + len(atom.text), atom.date))
    for pattern, month_group, day_group in ((_MONTH_DAY, 1, 2), (_DAY_MONTH, 2, 1)):
        for m in pattern.finditer(text):
            d = yearless(MONTHS[m.group(month_group).lower()], int(m.group(day_group)), today, anchor)
            if d is not None and not _overlaps(found, m.start(), m.end()):
                found.append((m.start(), m.end(), d))
    if today is None:
        return found
    for m in _RELATIVE.finditer(text):
        found.append((m.start(), m.end(), today + dt.timedelta(days=_RELATIVE_SHIFT.get(m.group(1).lower(), 0))))
    for m in _IN_DAYS.finditer(text):
        n = count(m.group(1))
        if n is not None:
            days = n * (7 if m.group(2).lower() == "week" else 1)
            found.append((m.start(), m.end(), today + dt.timedelta(days=days)))
    for m in _WEEKDAY.finditer(text):
        weekday = WEEKDAYS[m.group(2).lower()]
        lead = " ".join((m.group(1) or "").lower().split())
        if lead in ("next", "next week on") or m.group(3):
            monday = today - dt.timedelta(days=today.weekday()) + dt.timedelta(days=7)
            found.append((m.start(), m.end(), monday + dt.timedelta(days=weekday)))
        else:
            found.append((m.start(), m.end(), today + dt.timedelta(days=(weekday - today.weekday()) % 7 or 7)))
    return found


def _before(spans: Iterable[Span], at: int, within: int | None = None) -> Span | None:
    """The date stated last before position ``at`` (ending within ``within`` characters of it)."""
    earlier = [s for s in spans if s[1] <= at and (within is None or at - s[1] <= within)]
    return max(earlier, key=lambda s: (s[1], s[0])) if earlier else None


def _after(spans: Iterable[Span], at: int, within: int) -> Span | None:
    later = [s for s in spans if s[0] >= at and s[0] - at <= within]
    return min(later, key=lambda s: s[0]) if later else None


def _ranges(text: str, found: list[Span], today: dt.date | None) -> list[Span]:
    """Range ends written by their day alone, and range starts whose month the end states."""
    extra: list[Span] = []
    for m in _RANGE_END.finditer(text):
        base = _before(found, m.start(), NEAR)
        if base is None or _overlaps(found, m.start(1), m.end()) or text[base[1]:m.start()].strip():
            continue  # the connector must follow the start of the range ("May 3 to 5", "May 3-5")
        day = int(m.group(1))
        start = base[2]
        end = make_date(start.year, start.month, day)
        if end is None or end <= start:
            end = make_date(*_month_after(start), day)
        if end is not None:
            extra.append((m.start(1), m.end(), end))
    for m in _BARE_DAY.finditer(text):
        following = _after(found, m.end(), NEAR)
        if following is None or _overlaps(found, m.start(1), m.end()):
            continue
        last, day = following[2], int(m.group(1))
        first = make_date(last.year, last.month, day)
        if first is not None and first > last:  # the month before the end's
            first = make_date(last.year - (last.month == 1), 12 if last.month == 1 else last.month - 1, day)
        if first is not None:
            extra.append((m.start(1), m.end(), first))
    return extra


def _counted(text: str, found: list[Span], today: dt.date | None) -> list[Placed]:
    """Dates counted from another: "N days later", "N days before <date>", "the next day", "N nights",
    "the third day"."""
    extra: list[Placed] = []

    def stated_before(at: int) -> Span | None:
        return _before([*found, *((s, e, d) for _, s, e, d in extra)], at)

    for m in _LATER.finditer(text):
        n = count(m.group(1))
        word = " ".join(m.group(3).lower().split())
        if _overlaps(found, m.start(), m.end()):
            continue  # part of a date stated otherwise ("in six days after ...")
        if word in ("before", "after"):
            base = _after(found, m.end(), NEAR)  # "two days before May 3": counted from the date that follows
            if base is None:
                continue
        else:
            base = stated_before(m.start())
        origin = base[2] if base is not None else today
        if n is None or origin is None:
            continue
        days = n * (7 if m.group(2).lower() == "week" else 1)
        backwards = word.startswith(("earlier", "before"))
        extra.append((m.start(), m.start(), m.end(), origin + dt.timedelta(days=-days if backwards else days)))
    for m in _NEXT_DAY.finditer(text):
        base = stated_before(m.start())
        origin = base[2] if base is not None else today
        if origin is not None:
            step = -1 if m.group(1).lower() == "previous" else 1
            extra.append((m.start(), m.start(), m.end(), origin + dt.timedelta(days=step)))
    for m in _NIGHTS.finditer(text):
        n = count(m.group(1))
        base = _after(found, m.end(), NEAR) or _before(found, m.start(), NEAR)
        if n is None or base is None:
            continue
        # The day the stay ends comes after the day it starts, wherever its words are.
        extra.append((max(m.start(), base[1]), m.start(), m.end(), base[2] + dt.timedelta(days=n)))
    for m in _NTH_DAY.finditer(text):
        base = _before(found, m.start())
        if base is None:
            continue
        word = m.group(1).lower()
        if word in ("last", "final"):
            length = _LENGTH.search(text, max(0, base[0] - NEAR), m.start())
            n = count(length.group(1)) if length is not None else None
            if n is None:
                continue
        else:
            n = ORDINALS[word]
        extra.append((m.start(), m.start(), m.end(), base[2] + dt.timedelta(days=n - 1)))
    return extra


def date_spans(text: str, today: dt.date | None, anchor: dt.date | None) -> list[Placed]:
    """Every date ``text`` states (see the module's conventions), in the order it states them: (place in that
    order, start and end of its words, date)."""
    found = _stated(text, today, anchor)
    found.sort(key=lambda s: (s[0], -s[1]))
    found = found + _ranges(text, found, today)
    found.sort(key=lambda s: (s[0], -s[1]))
    placed = [(s, s, e, d) for s, e, d in found] + _counted(text, found, today)
    return sorted(placed, key=lambda p: (p[0], p[1], -p[2]))
