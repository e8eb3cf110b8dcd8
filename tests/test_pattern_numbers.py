"""Whole numbers are guessed as the parameter spells them (keys tell 5 from 5.0)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forethought.predictors.patterns.numbers import NumberSpelling


def test_schema_decides_without_history() -> None:
    spelling = NumberSpelling()
    assert type(spelling.spell("t", "p", {"type": "number"}, 5)) is float
    assert type(spelling.spell("t", "p", {"type": "integer"}, 5.0)) is int
    assert spelling.spell("t", "p", {"type": "number"}, 2.5) == 2.5
    assert spelling.spell("t", "p", None, 5) == 5 and type(spelling.spell("t", "p", None, 5.0)) is float
    assert spelling.spell("t", "p", {"type": "number"}, True) is True  # booleans are not numbers here
    assert spelling.spell("t", "p", {"type": "string"}, "5") == "5"


def test_history_outvotes_the_schema_per_parameter() -> None:
    spelling = NumberSpelling()
    for _ in range(3):
        spelling.learn("order", {"amount": 10, "price": 150.0, "ids": [1, 2]})
    spelling.learn("order", {"amount": 10.0})
    assert type(spelling.spell("order", "amount", {"type": "number"}, 7.0)) is int  # 3 ints against 1 float
    assert type(spelling.spell("order", "price", {"type": "integer"}, 7)) is float
    assert spelling.spell("order", "ids", {"type": "array", "items": {"type": "number"}}, [3.0, 4]) == [3, 4]
    assert all(type(v) is int for v in spelling.spell("order", "ids", None, [3.0, 4]))
    clone = spelling.copy()
    spelling.learn("order", {"price": 1})
    spelling.learn("order", {"price": 2})
    spelling.learn("order", {"price": 3})
    spelling.learn("order", {"price": 4})
    assert type(spelling.spell("order", "price", None, 7)) is int
    assert type(clone.spell("order", "price", None, 7)) is float  # the copy is independent


@given(st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False)),
       st.sampled_from([None, {"type": "number"}, {"type": "integer"}]))
def test_respelling_never_changes_the_number(value: float, schema: dict[str, str] | None) -> None:
    spelled = NumberSpelling().spell("t", "p", schema, value)
    assert spelled == value and (type(spelled) is type(value) or float(value).is_integer())


def test_a_number_the_message_states_is_spelt_as_stated_ones_were() -> None:
    """A model copies the spelling of a number the user wrote and spells one it works out its own way:
    the counts are kept apart by whether the message states the number, the parameter's decide when even."""
    spelling = NumberSpelling()
    for n in (30, 40, 50):
        spelling.learn("fill", {"amount": n}, f"Add {n} litres.")  # stated: copied as written
    for n in (45.0, 35.0, 25.0, 15.0):
        spelling.learn("fill", {"amount": n}, "Fill it up completely.")  # worked out: a float
    assert type(spelling.spell("fill", "amount", {"type": "number"}, 60.0, "Add 60 litres.")) is int
    assert type(spelling.spell("fill", "amount", {"type": "number"}, 60, "Fill it up.")) is float
    assert type(spelling.spell("fill", "amount", {"type": "number"}, 60)) is float  # no message: not stated
    assert type(spelling.spell("fill", "amount", None, 60, "Add 60.0 litres.")) is float  # never seen so: overall
    other = spelling.other_spelling("fill", "amount", None, 60, "Add 60 litres.")
    assert other is not None and type(other[0]) is float and other[1] == (0 + 4 / 7) / 4
    clone = spelling.copy()
    assert type(clone.spell("fill", "amount", None, 60, "Add 60 litres.")) is int
