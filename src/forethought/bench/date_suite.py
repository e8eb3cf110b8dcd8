"""A generated suite of dates and times as people write them, with the values they stand for.

Each :class:`DateCase` is a sentence that states dates and times the way users do ("from December 10th to
15th", "one night on November 14", "two days later", "30 minutes before the 8 am meeting", "at 2:30 in
the afternoon", "next Tuesday") and a reference date (*today*) stated as a conversation would state it,
with the dates and the times of day the sentence stands for, in the order it states them. Nothing comes
from any data set: every case is drawn from templates by a seeded generator, and the expected values are
computed by the generator itself (calendar arithmetic), never by the code under test.

The conventions the expected values follow (and :mod:`~forethought.predictors.patterns.derive_time` is held
to): a date written without its year is its next occurrence on or after today; a weekday alone ("Friday",
"this Friday", "on Friday", "coming Friday") is the first such day after today; "next Friday" and "Friday
next week" are that weekday of the week (Monday to Sunday) after this one; "N nights" from a day end N days
later; "the third day" of a stay or trip is two days after its first; a bare clock time takes am or pm from
the words around it ("in the afternoon", "tonight", a "pm" of the same range), else is read as written;
"tonight" and "this afternoon" also state today. A derived time ("30 minutes before" a stated time, a
meeting's end "for 45 minutes") is stated where its words are.

:func:`date_suite` gives the cases; :func:`answer` is what the predictor's date derivation reads in a
case (its dates and times, in order); :func:`score_suite` compares the two. The same phrasings feed the
scale benchmark's generated sessions (:mod:`forethought.bench.scale_sessions`), whose arguments are the
expected values.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.predictors.patterns.derive_time import reference_now, when_atoms

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ORDINAL_WORDS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass(frozen=True, slots=True)
class Phrase:
    """A piece of a sentence with the dates and times it states, in order."""

    text: str
    dates: tuple[dt.date, ...] = ()
    times: tuple[dt.time, ...] = ()


@dataclass(frozen=True, slots=True)
class DateCase:
    """One sentence of the suite: the system text stating today, the user's sentence, what it means."""

    family: str
    system: str
    text: str
    today: dt.date
    dates: tuple[dt.date, ...]
    times: tuple[dt.time, ...]


def suffix(day: int) -> str:
    """The English ordinal suffix of a day of the month (1st, 2nd, 3rd, 11th, 22nd)."""
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _day_text(rng: random.Random, day: dt.date, with_month: bool = True) -> str:
    """A year-less date in one of the ways people write one."""
    month, short = MONTHS[day.month - 1], MONTHS[day.month - 1][:3]
    n, sfx = day.day, suffix(day.day)
    if not with_month:
        return rng.choice((f"the {n}{sfx}", f"{n}{sfx}"))
    return rng.choice((f"{month} {n}{sfx}", f"{month} {n}", f"{short} {n}", f"the {n}{sfx} of {month}",
                       f"{n} {month}", f"{month} the {n}{sfx}", f"{short}. {n}{sfx}", f"{n}{sfx} {short}",
                       f"{month.lower()} {n}"))


def _future(rng: random.Random, today: dt.date, low: int = 2, high: int = 200) -> dt.date:
    return today + dt.timedelta(days=rng.randint(low, high))


def _clock(rng: random.Random, t: dt.time, half_known: bool = True) -> str:
    """A time of day in 12-hour writing (``half_known``: with its am/pm)."""
    hour = t.hour % 12 or 12
    minute = f":{t.minute:02d}" if t.minute or rng.random() < 0.2 else ""
    if not half_known:
        return f"{hour}{minute}" if minute else f"{hour}"
    half = "am" if t.hour < 12 else "pm"
    return rng.choice((f"{hour}{minute} {half}", f"{hour}{minute}{half}", f"{hour}{minute} {half.upper()}",
                       f"{hour}{minute} {half[0]}.m."))


def _time(rng: random.Random, hours: tuple[int, int] = (7, 21), quarter: bool = True) -> dt.time:
    minute = rng.choice((0, 15, 30, 45)) if quarter else rng.choice((0, 0, 30))
    return dt.time(rng.randint(*hours), minute)


def _plus(t: dt.time, minutes: int) -> dt.time:
    moment = dt.datetime.combine(dt.date(2000, 1, 1), t) + dt.timedelta(minutes=minutes)
    return moment.time()


# --- families: each returns a phrase (text, dates, times) for a given today --------------------------------


def absolute(rng: random.Random, today: dt.date) -> Phrase:
    day = _future(rng, today)
    return Phrase(rng.choice(("on ", "for ", "")) + _day_text(rng, day), (day,))


def absolute_year(rng: random.Random, today: dt.date) -> Phrase:
    day = _future(rng, today, 2, 500)
    month = MONTHS[day.month - 1]
    text = rng.choice((f"{month} {day.day}, {day.year}", f"{day.isoformat()}", f"{month} {day.day}{suffix(day.day)}, "
                       f"{day.year}", f"{day.month:02d}/{day.day:02d}/{day.year}", f"{day.day} {month} {day.year}"))
    return Phrase("on " + text, (day,))


def date_range(rng: random.Random, today: dt.date) -> Phrase:
    start = _future(rng, today)
    end = start + dt.timedelta(days=rng.randint(1, 9))
    month = MONTHS[start.month - 1]
    if end.month != start.month:
        text = rng.choice((f"from {_day_text(rng, start)} to {_day_text(rng, end)}",
                           f"{_day_text(rng, start)} through {_day_text(rng, end)}",
                           f"between {_day_text(rng, start)} and {_day_text(rng, end)}"))
        return Phrase(text, (start, end))
    a, b = start.day, end.day
    text = rng.choice((f"from {month} {a}{suffix(a)} to {b}{suffix(b)}", f"{month} {a}{suffix(a)} to {b}{suffix(b)}",
                       f"{month} {a}-{b}", f"from {month} {a} to {month} {b}",
                       f"from the {a}{suffix(a)} to the {b}{suffix(b)} of {month}",
                       f"between {month} {a} and {b}", f"{month} {a}{suffix(a)} until the {b}{suffix(b)}",
                       f"{month} {a} through {b}"))
    return Phrase(text, (start, end))


def relative(rng: random.Random, today: dt.date) -> Phrase:
    choice = rng.randrange(5)
    if choice == 0:
        return Phrase("tomorrow", (today + dt.timedelta(days=1),))
    if choice == 1:
        return Phrase("the day after tomorrow", (today + dt.timedelta(days=2),))
    if choice == 2:
        n = rng.randint(2, 10)
        word = NUMBER_WORDS[n] if rng.random() < 0.5 else str(n)
        return Phrase(f"in {word} days", (today + dt.timedelta(days=n),))
    if choice == 3:
        n = rng.randint(1, 3)
        word = ("a", "one", "two", "three")[n if n > 1 else rng.randint(0, 1)]
        return Phrase(f"in {word} week{'s' if n > 1 else ''}", (today + dt.timedelta(days=7 * n),))
    return Phrase(rng.choice(("today", "later today")), (today,))


def later(rng: random.Random, today: dt.date) -> Phrase:
    first = _future(rng, today)
    n = rng.randint(1, 9)
    word = NUMBER_WORDS[n] if rng.random() < 0.6 else str(n)
    if rng.random() < 0.25:
        n, word = 7, rng.choice(("a week", "one week"))
    if rng.random() < 0.3:
        second = first - dt.timedelta(days=n)
        if second <= today:
            second = first + dt.timedelta(days=n)
            tail = f"{word} day{'s' if n > 1 else ''} after that" if "week" not in word else f"{word} after that"
        else:
            tail = f"{word} day{'s' if n > 1 else ''} earlier" if "week" not in word else f"{word} earlier"
    else:
        second = first + dt.timedelta(days=n)
        tail = rng.choice((f"{word} day{'s' if n > 1 else ''} later", f"{word} day{'s' if n > 1 else ''} after that")
                          ) if "week" not in word else rng.choice((f"{word} later", f"{word} after that"))
    lead = rng.choice(("leave on {d} and come back {t}", "start on {d}, then follow up {t}",
                       "the first visit on {d} and the second {t}", "check on {d} and again {t}"))
    return Phrase(lead.format(d=_day_text(rng, first), t=tail), (first, second))


def nights(rng: random.Random, today: dt.date) -> Phrase:
    start = _future(rng, today)
    n = rng.randint(1, 6)
    word = NUMBER_WORDS[n] if rng.random() < 0.6 else str(n)
    end = start + dt.timedelta(days=n)
    if n == 1 and rng.random() < 0.5:
        text = rng.choice((f"one night on {_day_text(rng, start)}", f"a single night on {_day_text(rng, start)}",
                           f"for one night, {_day_text(rng, start)}"))
    else:
        text = rng.choice((f"{word} night{'s' if n > 1 else ''} starting {_day_text(rng, start)}",
                           f"for {word} night{'s' if n > 1 else ''} from {_day_text(rng, start)}",
                           f"checking in {_day_text(rng, start)} for {word} night{'s' if n > 1 else ''}",
                           f"{word} night{'s' if n > 1 else ''} beginning {_day_text(rng, start)}"))
    return Phrase(text, (start, end))


def trip_day(rng: random.Random, today: dt.date) -> Phrase:
    start = _future(rng, today)
    length = rng.randint(3, 7)
    k = rng.randint(2, length)
    ordinal = ORDINAL_WORDS[k - 1] if k < length or rng.random() < 0.5 else "last"
    kth = start + dt.timedelta(days=k - 1 if ordinal != "last" else length - 1)
    text = rng.choice((f"a {length}-day trip starting {_day_text(rng, start)}, with the tour on the {ordinal} day",
                       f"the conference runs {length} days from {_day_text(rng, start)}; book the dinner for the "
                       f"{ordinal} day",
                       f"arriving {_day_text(rng, start)} for {length} days, the meeting is on the {ordinal} day"))
    return Phrase(text, (start, kth))


def _next_weekday(today: dt.date, weekday: int) -> dt.date:
    return today + dt.timedelta(days=(weekday - today.weekday()) % 7 or 7)


def _weekday_next_week(today: dt.date, weekday: int) -> dt.date:
    monday = today - dt.timedelta(days=today.weekday()) + dt.timedelta(days=7)
    return monday + dt.timedelta(days=weekday)


def weekday(rng: random.Random, today: dt.date) -> Phrase:
    day = rng.randrange(7)
    name = WEEKDAYS[day] if rng.random() < 0.8 else WEEKDAYS[day].lower()
    if rng.random() < 0.5:
        return Phrase(rng.choice((f"on {name}", f"this {name}", f"{name}", f"this coming {name}", f"coming {name}")),
                      (_next_weekday(today, day),))
    return Phrase(rng.choice((f"next {name}", f"{name} next week", f"next week on {name}")),
                  (_weekday_next_week(today, day),))


def clock(rng: random.Random, today: dt.date) -> Phrase:
    choice = rng.randrange(6)
    if choice == 0:
        return Phrase(rng.choice(("at noon", "at midday")), times=(dt.time(12, 0),))
    if choice == 1:
        t = _time(rng, (0, 23))
        return Phrase(f"at {t.hour:02d}:{t.minute:02d}", times=(t,))
    t = _time(rng, (1, 22))
    return Phrase(f"at {_clock(rng, t)}", times=(t,))


def clock_context(rng: random.Random, today: dt.date, same_day: bool = True) -> Phrase:
    """A bare clock time whose am / pm the surrounding words give ("tonight" and "this afternoon" also
    state today; not offered when ``same_day`` is false)."""
    choice = rng.randrange(4)
    if choice == 0:
        t = _time(rng, (13, 17))
        bare = _clock(rng, t, False)
        if same_day and rng.random() < 0.4:
            return Phrase(f"this afternoon at {bare}", (today,), (t,))
        return Phrase(rng.choice((f"at {bare} in the afternoon", f"in the afternoon at {bare}")), times=(t,))
    if choice == 1:
        t = _time(rng, (18, 22))
        bare = _clock(rng, t, False)
        if same_day and rng.random() < 0.5:
            return Phrase(rng.choice((f"tonight at {bare}", f"at {bare} tonight", f"this evening at {bare}")),
                          (today,), (t,))
        return Phrase(rng.choice((f"at {bare} in the evening", f"in the evening at {bare}")), times=(t,))
    if choice == 2:
        t = _time(rng, (6, 11))
        bare = _clock(rng, t, False)
        if same_day and rng.random() < 0.3:
            return Phrase(f"at {bare} this morning", (today,), (t,))
        return Phrase(rng.choice((f"at {bare} in the morning", f"in the morning at {bare}")), times=(t,))
    lunch = dt.time(rng.choice((12, 13)), rng.choice((0, 30)))
    t = _time(rng, (lunch.hour + 1, 17))
    return Phrase(f"after my {_clock(rng, lunch)} lunch, at {_clock(rng, t, False)}", times=(lunch, t))


def before_after(rng: random.Random, today: dt.date) -> Phrase:
    """A time stated relative to another: "30 minutes before the 8 am meeting"."""
    stated = _time(rng, (8, 20))
    minutes = rng.choice((10, 15, 20, 30, 45, 60, 90, 120))
    spoken = {60: rng.choice(("an hour", "one hour", "60 minutes")), 90: rng.choice(("an hour and a half",
              "90 minutes")), 120: rng.choice(("two hours", "2 hours"))}.get(minutes, f"{minutes} minutes")
    after = rng.random() < 0.35
    derived = _plus(stated, minutes if after else -minutes)
    event = rng.choice(("meeting", "call", "flight", "appointment", "talk", "game"))
    text = rng.choice((f"{spoken} {'after' if after else 'before'} the {_clock(rng, stated)} {event}",
                       f"{spoken} {'after' if after else 'before'} my {event} at {_clock(rng, stated)}"))
    return Phrase(text, times=(derived, stated))


def time_range(rng: random.Random, today: dt.date) -> Phrase:
    start = _time(rng, (8, 17), quarter=False)
    end = _plus(start, rng.choice((60, 90, 120, 180)))
    if end <= start:
        end = dt.time(23, 0)
    if (start.hour < 12) == (end.hour < 12):
        text = rng.choice((f"from {_clock(rng, start, False)} to {_clock(rng, end)}",
                           f"between {_clock(rng, start, False)} and {_clock(rng, end)}",
                           f"{_clock(rng, start, False)}-{_clock(rng, end)}"))
    else:
        text = rng.choice((f"from {_clock(rng, start)} to {_clock(rng, end)}",
                           f"between {_clock(rng, start)} and {_clock(rng, end)}"))
    return Phrase(text, times=(start, end))


def duration(rng: random.Random, today: dt.date) -> Phrase:
    start = _time(rng, (8, 18))
    minutes = rng.choice((15, 30, 45, 60, 90, 120))
    spoken = {60: rng.choice(("an hour", "one hour")), 90: "an hour and a half", 120: "two hours"}.get(
        minutes, f"{minutes} minutes")
    text = rng.choice((f"at {_clock(rng, start)} for {spoken}", f"starting at {_clock(rng, start)}, lasting {spoken}"))
    return Phrase(text, times=(start, _plus(start, minutes)))


def day_and_time(rng: random.Random, today: dt.date) -> Phrase:
    day_phrase = rng.choice((relative, weekday, absolute))(rng, today)
    time_phrase = clock(rng, today) if rng.random() < 0.5 else clock_context(rng, today, same_day=False)
    return Phrase(f"{day_phrase.text} {time_phrase.text}", day_phrase.dates, time_phrase.times)


def distractor(rng: random.Random, today: dt.date) -> Phrase:
    """Numbers that are neither dates nor times, around one that is (or none)."""
    party, room, stars = rng.randint(2, 9), rng.randint(100, 999), rng.randint(1, 5)
    noise = rng.choice((f"for {party} people", f"in room {room}", f"with {stars} stars", f"version {party}.{room % 10}",
                        f"{party} to {party + rng.randint(1, 5)} guests", f"order #{room}", f"{room}-{party}",
                        f"at {party}% off", f"about {party * 10} dollars", f"floor {party}"))
    if rng.random() < 0.3:
        return Phrase(noise)
    real = rng.choice((absolute, clock, weekday, relative))(rng, today)
    return Phrase(f"{noise}, {real.text}" if rng.random() < 0.5 else f"{real.text}, {noise}", real.dates, real.times)


def mixed(rng: random.Random, today: dt.date) -> Phrase:
    """Several expressions in one sentence: a stay, an arrival time, a reminder before it."""
    stay = rng.choice((nights, date_range))(rng, today)
    arrival = clock(rng, today)
    reminder = before_after(rng, today)
    return Phrase(f"{stay.text}, arriving {arrival.text}; remind me {reminder.text}", stay.dates,
                  (*arrival.times, *reminder.times))


FAMILIES: dict[str, Callable[[random.Random, dt.date], Phrase]] = {
    "absolute": absolute, "absolute_year": absolute_year, "range": date_range, "relative": relative,
    "later": later, "nights": nights, "trip_day": trip_day, "weekday": weekday, "clock": clock,
    "clock_context": clock_context, "before_after": before_after, "time_range": time_range,
    "duration": duration, "day_and_time": day_and_time, "distractor": distractor, "mixed": mixed,
}
"""Family name -> its phrase generator."""

_LEADS = ("Please book it {p}.", "Can you set this up {p}?", "I need it {p}.", "Schedule everything {p}, thanks.",
          "Let's plan {p}.", "Put it down {p}.", "We want to go {p}.", "Arrange it {p} if you can.")


def today_text(rng: random.Random, today: dt.date) -> str:
    """How a system prompt states today's date."""
    name, month = WEEKDAYS[today.weekday()], MONTHS[today.month - 1]
    return rng.choice((f"Today is {name}, {month} {today.day}, {today.year}.", f"Current date: {today.isoformat()}.",
                       f"The date today is {month} {today.day}, {today.year}.",
                       f"Today's date is {today.isoformat()} ({name})."))


def random_today(rng: random.Random) -> dt.date:
    return dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(3 * 365))


def date_suite(count: int = 700, seed: int = 11) -> list[DateCase]:
    """``count`` cases, the families in turn, each drawn afresh (deterministic in ``seed``)."""
    rng = random.Random(seed)
    names = list(FAMILIES)
    cases = []
    for n in range(count):
        family = names[n % len(names)]
        today = random_today(rng)
        phrase = FAMILIES[family](rng, today)
        text = rng.choice(_LEADS).format(p=phrase.text)
        cases.append(DateCase(family, "You are a helpful assistant. " + today_text(rng, today), text, today,
                              phrase.dates, phrase.times))
    return cases


def answer(case: DateCase) -> tuple[tuple[dt.date, ...], tuple[dt.time, ...]]:
    """The dates and the times of day the predictor's date derivation reads in the case's sentence, in order
    (the datetimes it also gives, a date joined to its time, are not counted)."""
    reference = reference_now(case.system, {}, [case.text], ())
    atoms = when_atoms(case.text, reference)
    dates = tuple(a.date for a in atoms if type(a.date) is dt.date)
    times = tuple(a.date for a in atoms if isinstance(a.date, dt.time))
    return dates, times


def score_suite(cases: Sequence[DateCase]) -> dict[str, Any]:
    """The share of cases answered exactly (every date and time, in order, nothing more), overall and by
    family, and the first few misses of each family."""
    by_family: dict[str, list[int]] = {}
    misses: dict[str, list[dict[str, str]]] = {}
    for case in cases:
        dates, times = answer(case)
        exact = dates == case.dates and times == case.times
        tally = by_family.setdefault(case.family, [0, 0])
        tally[0] += int(exact)
        tally[1] += 1
        if not exact and len(misses.setdefault(case.family, [])) < 3:
            misses[case.family].append({"text": case.text, "today": case.today.isoformat(),
                                        "expected": _render(case.dates, case.times), "got": _render(dates, times)})
    total = sum(t[1] for t in by_family.values())
    right = sum(t[0] for t in by_family.values())
    return {"cases": total, "exact": right / max(1, total),
            "by_family": {f: {"cases": t[1], "exact": t[0] / t[1]} for f, t in sorted(by_family.items())},
            "misses": {f: m for f, m in sorted(misses.items()) if m}}


def _render(dates: Sequence[dt.date], times: Sequence[dt.time]) -> str:
    return " ".join([d.isoformat() for d in dates] + [t.strftime("%H:%M") for t in times])
