"""What one run of the agent reports: each step's timing, each tool call's record, and the run's result.

Values only (:class:`~forethought.agent.loop.Agent` builds them); :class:`EngineSideStats` counts what
engine-side mode did over the agent's life.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Timing of one model response and its tool calls.

    ``generation_s``: request start to message end; ``tool_wait_s``: message end to all results ready;
    ``tool_s``: tool time the step's calls needed (served or run); ``overlap_s``: the part of it hidden
    behind generation or served from speculation.
    """

    generation_s: float
    tool_wait_s: float
    tool_s: float
    overlap_s: float
    calls: int
    hits: int
    early_dispatched: int
    finish_reason: str


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """One authoritative call of the conversation and the output the model got."""

    call: ToolCall
    output: str
    ok: bool
    outcome: str
    """hit, partial_hit, miss, or error."""
    source: str = ""
    """The predictor whose speculation served it (hits only)."""
    tool_s: float = 0.0
    """Tool seconds the call needed, whether run now, earlier, or served."""
    closed_at: float = 0.0
    """Seconds from the step's request start until the call's arguments closed in the stream."""
    early: bool = False
    """Dispatched authoritatively before the message ended."""
    saved_s: float = 0.0
    """Tool seconds a speculation had already spent on it when it was claimed (hits only)."""


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What one ``run`` produced: the new messages, tool records and timings."""

    messages: list[dict[str, Any]]
    tool_records: list[ToolRecord]
    steps: list[StepTiming]
    final_text: str
    usage_tokens: int = 0

    @property
    def generation_s(self) -> float:
        return sum(s.generation_s for s in self.steps)

    @property
    def tool_wait_s(self) -> float:
        return sum(s.tool_wait_s for s in self.steps)


@dataclass(slots=True)
class EngineSideStats:
    """What engine-side mode did: posts sent, entries the gateway cached, failed posts, calls it served."""

    posts: int = 0
    entries_cached: int = 0
    post_errors: int = 0
    served_calls: int = 0


__all__ = ["AgentResult", "EngineSideStats", "StepTiming", "ToolRecord"]
