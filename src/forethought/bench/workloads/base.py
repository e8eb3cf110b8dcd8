"""The workload seam: trajectories to replay and, per session, fresh tools and a way to read their state.

A benchmark or test runs an agent over a :class:`Workload`: for each trajectory it asks for a
:class:`SessionTools` (tools bound to new backend state) and, when the conversation is over, compares the
state fingerprint across arms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from forethought._core.tools import Tool
from forethought.bench.workloads.latency import LatencyModel
from forethought.predictors.trajectory import Trajectory


@dataclass(frozen=True, slots=True)
class SessionTools:
    """Tools bound to one session's fresh state, and a deterministic dump of that state."""

    tools: Sequence[Tool]
    fingerprint: Callable[[], str]


class Workload(Protocol):
    """Trajectories plus per-session tools."""

    @property
    def name(self) -> str:
        """A short name for reports."""

    def trajectories(self) -> Sequence[Trajectory]:
        """The trajectories to run (the test fold, for learned predictors)."""

    def training(self) -> Sequence[Trajectory]:
        """Trajectories a learned predictor may train on before the run (never the ones run)."""

    def session_tools(self, trajectory: Trajectory, latency: LatencyModel | None) -> SessionTools:
        """Fresh tools and state for one run of ``trajectory``."""
