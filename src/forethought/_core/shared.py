"""Shared speculative results: the seam through which a session's guesses reuse other workers' answers.

Some tools give every caller of a tenant the same answer (public search, documentation lookups). A
:class:`SharedRuns` given to the runtime (or to one session) decides which tools it shares; for those, a
speculation obtains its value through it (served from what another worker published, or run here once
for everyone: single flight), and an authoritative run's value is handed to it to publish. The value a
speculation obtains this way becomes an ordinary entry of the session's store, claimed under every local
rule, so equivalence holds as for a local hit; authoritative calls always run the tool themselves.
:class:`~forethought.stores.shared_tools.SharedSpeculation` is the real implementation (Redis or memory
behind it); :class:`MemoryShared` shares within one process (the small fake for tests).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from forethought._core.calls import CallKey
from forethought._core.tools import Tool

__all__ = ["MemoryShared", "SharedRuns"]


class SharedRuns(Protocol):
    """Which tools' speculative results are shared, and how they are obtained and published."""

    def shares(self, t: Tool) -> bool:
        """Whether speculations of ``t`` go through this (never for private or stateful tools)."""

    async def speculate(self, t: Tool, key: CallKey, run: Callable[[], Any]) -> Any:
        """The value of ``t``'s call under ``key``: a published one, or ``run()`` (awaited if it returns an
        awaitable) here; raises what ``run`` raises."""

    def published(self, t: Tool, key: CallKey, value: Any) -> None:
        """An authoritative run of ``t`` gave ``value``: publish it in the background (never waits)."""


class MemoryShared:
    """A small real implementation for one process: the named tools' values kept as JSON text in a dict, so
    every caller gets its own decoded copy; values that are not JSON are not shared."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.values: dict[CallKey, str] = {}
        self.served = 0
        self.ran = 0

    def shares(self, t: Tool) -> bool:
        return t.name in self.names and not (t.private or t.private_arguments or t.state is not None)

    async def speculate(self, t: Tool, key: CallKey, run: Callable[[], Any]) -> Any:
        text = self.values.get(key)
        if text is not None:
            self.served += 1
            return json.loads(text)
        self.ran += 1
        value = run()
        if inspect.isawaitable(value):
            value = await value
        self.published(t, key, value)
        return value

    def published(self, t: Tool, key: CallKey, value: Any) -> None:
        with contextlib.suppress(TypeError, ValueError):  # not JSON: not shared
            self.values[key] = json.dumps(value, allow_nan=False)
