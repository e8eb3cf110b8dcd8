"""Mention order in paired parameters: "from Lima to Oslo" gives the origin the first name, whatever each
parameter's own best value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.pairs import MIN_CALLS, PairOrder, named_at


@dataclass(frozen=True)
class _Choice:
    value: Any
    key: str
    absent: bool = False


def _choices(origin: list[str], destination: list[str]) -> dict[str, list[_Choice]]:
    return {"origin": [_Choice(v, v) for v in origin], "destination": [_Choice(v, v) for v in destination]}


def test_paired_values_named_in_the_order_the_pair_never_has_are_swapped() -> None:
    pairs = PairOrder(Counts())
    for n in range(int(MIN_CALLS)):
        pairs.learn("fly", {"origin": f"City{n}a", "destination": f"City{n}b"}, f"Fly me from City{n}a to City{n}b.")
    message = "Book a seat from Lima to Oslo."
    swapped = _choices(["Oslo", "Lima"], ["Lima", "Oslo"])  # each parameter's best is the other's value
    assert pairs.reorder("fly", swapped, {"origin": 0, "destination": 0}, message) == {"origin": 1, "destination": 1}
    right = _choices(["Lima", "Oslo"], ["Oslo", "Lima"])
    assert pairs.reorder("fly", right, {"origin": 0, "destination": 0}, message) == {"origin": 0, "destination": 0}
    alone = _choices(["Oslo"], ["Lima"])  # the other value is no candidate: nothing to swap with
    assert pairs.reorder("fly", alone, {"origin": 0, "destination": 0}, message) == {"origin": 0, "destination": 0}
    assert pairs.reorder("other", swapped, {"origin": 0, "destination": 0}, message) == {"origin": 0, "destination": 0}


def test_a_pair_named_in_both_orders_is_left_alone() -> None:
    pairs = PairOrder(Counts())
    for n in range(8):
        first, second = (f"A{n}x", f"B{n}x") if n % 2 else (f"B{n}x", f"A{n}x")
        pairs.learn("fly", {"origin": f"A{n}x", "destination": f"B{n}x"}, f"between {first} and {second}")
    swapped = _choices(["Oslo", "Lima"], ["Lima", "Oslo"])
    assert pairs.reorder("fly", swapped, {"origin": 0, "destination": 0}, "from Lima to Oslo") == {
        "origin": 0, "destination": 0}


def test_values_are_found_in_the_message_by_their_words() -> None:
    assert named_at("New York", "fly to new york!") is not None
    assert named_at("York", "fly to new york!") is not None
    assert named_at("x", "x marks it") is None  # one character names nothing
    assert named_at(3, "3 seats") is None
