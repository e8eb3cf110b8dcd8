"""Shared fakes for the core tests: an injectable clock, a versioned state cell, gates and an execution log.

The fakes are small real implementations of the seams (``StateCell``/``Snapshot``; the clock is the
core's own :class:`~forethought._core.clock.FakeClock`), so
tests can count what ran, where (live state or a snapshot) and in which order, without timing anything.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import copy
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from forethought import FakeClock, Session
from forethought._core.pressure import NO_PRESSURE, LoopPressure, Pressure

__all__ = ["PHASE", "ExecLog", "FakeClock", "FakeSnapshot", "FakeState", "Gate", "settle", "speculate_marked",
           "spin"]

os.environ["FORETHOUGHT_BACKOFF"] = "off"  # Policy() and every process a test starts: no load back-off
_CACHE = tempfile.mkdtemp(prefix="forethought-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE  # what tests learn (patterns stores) never reaches the user's ~/.cache
atexit.register(shutil.rmtree, _CACHE, True)


@pytest.fixture(autouse=True)
def _no_load_backoff(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's load must not change what a test sees: besides the default policy's back-off being off
    (above), the real load signal reads as idle even where a test turns back-off on, except in tests marked
    ``real_pressure`` (which exercise it)."""
    if request.node.get_closest_marker("real_pressure") is None:
        def idle(self: LoopPressure) -> Pressure:
            return NO_PRESSURE

        monkeypatch.setattr(LoopPressure, "pressure", idle)


PHASE: contextvars.ContextVar[str] = contextvars.ContextVar("phase", default="authoritative")
"""Set to "speculative" around ``speculate`` calls: the speculative task copies it at creation, so an
(async) tool can tell from ``PHASE.get()`` on which path it runs."""


def speculate_marked(session: Session, call: Any, **kwargs: Any) -> Any:
    """``session.speculate`` with :data:`PHASE` set, so the launched task's tool runs see "speculative"."""
    token = PHASE.set("speculative")
    try:
        return session.speculate(call, **kwargs)
    finally:
        PHASE.reset(token)


class FakeSnapshot:
    """A deep copy of a :class:`FakeState` at a base version; commit installs it if nothing changed since."""

    def __init__(self, cell: FakeState) -> None:
        self.cell = cell
        self.base = cell.version
        self.copy = copy.deepcopy(cell.value)
        self.committed = False
        self.discards = 0

    @property
    def target(self) -> Any:
        return self.copy

    def commit(self) -> bool:
        self.cell.commits_tried += 1
        if self.committed or self.discards or self.cell.version != self.base:
            return False
        self.cell.value = self.copy
        self.cell.version += 1
        self.committed = True
        return True

    def discard(self) -> None:
        self.discards += 1


class FakeState:
    """A versioned live value handing out deep-copy snapshots (the ``StateCell`` seam)."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.version = 0
        self.snapshots: list[FakeSnapshot] = []
        self.commits_tried = 0

    @property
    def live(self) -> Any:
        return self.value

    def snapshot(self) -> FakeSnapshot:
        snap = FakeSnapshot(self)
        self.snapshots.append(snap)
        return snap

    def mark_changed(self) -> None:
        self.version += 1


@dataclass
class ExecLog:
    """Every tool invocation as (tool, phase, arguments), in order."""

    runs: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def add(self, tool: str, arguments: dict[str, Any]) -> None:
        self.runs.append((tool, PHASE.get(), arguments))

    def count(self, tool: str | None = None, phase: str | None = None) -> int:
        return sum(1 for t, p, _ in self.runs if (tool is None or t == tool) and (phase is None or p == phase))


class Gate:
    """An async barrier a test opens explicitly; ``entered`` counts the waiters that reached it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.entered = 0

    async def wait(self) -> None:
        self.entered += 1
        await self.event.wait()

    def open(self) -> None:
        self.event.set()


async def settle(session: Session) -> None:
    """Wait until every speculation in the session's store has finished (none may hang)."""
    await session.wait_speculations()


async def spin(times: int = 5) -> None:
    """Give the event loop a few turns (to let just-launched tasks reach their first await)."""
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log() -> ExecLog:
    return ExecLog()


@pytest.fixture
def gate_factory() -> Callable[[], Gate]:
    return Gate
