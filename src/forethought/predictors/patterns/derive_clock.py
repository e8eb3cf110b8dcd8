"""Times of day as people write them, with am and pm read from the words around them.

"9 AM" is ``09:00`` and "14:30" is ``14:30``, but "at 2:30" in "in the afternoon, at 2:30" is ``14:30``,
"from 2 to 4 pm" starts at ``14:00``, "30 minutes before the 8 am meeting" is ``07:30`` and "at 2:30 pm for
45 minutes" ends at ``15:15``. :func:`clock_spans` finds every time of day a text states, each with the
span of its words, in the order the text states them.

Conventions (held by the generated suite of :mod:`forethought.bench.date_suite`): a time with am or pm, a
24-hour time (an hour from 13, or written with a leading zero: ``08:15``), noon and midnight are as written.
Any other clock time ("at 8", "2:30", the "2" of "from 2 to 4 pm") takes its half from the nearest word of
the day within reach ("morning": am; "afternoon", "evening", "tonight", "at night": pm), else the reading
nearer to the nearest time stated with its half within reach and in the same clause (the "2" of "from 2 to 4
pm" is 14:00, the "8" of "between 8 and 11 am" is 08:00), else is read as written. A duration after a time
("for 45 minutes", "lasting an hour and a half") gives the time it ends; "N minutes before / after" a time
stated just after gives that time moved, placed where its words are. Plain English only; nothing here knows
a tool.
"""

from __future__ import annotations

import datetime as dt
import re

from forethought.predictors.patterns.derive_dates import COUNTS, NEAR

Placed = tuple[int, int, int, dt.time]
"""A time with its place in the order of the text, the span of the words stating it, and the time."""

_CLOCK_12 = re.compile(r"\b(\d{1,2})(?::([0-5]\d))?\s*([ap])\.?\s?m\b\.?", re.I)
_CLOCK_24 = re.compile(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?(?![\d:])")
_AT_HOUR = re.compile(r"\b(?:at|around|about|by)\s+(\d{1,2})(?::([0-5]\d))?\b"
                      r"(?!\s*(?:[ap]\.?\s?m\b|%|/|-|\.\d|:\d|people|guests|persons|stars|times|percent))", re.I)
_O_CLOCK = re.compile(r"\b(\d{1,2})\s+o'clock\b", re.I)
_NOON = re.compile(r"\b(noon|midday|midnight)\b", re.I)
_FOLLOWED_BY_TIME = r"(?=\d{1,2}(?::[0-5]\d)?\s*(?:[ap]\.?\s?m\b|o'clock)|\d{1,2}:[0-5]\d)"
_RANGE_START = re.compile(r"\b(?:from|between)\s+(\d{1,2})(?::([0-5]\d))?\s*(?:to|and|until|till|-|–)\s*"
                          + _FOLLOWED_BY_TIME, re.IGNORECASE)
_DASH_START = re.compile(r"(?<![\d:/\-])(\d{1,2})(?::([0-5]\d))?\s*[-–]\s*"
                         r"(?=\d{1,2}(?::[0-5]\d)?\s*[ap]\.?\s?m\b)", re.I)
_DAYPART = re.compile(r"\b(morning|afternoon|evening|tonight|at\s+night)\b", re.I)
"""Words of the day that tell am from pm ("night" alone counts stays: "one night")."""
_DURATION = (r"(half\s+an\s+hour|an?\s+hour\s+and\s+a\s+half|(?:(\d{1,3}(?:\.\d)?)|(" + "|".join(
    sorted(COUNTS, key=len, reverse=True)) + r"))\s+(minutes?|mins?|hours?|hrs?)(\s+and\s+a\s+half)?)")
_FOR = re.compile(r"\b(?:for|lasting|lasts|taking)\s+(?:about\s+)?" + _DURATION, re.I)
_OFFSET = re.compile(_DURATION + r"\s+(before|after|prior\s+to|ahead\s+of)\b", re.I)


def _minutes(match: re.Match[str], first: int) -> int | None:
    """The length in minutes of a duration matched by :data:`_DURATION` whose first group is ``first``."""
    whole = " ".join(match.group(first).lower().split())
    if whole == "half an hour":
        return 30
    if whole.startswith(("an hour and a half", "a hour and a half")):
        return 90
    digits, word, unit, half = (match.group(first + i) for i in range(1, 5))
    amount = float(digits) if digits else COUNTS.get(" ".join((word or "").lower().split()))
    if amount is None:
        return None
    per = 60 if unit.lower().startswith("h") else 1
    return round((amount + (0.5 if half else 0)) * per)


def _moved(time: dt.time, minutes: int) -> dt.time:
    return (dt.datetime.combine(dt.date(2000, 1, 1), time) + dt.timedelta(minutes=minutes)).time()


def _stated(text: str) -> tuple[list[Placed], list[tuple[int, int, int, int]]]:
    """The times whose half is known (am / pm, 24-hour, noon), and the clock times whose half is not:
    (start, end, hour, minute)."""
    known: list[Placed] = []
    open_half: list[tuple[int, int, int, int]] = []

    def free(start: int, end: int) -> bool:
        return not any(s < end and start < e for _, s, e, _ in known) and not any(
            s < end and start < e for s, e, _, _ in open_half)

    for m in _CLOCK_12.finditer(text):
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if 1 <= hour <= 12:
            known.append((m.start(), m.start(), m.end(), dt.time(hour % 12 + (12 if m.group(3).lower() == "p" else 0),
                                                                 minute)))
    for m in _NOON.finditer(text):
        if free(m.start(), m.end()):
            known.append((m.start(), m.start(), m.end(), dt.time(0 if m.group(1).lower() == "midnight" else 12)))
    for m in _CLOCK_24.finditer(text):
        if not free(m.start(), m.end()):
            continue
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if hour == 0 or hour >= 13 or m.group(1).startswith("0"):
            known.append((m.start(), m.start(), m.end(), dt.time(hour, minute, second)))
        else:
            open_half.append((m.start(), m.end(), hour, minute))
    for pattern in (_RANGE_START, _DASH_START, _AT_HOUR, _O_CLOCK):
        for m in pattern.finditer(text):
            hour = int(m.group(1))
            minute = int(m.group(2) or 0) if pattern is not _O_CLOCK else 0
            if 1 <= hour <= 12 and free(m.start(1), m.end(1)):
                open_half.append((m.start(1), m.end(), hour, minute))
    return known, open_half


_CLAUSE_BREAK = re.compile(r"(?<![apAP]\.[mM])[;.!?](?:\s|$)")
"""A clause's end: a semicolon or a sentence's end (not the dot of "p.m.")."""


def _same_clause(text: str, a: int, b: int) -> bool:
    """Whether no clause ends between positions ``a`` and ``b`` (a semicolon, a sentence's end)."""
    return _CLAUSE_BREAK.search(text, min(a, b), max(a, b)) is None


def _resolve(text: str, start: int, hour: int, minute: int, known: list[Placed]) -> dt.time:
    """A clock time whose half is not written: from a word of the day within reach, else the reading nearer
    to the nearest time stated with its half, else as written."""
    morning, evening = dt.time(hour % 12, minute), dt.time(hour % 12 + 12, minute)
    parts = [(abs(m.start() - start), m.group(1).lower()) for m in _DAYPART.finditer(text)
             if abs(m.start() - start) <= NEAR and _same_clause(text, m.start(), start)]
    if parts:
        return morning if min(parts)[1] == "morning" else evening
    near = [k for k in known if abs(k[1] - start) <= NEAR and _same_clause(text, k[1], start)]
    if near:
        _, _, _, anchor = min(near, key=lambda k: abs(k[1] - start))
        at = anchor.hour * 60 + anchor.minute
        return min((morning, evening), key=lambda t: abs(t.hour * 60 + t.minute - at))
    return dt.time(hour, minute)


def clock_spans(text: str) -> list[Placed]:
    """Every time of day ``text`` states (see the module's conventions), in the order it states them: (place
    in that order, start and end of its words, time)."""
    known, open_half = _stated(text)
    found = known + [(s, s, e, _resolve(text, s, h, m, known)) for s, e, h, m in open_half]
    found.sort()
    extra: list[Placed] = []
    for m in _FOR.finditer(text):
        minutes = _minutes(m, 1)
        earlier = [f for f in found if f[2] <= m.start() and m.start() - f[2] <= NEAR]
        if minutes is not None and earlier:
            extra.append((m.start(), m.start(), m.end(), _moved(max(earlier)[3], minutes)))
    for m in _OFFSET.finditer(text):
        minutes = _minutes(m, 1)
        later = [f for f in found if f[1] >= m.end() and f[1] - m.end() <= NEAR]
        if minutes is not None and later:
            sign = 1 if m.group(6).lower() == "after" else -1
            extra.append((m.start(), m.start(), m.end(), _moved(min(later)[3], sign * minutes)))
    return sorted(found + extra)
