"""Shared speculative results: the seam through which a session's guesses reuse other workers' answers.

Some tools give every caller of a tenant the same answer (public search, documentation lookups). A
:class:`SharedRuns` given to the runtime (or to one session) decides which tools it shares; for those, a
speculation obtains its value through it (served from what another worker published, or run here once
for everyone: single flight), and an authoritative run's value is handed to it to publish. The value a
speculation obtains this way becomes an ordinary entry of the session's store, claimed under every local
rule, so equivalence holds as for a local hit; authoritative calls always run the tool themselves.

A value is stamped with when the run that computed it began (wall-clock seconds, ``time.time``: values cross
processes, whose monotonic clocks do not compare), and a speculation takes only a value computed after the
last write it depends on ended (``not_before``: :func:`last_change` of the states it reads, the session's
and the world's for a READ_ONLY tool that declares nothing). A value computed before this session's own
write is never served to it; a write that no state of this runtime tracks (another worker's) is the
tenant's contract ("the same answer for every caller"), bounded by the value's TTL.
:class:`~forethought.stores.shared_tools.SharedSpeculation` is the real implementation (Redis or memory
behind it); :class:`MemoryShared` shares within one process (the small fake for tests).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from forethought._core.calls import CallKey
from forethought._core.tools import Tool

__all__ = ["MemoryShared", "SharedRuns", "last_change"]


class SharedRuns(Protocol):
    """Which tools' speculative results are shared, and how they are obtained and published."""

    def shares(self, t: Tool) -> bool:
        """Whether speculations of ``t`` go through this (never for private or stateful tools)."""

    async def speculate(self, t: Tool, key: CallKey, run: Callable[[], Any], not_before: float = 0.0) -> Any:
        """The value of ``t``'s call under ``key``: a published one computed after ``not_before`` (wall-clock
        seconds), or ``run()`` (awaited if it returns an awaitable) here; raises what ``run`` raises."""

    def published(self, t: Tool, key: CallKey, value: Any, started_at: float) -> None:
        """An authoritative run of ``t`` that began at ``started_at`` (wall-clock seconds) gave ``value``:
        publish it in the background (never waits)."""


def last_change(versions: Iterable[object]) -> float:
    """When a write of any of ``versions`` last ended (wall-clock seconds; 0 if none ever did). A version that
    does not say (a shared clock of another kind) counts as changed now: nothing computed elsewhere is taken."""
    latest = 0.0
    for version in versions:
        changed = getattr(version, "changed_at", None)
        latest = max(latest, changed if isinstance(changed, float) else time.time())
    return latest


class MemoryShared:
    """A small real implementation for one process: the named tools' values kept as JSON text in a dict, so
    every caller gets its own decoded copy; values that are not JSON are not shared."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.values: dict[CallKey, tuple[float, str]] = {}
        """Call key -> (when the run that computed it began, its JSON text)."""
        self.served = 0
        self.ran = 0

    def shares(self, t: Tool) -> bool:
        return t.name in self.names and not (t.private or t.private_arguments or t.state is not None)

    async def speculate(self, t: Tool, key: CallKey, run: Callable[[], Any], not_before: float = 0.0) -> Any:
        found = self.values.get(key)
        if found is not None and found[0] > not_before:
            self.served += 1
            return json.loads(found[1])
        self.ran += 1
        started = time.time()
        value = run()
        if inspect.isawaitable(value):
            value = await value
        self.published(t, key, value, started)
        return value

    def published(self, t: Tool, key: CallKey, value: Any, started_at: float) -> None:
        with contextlib.suppress(TypeError, ValueError):  # not JSON: not shared
            self.values[key] = (started_at, json.dumps(value, allow_nan=False))
