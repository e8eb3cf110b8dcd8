"""Trajectories: the ground truth a simulated model replays and a workload's tools are checked against.

A :class:`Trajectory` is one conversation: user turns, and for each turn the assistant's steps, each step
one assistant message holding one or more tool calls (parallel calls share a step). After its steps a turn
ends with a short final answer. Workloads (BFCL, synthetic) produce trajectories; the simulated engine
replays them; the bench runs agents over them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message and the assistant's tool-call steps that answer it."""

    user: str
    steps: tuple[tuple[ToolCall, ...], ...] = ()
    answer: str = "Done."

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(call for step in self.steps for call in step)


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A whole conversation to replay, with the tools (OpenAI ``tools`` entries) offered to the model."""

    id: str
    turns: tuple[Turn, ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    domain: str = ""
    system: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(call for turn in self.turns for call in turn.calls)
