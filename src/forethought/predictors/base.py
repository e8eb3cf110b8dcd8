"""The predictor seam: what a predictor sees, what it proposes, and how it learns.

A predictor is asked at the start of each model turn for likely next calls (:meth:`Predictor.predict`)
and is told what really happened after each authoritative call (:meth:`Predictor.observe`). It never runs
tools itself: the agent hands its :class:`Prediction` values to ``Session.speculate``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from forethought._core.calls import ToolCall


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


@dataclass(frozen=True, slots=True)
class SampleVotes:
    """What one step's samples of a sampling predictor said, once they have all finished.

    ``samples`` holds, per sample that ran to its end, the calls it proposed (none: it proposed a final
    answer); a sample that failed is left out, since it says nothing. ``alpha`` is the chance that one
    sample proposes the model's call (the predictor's measured per-sample hit rate). A guess from another
    source that no sample proposed is evidence against that guess: see :meth:`SampleVotes.revised`.
    """

    samples: tuple[tuple[ToolCall, ...], ...]
    alpha: float

    def revised(self, p_hit: float, proposed_by: int) -> float:
        """The chance a guess with prior ``p_hit`` hits, given that ``proposed_by`` of the samples proposed it.

        Bayes with independent samples: each proposes the model's call with chance ``alpha``; a wrong
        sample rarely lands on one particular other call, so a guess some sample proposed keeps its prior
        (no claim is made for it), and one none of the ``n`` samples proposed has its odds multiplied by
        ``(1 - alpha) ** n``.
        """
        n = len(self.samples)
        if proposed_by > 0 or n == 0 or not 0.0 < p_hit < 1.0 or not 0.0 < self.alpha < 1.0:
            return p_hit
        odds = p_hit / (1.0 - p_hit) * (1.0 - self.alpha) ** n
        return min(p_hit, odds / (1.0 + odds))  # never above the prior, even by a rounding error


@runtime_checkable
class SamplingPredictor(StreamingPredictor, Protocol):
    """A streaming predictor whose guesses come from independent samples (a speculator model)."""

    def votes(self, session_id: str) -> SampleVotes | None:
        """What the samples of ``session_id``'s current step proposed (``None``: none were drawn)."""
