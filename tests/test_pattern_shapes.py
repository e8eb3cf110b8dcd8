"""Value shapes: a month is not a place, and a date remembered from elsewhere never stands in for one the
message states."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train
from forethought.predictors.patterns.shapes import MIN_EVIDENCE, ShapeModel, shape


@pytest.mark.parametrize(("value", "expected"), [
    ("December", "month"), ("friday", "weekday"), ("2026-03-02", "date"), ("March 2, 2026", "date"),
    ("2026-03-02T10:00", "datetime"), ("14:30", "time"), ("9 pm", "time"), ("897362", "digits"), (12, "number"),
    (2.5, "number"), (True, "bool"), ("ana@example.org", "email"), ("https://x.org/a", "url"),
    ("docs/a.txt", "path"), ("SFO", "code"), ("INV-2041", "id"), ("San Francisco", "name"),
    ("hello there", "words"), ("a b c d e f g", "text"), ("", "empty"), ([1], "list"), ({"a": 1}, "object"),
])
def test_shapes_of_values(value: Any, expected: str) -> None:
    assert shape(value) == expected


def test_a_guarded_shape_is_penalised_only_where_the_parameter_never_takes_it() -> None:
    model = ShapeModel(Counts())
    assert model.factor("t", "city", "December") == 1.0  # nothing learned yet
    for n in range(int(MIN_EVIDENCE)):
        model.learn("t", "city", f"City{n}")
        model.learn("t", "when", "2026-03-0" + str(n % 9 + 1))
    assert model.factor("t", "city", "December") < 0.05
    assert model.factor("t", "city", "Bogota") == 1.0  # names are never guarded
    assert model.factor("t", "when", "2026-04-01") == 1.0  # a date parameter takes dates
    assert model.factor("other", "city", "December") < 0.05  # the parameter name on any tool counts too


_WEATHER = {"weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
_NAMES = ["Sam", "Ana", "Lee", "Kim", "Max", "Eva"]
_LEADS = ["weather for", "forecast of", "rain in", "sky over", "wind near", "snow around"]
_CITIES = ["Paris", "Lima", "Oslo", "Quito", "Rome", "Cairo", "Tokyo", "Perth", "Dakar", "Minsk", "Hanoi", "Riga"]


def _weather(n: int, text: str, city: str) -> RecordedSession:
    return RecordedSession(f"w{n}", (RecordedTurn(text, (ObservedCall(ToolCall("weather", {"city": city}), "ok"),)),),
                           _WEATHER)


def test_a_month_is_not_offered_as_a_place() -> None:
    # The city is the last name of the message in every session (the first names vary in number), so the
    # rule "the last proper noun" is the one learned; here the last proper noun is a month.
    who = [_NAMES[i % 6] if i % 2 else f"{_NAMES[i % 6]} and {_NAMES[(i + 1) % 6]}" for i in range(12)]
    predictor = PatternPredictor()
    train(predictor, [_weather(i, f"Hi, this is {who[i]}. Show me the {_LEADS[i % 6]} {city}.", city)
                      for i, city in enumerate(_CITIES)])
    context = next(contexts(_weather(99, "Hi, this is Sam and Ana. Show me the clouds above Bogota in December.",
                                     "Bogota")))[0]
    best = predictor.predict_now(context)[0]
    assert best.call == ToolCall("weather", {"city": "Bogota"})


_BOOK = {"book": {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}}


def _booking(n: int, text: str, day: str) -> RecordedSession:
    return RecordedSession(f"b{n}", (RecordedTurn(text, (ObservedCall(ToolCall("book", {"day": day}), "ok"),)),),
                           _BOOK)


def test_a_remembered_date_never_stands_in_for_one_the_message_states() -> None:
    predictor = PatternPredictor()
    train(predictor, [_booking(n, "Book my usual day, please.", "2026-05-01") for n in range(8)]
          + [_booking(10 + n, f"Book it for 2026-0{n + 6}-1{n} instead.", f"2026-0{n + 6}-1{n}") for n in range(2)])
    usual = predictor.predict_now(next(contexts(_booking(90, "Book my usual day, please.", "2026-05-01")))[0])
    assert usual[0].call.arguments["day"] == "2026-05-01"  # no date stated: the remembered one is right
    stated = predictor.predict_now(next(contexts(_booking(91, "Book it for 2026-06-03 instead.", "2026-06-03")))[0])
    days = [p.call.arguments.get("day") for p in stated]
    assert "2026-05-01" not in days
    assert days[0] == dt.date(2026, 6, 3).isoformat()

