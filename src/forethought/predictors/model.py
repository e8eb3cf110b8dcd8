"""Model speculation (Nichols et al., client side): a speculator model sampled lambda times per step.

At the start of each step the speculator model gets the same messages and tools as the main model, on
its own OpenAI-compatible endpoint, ``lambda`` times in parallel. Every tool call any sample proposes is
handed over as a :class:`Prediction` the moment its arguments close. Tokens are counted. With
``adaptive=True`` lambda follows the observed per-sample hit rate: the smallest number of samples that
would have caught the true call with probability ``target_coverage``, within ``[1, max_samples]``. Under
load (the context's ``load_level``) lambda shrinks with the spare capacity left, to none at level 1, and
with the chance that cheaper predictors already proposed the call (the context's ``covered``). It also
measures whether its samples slow the main model (:class:`~forethought.predictors.interference.InterferenceMeter`,
fed by :meth:`ModelSpeculator.note_generation` after each main step, with a probe step without samples now
and then) and draws fewer the more they do.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forethought._core.calls import ToolCall, dumps_canonical
from forethought.llm.events import MessageDone, ToolCallClosed
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, SampleVotes
from forethought.predictors.interference import InterferenceMeter

if TYPE_CHECKING:
    from forethought.llm.chat import LLMClient

SAMPLE_METADATA_KEY = "sample"
MAX_TRACKED_SESSIONS = 10_000
"""Sessions whose last step's sampling is remembered for :meth:`ModelSpeculator.note_generation`."""


def _identity(call: ToolCall) -> str:
    return call.name + "\x1f" + dumps_canonical(dict(call.arguments))


@dataclass(slots=True)
class _SessionGuesses:
    """The calls each sample proposed in a session's current step (by identity); which samples failed (an
    error, or a call that closed malformed or cut off) and which ended normally."""

    per_sample: list[dict[str, ToolCall]] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    finished: bool = False


@dataclass(slots=True)
class SpeculatorStats:
    """Requests, samples, tokens and per-sample hit counts of one speculator."""

    requests: int = 0
    samples: int = 0
    tokens: int = 0
    proposals: int = 0
    sample_trials: int = 0
    sample_hits: int = 0
    errors: int = 0
    first_close_total_s: float = 0.0
    first_close_count: int = 0

    @property
    def mean_first_close_s(self) -> float:
        """Mean time from a sample's request to its first closed tool call (the model's g)."""
        return self.first_close_total_s / self.first_close_count if self.first_close_count else 0.0


class ModelSpeculator:
    """The speculator-model predictor."""

    name = "model"

    def __init__(self, client: LLMClient, model: str, *, samples: int = 3, adaptive: bool = False,
                 max_samples: int = 8, target_coverage: float = 0.9, cost_per_token: float = 0.0,
                 interference: InterferenceMeter | None = None) -> None:
        if samples < 1 or max_samples < 1:
            raise ValueError("samples and max_samples must be >= 1")
        if not 0.0 < target_coverage < 1.0:
            raise ValueError("target_coverage must be in (0, 1)")
        self.client = client
        self.model = model
        self.samples = samples
        self.adaptive = adaptive
        self.max_samples = max_samples
        self.target_coverage = target_coverage
        self.cost_per_token = cost_per_token
        self.stats = SpeculatorStats()
        self.interference = interference or InterferenceMeter()
        """Whether drawing samples slows the main model (then fewer are drawn); see :meth:`note_generation`."""
        self.probes = 0
        self._guesses: dict[str, _SessionGuesses] = {}
        self._sampled: dict[str, bool] = {}

    @property
    def cost(self) -> float:
        return self.stats.tokens * self.cost_per_token

    def current_lambda(self) -> int:
        """How many samples the next step draws."""
        if not self.adaptive or self.stats.sample_trials == 0:
            return self.samples
        p = (self.stats.sample_hits + 1) / (self.stats.sample_trials + 2)  # Beta(1, 1) posterior mean
        if p >= 1.0:
            return 1
        wanted = math.ceil(math.log(1 - self.target_coverage) / math.log(1 - p))
        return max(1, min(self.max_samples, wanted))

    def confidence(self) -> float:
        """Estimated probability that a proposal is the true call."""
        return (self.stats.sample_hits + 1) / (self.stats.sample_trials + 2)

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [p async for p in self.predict_stream(context)]

    def samples_under(self, load_level: float, covered: float = 0.0) -> int:
        """Samples to draw at ``load_level`` when the call is already ``covered`` with that chance: lambda
        scaled by the spare capacity and by the chance still uncovered, rounded (so none at load 1, and
        none when cheaper guesses almost surely have the call already)."""
        load_level = max(load_level, self.interference.level())
        if load_level >= 1.0 or covered >= 1.0:
            return 0
        scale = (1.0 - max(0.0, load_level)) * (1.0 - max(0.0, covered))
        if scale >= 1.0:
            return self.current_lambda()
        return max(0, min(self.current_lambda(), math.floor(self.current_lambda() * scale + 0.5)))

    async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
        n = self.samples_under(context.load_level, context.covered)
        if n and self.interference.probe_now():
            n = 0  # a probe step: the main model's speed without samples, to compare with
            self.probes += 1
        self._sampled.pop(context.session_id, None)
        self._sampled[context.session_id] = n > 0
        while len(self._sampled) > MAX_TRACKED_SESSIONS:  # sessions that never report back
            del self._sampled[next(iter(self._sampled))]
        self._guesses.pop(context.session_id, None)  # last step's samples say nothing about this one
        if n == 0:
            return
        guesses = self._guesses[context.session_id] = _SessionGuesses([{} for _ in range(n)])
        while len(self._guesses) > MAX_TRACKED_SESSIONS:
            del self._guesses[next(iter(self._guesses))]
        queue: asyncio.Queue[ToolCall | None] = asyncio.Queue()
        tasks = [asyncio.create_task(self._sample(context, i, queue, guesses)) for i in range(n)]
        self.stats.requests += 1
        self.stats.samples += n
        finished = 0
        seen: set[str] = set()
        try:
            while finished < n:
                call = await queue.get()
                if call is None:
                    finished += 1
                    continue
                identity = _identity(call)
                if identity in seen:
                    continue
                seen.add(identity)
                self.stats.proposals += 1
                yield Prediction(call, self.confidence(), self.name)
            guesses.finished = True
        finally:
            for task in tasks:
                task.cancel()

    async def _sample(self, context: PredictionContext, index: int, queue: asyncio.Queue[ToolCall | None],
                      guesses: _SessionGuesses) -> None:
        started = time.monotonic()
        proposed = guesses.per_sample[index]
        first = True
        try:
            extra = _with_sample(context.request_extra, index)
            messages = [dict(m) for m in context.messages]
            tools = [dict(t) for t in context.openai_tools] or None
            async for event in self.client.stream(self.model, messages, tools, **extra):
                if isinstance(event, ToolCallClosed) and (event.arguments is None or event.error is not None):
                    guesses.failed.add(index)  # what it meant to propose is unknown: not a vote
                elif isinstance(event, ToolCallClosed):
                    assert event.arguments is not None
                    call = ToolCall(event.name, event.arguments)
                    if first:
                        first = False
                        self.stats.first_close_total_s += time.monotonic() - started
                        self.stats.first_close_count += 1
                    proposed[_identity(call)] = call
                    queue.put_nowait(call)
                elif isinstance(event, MessageDone) and event.usage is not None:
                    self.stats.tokens += event.usage.total_tokens
            guesses.ended.add(index)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.errors += 1
            guesses.failed.add(index)
        finally:
            queue.put_nowait(None)

    def note_generation(self, session_id: str, seconds: float, tokens: int,
                        first_token_s: float | None = None) -> None:
        """The main model's step in ``session_id`` took ``seconds`` for ``tokens`` completion tokens (its
        first token after ``first_token_s``, when known)."""
        sampled = self._sampled.pop(session_id, None)
        if sampled is not None:
            self.interference.note(seconds, tokens, sampled, first_token_s)

    def votes(self, session_id: str) -> SampleVotes | None:
        """What this step's samples proposed, once every one of them has ended (``None`` before, or when
        none were drawn); failed samples (an error, or a malformed or cut-off call) are left out."""
        guesses = self._guesses.get(session_id)
        if guesses is None or not guesses.finished:
            return None
        samples = tuple(tuple(proposed.values()) for i, proposed in enumerate(guesses.per_sample)
                        if i not in guesses.failed)
        return SampleVotes(samples, self.confidence())

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        guesses = self._guesses.get(context.session_id)
        if guesses is None:
            return
        identity = _identity(observed.call)
        for i, proposed in enumerate(guesses.per_sample):
            hit = identity in proposed
            if i in guesses.failed or (i not in guesses.ended and not hit):
                continue  # failed, or cut off by the step's end before it said anything: not a trial
            self.stats.sample_trials += 1
            self.stats.sample_hits += hit


def _with_sample(extra: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The main request's extra fields with this sample's index added to its metadata."""
    out = copy.deepcopy(dict(extra))
    metadata = out.setdefault("metadata", {})
    metadata[SAMPLE_METADATA_KEY] = str(index)
    return out
