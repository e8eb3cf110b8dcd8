"""Dates and times as people write them: ranges, offsets, nights, the n-th day, weekdays, am / pm from context.

The generated suite (:mod:`forethought.bench.date_suite`) is answered by the date derivation at the issue's
bar; hand-written sentences the generator does not write check each convention on its own, and numbers
that are neither dates nor times give none.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.bench.date_suite import FAMILIES, DateCase, answer, date_suite, score_suite
from forethought.predictors.patterns.derive_time import Reference, when_atoms

TODAY = dt.date(2026, 3, 2)  # a Monday
REF = Reference(TODAY, TODAY)


def _read(text: str, reference: Reference = REF) -> tuple[list[str], list[str]]:
    atoms = when_atoms(text, reference)
    return ([a.date.isoformat() for a in atoms if type(a.date) is dt.date],
            [a.date.strftime("%H:%M") for a in atoms if isinstance(a.date, dt.time)])


def test_the_generated_suite_is_answered_at_the_issue_bar() -> None:
    cases = date_suite(700, seed=11)
    assert len({case.text for case in cases}) > 600  # hundreds of distinct phrasings
    assert {case.family for case in cases} == set(FAMILIES)
    results = score_suite(cases)
    assert results["exact"] >= 0.9
    assert all(entry["exact"] >= 0.8 for entry in results["by_family"].values()), results["by_family"]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000))
def test_any_generated_case_is_answered_exactly(seed: int) -> None:
    for case in date_suite(len(FAMILIES), seed=seed):
        assert answer(case) == (case.dates, case.times), case


@pytest.mark.parametrize(("text", "dates"), [
    ("from December 10th to 15th", ["2026-12-10", "2026-12-15"]),
    ("Dec 28 to Jan 3", ["2026-12-28", "2027-01-03"]),
    ("December 28 - 3", ["2026-12-28", "2027-01-03"]),  # a smaller day ends the range in the next month
    ("between the 4th and the 9th of May", ["2026-05-04", "2026-05-09"]),
    ("March 10-12", ["2026-03-10", "2026-03-12"]),
    ("one night on November 14", ["2026-11-14", "2026-11-15"]),
    ("checking in April 2 for three nights", ["2026-04-02", "2026-04-05"]),
    ("arrive on June 5, leave two days later", ["2026-06-05", "2026-06-07"]),
    ("two days before May 3", ["2026-05-01", "2026-05-03"]),
    ("a 4-day trip from July 1, dinner on the last day", ["2026-07-01", "2026-07-04"]),
    ("a trip from July 1, the museum on the third day", ["2026-07-01", "2026-07-03"]),
    ("next Friday", ["2026-03-13"]),
    ("Friday", ["2026-03-06"]),
    ("Wednesday next week", ["2026-03-11"]),
    ("this Monday", ["2026-03-09"]),  # today is a Monday: the first one after today
    ("in ten days", ["2026-03-12"]),
    ("February 29", ["2028-02-29"]),  # the next one there is
])
def test_dates_follow_their_conventions(text: str, dates: list[str]) -> None:
    assert _read(text)[0] == dates


@pytest.mark.parametrize(("text", "times"), [
    ("at 2:30 in the afternoon", ["14:30"]),
    ("in the evening at 7", ["19:00"]),
    ("at 8 tonight", ["20:00"]),
    ("at 2:30", ["02:30"]),  # nothing says which half: as written
    ("from 2 to 4 pm", ["14:00", "16:00"]),
    ("between 9 and 11:30 am", ["09:00", "11:30"]),
    ("2-4pm", ["14:00", "16:00"]),
    ("30 minutes before the 8 am meeting", ["07:30", "08:00"]),
    ("an hour and a half after my 10:15 am call", ["11:45", "10:15"]),
    ("at 2:30 pm for 45 minutes", ["14:30", "15:15"]),
    ("at 11 am, lasting two hours", ["11:00", "13:00"]),
    ("after my 1 pm lunch, at 3", ["13:00", "15:00"]),
    ("at 09:30", ["09:30"]),
    ("at 21:05", ["21:05"]),
    ("at noon", ["12:00"]),
])
def test_times_follow_their_conventions(text: str, times: list[str]) -> None:
    assert _read(text)[1] == times


def test_am_or_pm_comes_from_the_same_clause_only() -> None:
    assert _read("arriving at 11:45; remind me before the 6:15pm flight")[1] == ["11:45", "18:15"]
    assert _read("one night there, arriving at 11:45")[1] == ["11:45"]  # a night's stay is no time of day


@pytest.mark.parametrize("text", [
    "a table for 4 people", "room 204 on floor 3", "version 2.10", "order #4471, 3 to 5 guests",
    "it costs 15 to 20 dollars", "call 555-0142", "rated 4 stars at 30% off", "two nights", "the third day",
    "3 days later", "30 minutes before the meeting",
])
def test_numbers_that_are_not_dates_or_times_give_none(text: str) -> None:
    assert _read(text, Reference()) == ([], [])


def test_relative_words_need_a_stated_today() -> None:
    year_only = Reference(None, dt.date(2026, 3, 2))
    assert _read("next Friday, tomorrow, in 3 days, tonight", year_only) == ([], [])
    assert _read("on May 3 and two days later", year_only)[0] == ["2026-05-03", "2026-05-05"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789 :-/.,;apmAPMtoandfrmhursdyightNovDec'")), max_size=80))
def test_arbitrary_text_never_breaks_the_derivation(text: str) -> None:
    atoms = when_atoms(text, REF)
    assert all(isinstance(a.date, dt.date | dt.time) for a in atoms)
    assert [a.start for a in atoms] == sorted(a.start for a in atoms)


def test_a_case_missed_is_reported_with_what_was_read() -> None:
    wrong = DateCase("absolute", "Today is 2026-03-02.", "on March 5", TODAY, (dt.date(2026, 3, 6),), ())
    results = score_suite([wrong])
    assert results["exact"] == 0.0
    assert results["misses"]["absolute"][0]["got"] == "2026-03-05"
