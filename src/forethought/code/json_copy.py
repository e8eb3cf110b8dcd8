"""Copying a call's arguments as JSON values, keeping the placeholders of calls still pending.

The shadow (speculation) and the real run both key a tool call by its arguments, so both need a fresh JSON
copy of them that may hold their own kind of pending value, and both refuse anything that is not JSON (a
call that cannot be keyed is never speculated). One walker serves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


class NotJSONError(Exception):
    """An argument is not a JSON value (or the arguments are too large): the call cannot be keyed."""


def json_copy(value: Any, budget: list[int], pending: type,
              refuse: Callable[[Any], str | None] | None = None) -> Any:
    """A fresh copy of ``value`` in which instances of ``pending`` are kept as they are.

    ``budget[0]`` counts the nodes still allowed; ``refuse(value)`` may name why a non-JSON value is
    refused (its reason becomes the error's message).
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise NotJSONError("tool arguments too large to speculate")
    kind = type(value)
    if value is None or kind in (bool, int, str) or kind is pending:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise NotJSONError("a non-finite number is not a JSON value")
        return value
    if kind is list:
        return [json_copy(v, budget, pending, refuse) for v in value]
    if kind is tuple:  # a tool can tell a tuple from a list: it gets what the program passed
        return tuple(json_copy(v, budget, pending, refuse) for v in value)
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise NotJSONError("a dict with non-string keys is not a JSON value")
            out[k] = json_copy(v, budget, pending, refuse)
        return out
    reason = refuse(value) if refuse is not None else None
    raise NotJSONError(reason or f"a {kind.__name__} argument is not a JSON value: the call is not speculated")
