"""Where a conversation's guesses come from: the pattern predictor on the conversation, and a speculator model.

:class:`Guessers` hands each step its predictors. The pattern predictor
(:class:`~forethought.predictors.patterns.PatternPredictor`) is one per tool set (the fingerprint of the
tools the client offers, so every conversation of one client setup learns into the same counters), on the
pattern store the daemon was given (SQLite, or memory). It sees the conversation itself: the user's text,
the system text, every earlier call and its result (:class:`~forethought.daemon.transcript.Transcript`).

With a speculator model configured, a :class:`~forethought.predictors.model.ModelSpeculator` on a
:class:`~forethought.daemon.speculator.ReplayClient` samples ``samples`` times per step (fewer under load,
none once the conversation spent its token budget).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.daemon.speculator import ReplayClient, TokenBudget
from forethought.predictors.base import Predictor
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.patterns import PatternPredictor
from forethought.predictors.patterns.store import PatternStore, tool_set_fingerprint

__all__ = ["Guessers", "SpeculatorSettings"]

MAX_TOOL_SETS = 32


@dataclass(frozen=True, slots=True)
class SpeculatorSettings:
    """The speculator model: its name (a model of the same provider), samples per step, tokens per conversation."""

    model: str
    samples: int = 2
    budget_tokens: int | None = 200_000
    max_tokens: int = 1024

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("the speculator model needs a name")
        if self.samples < 1:
            raise ValueError("speculator samples must be >= 1")
        if self.budget_tokens is not None and self.budget_tokens < 0:
            raise ValueError("the speculator token budget must be >= 0")


class Guessers:
    """The predictors of every conversation's steps (see the module docstring)."""

    def __init__(self, store: PatternStore | None, speculator: ModelSpeculator | None = None,
                 replay: ReplayClient | None = None, *, patterns: bool = True,
                 extra: Sequence[Predictor] = ()) -> None:
        self._store = store
        self.extra = tuple(extra)
        """Predictors every step also runs (the bench's oracle, a user's own)."""
        self._patterns: OrderedDict[str, PatternPredictor] = OrderedDict()
        self.patterns_on = patterns
        self.speculator = speculator
        self.replay = replay

    @classmethod
    def with_speculator(cls, store: PatternStore | None, settings: SpeculatorSettings, http: Any,
                        *, patterns: bool = True, extra: Sequence[Predictor] = ()) -> Guessers:
        budget = TokenBudget(settings.budget_tokens)
        replay = ReplayClient(http, budget, settings.max_tokens)
        return cls(store, ModelSpeculator(replay, settings.model, samples=settings.samples), replay,
                   patterns=patterns, extra=extra)

    @property
    def budget(self) -> TokenBudget | None:
        return self.replay.budget if self.replay is not None else None

    def for_step(self, conversation: str, tools: Mapping[str, Mapping[str, Any]]) -> list[Predictor]:
        """The predictors of a step of ``conversation`` whose request offers ``tools``."""
        out: list[Predictor] = list(self.extra)
        if self.patterns_on and tools:
            out.append(self._pattern(tools))
        budget = self.budget
        if self.speculator is not None and budget is not None and budget.allows(conversation):
            out.append(self.speculator)
        return out

    def _pattern(self, tools: Mapping[str, Mapping[str, Any]]) -> PatternPredictor:
        fingerprint = tool_set_fingerprint(tools)
        found = self._patterns.get(fingerprint)
        if found is None:
            found = self._patterns[fingerprint] = PatternPredictor.for_tools(tools, store=self._store)
            while len(self._patterns) > MAX_TOOL_SETS:
                _, evicted = self._patterns.popitem(last=False)
                evicted.flush()
        self._patterns.move_to_end(fingerprint)
        return found

    def close(self) -> None:
        """Save what the pattern predictors learned."""
        for predictor in self._patterns.values():
            predictor.flush()
