"""BFCL multi-turn as a benchmark :class:`~forethought.bench.workloads.base.Workload`.

The run set is one interleaved fold (odd ids by default), optionally a subset spread evenly over the
four domains; the other fold is what learned predictors train on. Each session gets fresh executable
backends; the fingerprint is the canonical dump of every backend's state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from forethought._core.runtime import Runtime
from forethought.bench.workloads.base import SessionTools
from forethought.bench.workloads.bfcl import (
    BfclEntry,
    Grouping,
    build_session,
    load_bfcl,
    split_interleaved,
    state_fingerprint,
    to_trajectory,
)
from forethought.bench.workloads.latency import LatencyModel
from forethought.predictors.trajectory import Trajectory


def spread(entries: Sequence[BfclEntry], count: int) -> list[BfclEntry]:
    """``count`` entries spread evenly over ``entries`` (so every domain block is represented)."""
    if count <= 0 or count >= len(entries):
        return list(entries)
    step = len(entries) / count
    return [entries[int(i * step)] for i in range(count)]


@dataclass(slots=True)
class BfclWorkload:
    """BFCL multi-turn base: ``count`` test-fold trajectories (0 = the whole fold)."""

    count: int = 0
    fold: int = 0
    grouping: Grouping = "step"
    name: str = "bfcl"
    _entries: dict[str, BfclEntry] = field(default_factory=dict)
    _run: list[BfclEntry] = field(default_factory=list)
    _train: list[BfclEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        entries = load_bfcl()
        self._entries = {e.id: e for e in entries}
        train, test = split_interleaved(entries, self.fold)
        self._run = spread(test, self.count)
        self._train = train

    def trajectories(self) -> Sequence[Trajectory]:
        return [to_trajectory(e, self.grouping) for e in self._run]

    def training(self) -> Sequence[Trajectory]:
        return [to_trajectory(e, self.grouping) for e in self._train]

    def session_tools(self, trajectory: Trajectory, latency: LatencyModel | None) -> SessionTools:
        session = build_session(self._entries[trajectory.id], latency)
        state = session.state
        return SessionTools(session.tools, lambda: state_fingerprint(state))

    async def state_changing_calls(self, trajectory: Trajectory) -> frozenset[int]:
        """Indices (in ``trajectory.calls`` order) of ground-truth calls that change backend state."""
        return await _state_changing(self._entries[trajectory.id])


async def _state_changing(entry: BfclEntry) -> frozenset[int]:
    session = build_session(entry)
    runtime = Runtime()
    s = runtime.session(tools=session.tools)
    changed = set()
    before = state_fingerprint(session.state)
    for index, call in enumerate(entry.calls):
        with contextlib.suppress(Exception):  # a failing call changes nothing; serial runs see the same
            await s.execute(call)
        after = state_fingerprint(session.state)
        if after != before:
            changed.add(index)
        before = after
    runtime.close()
    return frozenset(changed)
