"""Repeated calls: how often a call is the exact repeat of an earlier call of its session, learned per tool.

Most agents rarely make the same call twice in a session (they already have its output), but some do
(polling a status, re-reading a file after a change). A candidate call whose tool and arguments equal a
recent call of the session is therefore scored by how often that tool's calls have been such repeats:
each observed call of a tool that was already called in the recent history is one *trial*, and a
*success* when its arguments equal one of those earlier calls'. The rate is shrunk towards the rate over
every tool, which is shrunk towards an uninformed prior, so a workload that repeats calls keeps its repeats
and one that never does stops proposing them. Nothing here knows any tool: calls are names and argument
values, compared as value keys (``1`` and ``1.0`` alike, dict order ignored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.rates import ToolRate

PREFIX = "e"
"""Counter keys: ``e SEP tool SEP s`` (repeats) and ``e SEP tool SEP n`` (trials), ``tool`` = ``*`` for all."""
RECENT_CALLS = 32
"""An earlier call counts as repeated when it is among this many latest calls of the session."""
PRIOR_WEIGHT = 2.0
PRIOR_RATE = 0.5
"""With nothing learned, a repeat is as likely as not (no penalty worth speaking of until calls are seen)."""

RecentCalls = Mapping[str, frozenset[str]]
"""Tool name -> the keys of its arguments in the session's recent calls."""


def call_key(arguments: Mapping[str, Any]) -> str:
    """The arguments of a call as one comparable string (or ``""`` when they cannot be compared)."""
    try:
        return value_key(dict(arguments))
    except (TypeError, ValueError, RecursionError):
        return ""


def recent_calls(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, frozenset[str]]:
    """:data:`RecentCalls` of the latest :data:`RECENT_CALLS` of ``calls`` ((tool, canonical arguments))."""
    found: dict[str, set[str]] = {}
    for name, arguments in calls[-RECENT_CALLS:]:
        key = call_key(arguments)
        if key:
            found.setdefault(name, set()).add(key)
    return {name: frozenset(keys) for name, keys in found.items()}


class RepeatModel:
    """Per-tool rate of exact repeats among the calls of tools already called recently."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self._rate = ToolRate(counts, PREFIX, PRIOR_RATE, PRIOR_WEIGHT)


    def learn(self, tool: str, arguments: Mapping[str, Any], recent: RecentCalls) -> None:
        """Count one observed call of ``tool`` (a trial only if ``tool`` is among the ``recent`` calls)."""
        earlier = recent.get(tool)
        if not earlier:
            return
        key = call_key(arguments)
        repeat = bool(key) and key in earlier
        self._rate.count(tool, repeat)

    def rate(self, tool: str) -> float:
        """How likely a call of ``tool``, made when it was already called recently, repeats one of them."""
        return self._rate.rate(tool)

    def factor(self, tool: str, arguments: Mapping[str, Any], recent: RecentCalls) -> float:
        """The confidence factor of a candidate call: :meth:`rate` when it repeats a recent call, else 1."""
        earlier = recent.get(tool)
        if not earlier:
            return 1.0
        key = call_key(arguments)
        return self.rate(tool) if key and key in earlier else 1.0
