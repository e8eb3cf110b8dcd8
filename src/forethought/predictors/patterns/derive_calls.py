"""What rules read of one observed call, worked out once per call: its arguments' value keys, its output's codes.

Every later step of a session reads the same calls, so each is reduced once: the value keys of every
scalar of its arguments (what "not yet used this turn" compares against; by the identity of the call,
checked, in a bounded memo that holds the call but not its output) and the codes among the scalar items of
its output's lists (what an abbreviation may stand for,
:func:`~forethought.predictors.patterns.mentions.abbreviated`; kept with the output's index).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from forethought._core.calls import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.derive_values import value_key

MAX_LISTED_CODES = 256
"""Items of an output's lists looked at, in all, for codes that abbreviate a name
(:meth:`~forethought.predictors.patterns.derive_sources.SourceView.listed_codes`)."""


_ARGUMENT_KEYS: dict[int, tuple[ToolCall, frozenset[str]]] = {}
"""id of a call -> (the call, :func:`argument_keys`): every later step reads the same calls."""
MAX_ARGUMENT_KEYS = 2048


def argument_keys(observed: ObservedCall) -> frozenset[str]:
    """The value keys of every scalar in a call's arguments (strings lower-cased), remembered per call."""
    call = observed.call
    known = _ARGUMENT_KEYS.get(id(call))
    if known is not None and known[0] is call:
        return known[1]
    keys = frozenset(_scalar_keys(dict(call.arguments)))
    if len(_ARGUMENT_KEYS) >= MAX_ARGUMENT_KEYS:
        _ARGUMENT_KEYS.clear()
    _ARGUMENT_KEYS[id(call)] = (call, keys)
    return keys


def output_codes(observed: ObservedCall) -> tuple[str, ...]:
    """The codes among the scalar items of an output's lists, shallow lists first, the first
    :data:`MAX_LISTED_CODES` items looked at in all (remembered with the output's index)."""
    index = output_index(observed.output)
    known: tuple[str, ...] | None = index.facts.get("codes")
    if known is not None:
        return known
    codes: dict[str, None] = {}
    budget = MAX_LISTED_CODES
    # Shallow lists first (a listing's own list before the lists inside its records), then in document order;
    # lists of containers hold no codes and cost nothing.
    for _, _, length, placed in sorted(index.lists.code_lists):
        for place, code in placed:
            if place < budget:
                codes.setdefault(code)
        budget -= min(budget, length)
        if budget <= 0:
            break
    index.facts["codes"] = found = tuple(codes)
    return found


def _scalar_keys(value: Any) -> Iterator[str]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _scalar_keys(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _scalar_keys(item)
    else:
        yield value_key(value.lower() if isinstance(value, str) else value)
