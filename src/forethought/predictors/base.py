"""The predictor seam: what a predictor sees, what it proposes, and how it learns.

A predictor is asked at the start of each model turn for likely next calls (:meth:`Predictor.predict`)
and is told what really happened after each authoritative call (:meth:`Predictor.observe`). It never runs
tools itself: the agent hands its :class:`Prediction` values to ``Session.speculate``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from forethought._calls import ToolCall


def reports_failure(value: Any) -> bool:
    """Whether a tool's return value reports a failure: an object with an ``error`` field.

    Many tool sets (BFCL's backends among them) return errors instead of raising; the agent and the
    offline evaluation both use this one rule, so a predictor sees the same outcome in both.
    """
    return isinstance(value, Mapping) and "error" in value


@dataclass(frozen=True, slots=True)
class ObservedCall:
    """An authoritative call of this session with its output as the model saw it.

    ``ok`` is false when the call raised or its value reports a failure (:func:`reports_failure`).
    """

    call: ToolCall
    output: str
    ok: bool = True


@dataclass(frozen=True, slots=True)
class PredictionContext:
    """What a predictor may look at: the conversation so far, this session's calls, the tools offered."""

    session_id: str
    messages: Sequence[Mapping[str, Any]]
    user_message: str
    history: Sequence[ObservedCall] = ()
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Tool name -> JSON schema of its parameters."""
    openai_tools: Sequence[Mapping[str, Any]] = ()
    """The tools exactly as offered to the main model (a speculator model is offered the same)."""
    request_extra: Mapping[str, Any] = field(default_factory=dict)
    """Extra request fields the main model call carries (routing metadata a speculator model repeats)."""
    load_level: float = 0.0
    """How loaded the runtime is, 0 (idle) to 1 (speculating only certain calls): a costly predictor
    (a speculator model) draws fewer samples as it rises, and none at 1."""
    covered: float = 0.0
    """The calibrated chance that the model's next call is already among this step's guesses (from the
    cheap predictors, which run first): a costly predictor draws only the samples still worth drawing."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """A proposed next call. Only ``executable`` predictions are speculated; others are hints."""

    call: ToolCall
    confidence: float
    source: str
    executable: bool = True


@runtime_checkable
class Predictor(Protocol):
    """Proposes next calls from context and learns from what the model really did."""

    name: str

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        """Likely next calls, most confident first."""

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Learn from one authoritative call, made in ``context``."""


@runtime_checkable
class StreamingPredictor(Predictor, Protocol):
    """A predictor that can hand over each prediction the moment it has it (e.g. a speculator model)."""

    def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
        """Predictions as they become available."""
