"""Canonical state fingerprints: equal content gives equal text; any real difference shows."""

from __future__ import annotations

import copy
import datetime
import random

from forethought.sandbox.fingerprint import fingerprint


class Box:
    def __init__(self, **attrs: object) -> None:
        self.__dict__.update(attrs)


def test_order_of_keys_and_set_members_is_irrelevant() -> None:
    assert fingerprint({"b": 1, "a": {2, 3}}) == fingerprint({"a": {3, 2}, "b": 1})
    assert fingerprint(frozenset({"x", "y"})) == fingerprint(frozenset({"y", "x"}))


def test_numbers_and_types_are_distinguished() -> None:
    assert fingerprint(1) != fingerprint(1.0)
    assert fingerprint([1]) != fingerprint({1})
    assert fingerprint({"1": 1}) != fingerprint({1: 1})
    assert fingerprint(b"ab") != fingerprint("ab")


def test_cycles_and_shared_mutables_are_references() -> None:
    a = Box(items=[])
    a.items.append(a)
    assert fingerprint(a) == fingerprint(copy.deepcopy(a))
    shared: list[int] = []
    assert fingerprint(Box(x=shared, y=shared)) != fingerprint(Box(x=[], y=[]))
    t = (1, 2)
    assert fingerprint(Box(x=t, y=t)) == fingerprint(Box(x=(1, 2), y=(1, 2)))


def test_random_generators_times_exclusions_and_opaque_values() -> None:
    r1, r2 = random.Random(1), random.Random(1)
    assert fingerprint(r1) == fingerprint(r2)
    r2.random()
    assert fingerprint(r1) != fingerprint(r2)
    now = datetime.datetime(2024, 1, 1)
    assert fingerprint(Box(t=now)) != fingerprint(Box(t=now + datetime.timedelta(seconds=1)))
    assert fingerprint(Box(t=now, v=1), exclude={("Box", "t")}) == fingerprint(Box(t=None, v=1), exclude={("Box", "t")})
    assert fingerprint(Box(f=len, c=int)) == fingerprint(Box(f=len, c=int))
