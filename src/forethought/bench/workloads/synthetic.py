"""A synthetic workload with controlled shape: one PURE lookup per step, fixed step count.

Used by the efficiency sweep (``forethought bench --workload sweep``): with every step a single call of
known latency, the measured speedup can be compared directly with the closed-form bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forethought._core.calls import ToolCall
from forethought._core.tools import Effect, Tool
from forethought.bench.workloads.base import SessionTools
from forethought.bench.workloads.latency import LatencyModel, with_latency
from forethought.predictors.trajectory import Trajectory, Turn

LOOKUP_SCHEMA = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"],
                 "additionalProperties": False}


def _lookup(item: str) -> str:
    return f"value of {item}"


def lookup_tool() -> Tool:
    """The workload's one tool: a PURE lookup that answers ``value of ITEM``."""
    return Tool("lookup", _lookup, parameters=LOOKUP_SCHEMA, description="Look up an item's value.",
                effect=Effect.PURE)


@dataclass(frozen=True, slots=True)
class SyntheticWorkload:
    """``count`` trajectories of ``turns`` turns with ``steps`` lookups each."""

    count: int = 4
    turns: int = 2
    steps: int = 3
    name: str = "synthetic"

    def _trajectory(self, index: int) -> Trajectory:
        turns = []
        for t in range(self.turns):
            items = [f"item-{index}-{t}-{s}" for s in range(self.steps)]
            steps = tuple((ToolCall("lookup", {"item": item}),) for item in items)
            turns.append(Turn(user=f"Please look up {', '.join(items)}.", steps=steps))
        return Trajectory(id=f"synthetic-{index}", turns=tuple(turns),
                          tools=(lookup_tool().openai_schema(),), domain="synthetic")

    def trajectories(self) -> Sequence[Trajectory]:
        return [self._trajectory(i) for i in range(self.count)]

    def training(self) -> Sequence[Trajectory]:
        return [self._trajectory(self.count + i) for i in range(self.count)]

    def session_tools(self, trajectory: Trajectory, latency: LatencyModel | None) -> SessionTools:
        tool = lookup_tool()
        return SessionTools([with_latency(tool, latency) if latency else tool], lambda: "stateless")
