"""Feeding an agent's guesses into its session: priced by when the model's call is due, thinned under
load, hints warmed, and chained past speculated calls.

At each step start :class:`GuessFeed` runs the cheap predictors, then the streaming ones (a speculator
model) told how likely the call is already covered, so they draw only the samples still worth drawing.
Each executable prediction goes to
``session.speculate`` with ``eta_s``, the time this agent's model is still expected to need before its call
(a moving average of its generation time per step, less the time since the step began), so the runtime
prices a guess by the tool time it can really hide. Under load (the runtime's pressure level ``L``) each
predictor's list is cut to its best ``ceil(k * (1 - L))`` (none at ``L >= 1``) and the context carries
``L`` so a speculator model draws fewer samples. A hint (a prediction whose arguments are incomplete)
runs its tool's ``prepare`` hook instead. Chains: when a speculation of a READ_ONLY or PURE tool that a
predictor with ``predict_after`` (or ``predict_after_async``, e.g. one in a worker process) proposed
finishes, the calls that predictor expects next, given that
output, are speculated too (source ``chain``, confidence multiplied by the parent's), up to
``chain_depth`` levels and only while the step that launched them is still generating.

Deferring weak guesses until the samples have spoken: :mod:`forethought.agent.deferral`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Protocol, cast, runtime_checkable

from forethought._core.calls import ToolCall
from forethought._core.entry import SpeculationTicket
from forethought._core.runtime import Session, SettledSpeculation
from forethought._core.tools import Effect
from forethought.agent.deferral import Deferral, Held, SampleCounting, proposed_keys
from forethought.agent.learnable import learnable
from forethought.agent.narrowing import StreamNarrowing
from forethought.errors import CallError
from forethought.llm.dispatch import render_output
from forethought.llm.events import ToolCallArgumentsDelta, ToolCallStarted
from forethought.predictors.base import (
    ObservedCall,
    Prediction,
    PredictionContext,
    Predictor,
    SampleVotes,
    SamplingPredictor,
    StreamingPredictor,
    reports_failure,
)
from forethought.telemetry import Event, EventKind

__all__ = ["CHAIN_SOURCE", "AsyncChainingPredictor", "ChainingPredictor", "GenerationAware", "GuessFeed"]

CHAIN_SOURCE = "chain"
GENERATION_EWMA_WEIGHT = 0.3
_CHAINABLE = frozenset({Effect.PURE, Effect.READ_ONLY})
_log = logging.getLogger(__name__)


@runtime_checkable
class ChainingPredictor(Predictor, Protocol):
    """A predictor that can say what follows a call it has not seen the model make yet."""

    def predict_after(self, context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
        """The calls likely to follow ``speculated`` (a call with its speculative output)."""


@runtime_checkable
class AsyncChainingPredictor(Predictor, Protocol):
    """A chaining predictor that answers asynchronously (e.g. one in a worker process)."""

    async def predict_after_async(self, context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
        """The calls likely to follow ``speculated`` (a call with its speculative output)."""


@runtime_checkable
class GenerationAware(Protocol):
    """A predictor that wants to know how long each main-model step took (to measure what it costs)."""

    def note_generation(self, session_id: str, seconds: float, tokens: int,
                        first_token_s: float | None = None) -> None:
        """The main model's step in ``session_id`` took ``seconds`` for ``tokens`` completion tokens, its
        first token ``first_token_s`` after it began (``None``: not known)."""


class GuessFeed:
    """One agent's predictors, feeding one session step by step."""

    def __init__(self, session: Session, predictors: list[Predictor], *, chain_depth: int = 1,
                 on_ticket: Callable[[SpeculationTicket], object] | None = None,
                 is_private: Callable[[str], bool] | None = None) -> None:
        self.session = session
        self._private_name = is_private
        """Whether a tool name is private, where the session's tools do not tell all (the daemon: a linked tool
        its session does not hold); the session's tools decide otherwise."""
        self.predictors = predictors
        self.chain_depth = max(0, chain_depth)
        self.on_ticket = on_ticket
        self.generation_s: float | None = None
        self._step = 0
        self._started = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._covered = 0.0
        self._offered: set[str] = set()
        self._priors: dict[str, float] = {}  # this step's guesses from predictors that do not sample: P(hit)
        self.chained = 0
        self.withdrawn = 0
        self._samplers: dict[int, tuple[Predictor, bool]] = {}  # id -> (predictor, samples?): protocol checks are slow
        self._samplers_left = 0  # this step's sampling predictors that have not ended yet
        self._step_votes: list[SampleVotes] = []
        self._combine = session.runtime.policy.combine_evidence
        self._learnable: tuple[PredictionContext, PredictionContext] | None = None
        """The latest context learnt in, and the same without private calls (:meth:`learn`)."""
        self._clock = session.runtime.clock
        self.narrowing = StreamNarrowing(session, self.eta_s, on_ticket=on_ticket)
        """The step's guesses narrowed by the model's streamed call (:meth:`streamed`)."""
        self.deferral = Deferral(session, self.narrowing,
                                 [p for p in predictors if self._is_sampler(p) and isinstance(p, SampleCounting)],
                                 self._chain_held, on_ticket=on_ticket)
        """The step's weak guesses held until its samples end (:mod:`forethought.agent.deferral`)."""

    def start(self, context: PredictionContext) -> None:
        """A step begins: run every predictor on ``context`` (with the current load level).

        Cheap predictors (not streaming) run first; the streaming ones (a speculator model, which costs a
        generation per sample) start once those have offered their guesses, told how likely the call is
        already covered (``context.covered``: the calibrated chances of this step's distinct guesses).
        """
        self._step += 1
        self._started = self._clock.monotonic()
        self._covered = 0.0
        self._offered = set()
        self._priors = {}
        self.deferral.reset()
        self._step_votes = []
        self.narrowing.reset()
        level = self.session.runtime.pressure().level
        if level != context.load_level:
            context = dataclasses.replace(context, load_level=level)
        cheap = [p for p in self.predictors if not isinstance(p, StreamingPredictor)]
        costly = [p for p in self.predictors if isinstance(p, StreamingPredictor)]
        self._samplers_left = sum(1 for p in costly if self._is_sampler(p))
        self._tasks = [asyncio.create_task(self._run(p, context)) for p in cheap]
        if costly:
            self._tasks.append(asyncio.create_task(self._run_after(list(self._tasks), costly, context)))

    async def _run_after(self, first: list[asyncio.Task[None]], costly: Sequence[Predictor],
                         context: PredictionContext) -> None:
        if first:
            await asyncio.wait(first)
        covered = dataclasses.replace(context, covered=min(1.0, self._covered))
        await asyncio.gather(*(self._run(p, covered) for p in costly))

    def stop(self, generation_s: float | None = None, completion_tokens: int = 0,
             first_token_s: float | None = None) -> None:
        """The model's message ended (after ``generation_s`` seconds, ``completion_tokens`` generated, the
        first token after ``first_token_s``): no more guesses for this step; predictors that measure their
        cost to the main model are told."""
        self._step += 1
        if generation_s is not None:
            for predictor in self.predictors:
                if isinstance(predictor, GenerationAware):
                    predictor.note_generation(self.session.id, generation_s, completion_tokens, first_token_s)
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        if self._samplers_left > 0:
            self.deferral.step_ended_early(self._elapsed())
        self._samplers_left = 0
        self.deferral.reset()
        self.narrowing.reset()
        if generation_s is not None and generation_s >= 0:
            old = self.generation_s
            self.generation_s = generation_s if old is None else old + GENERATION_EWMA_WEIGHT * (generation_s - old)

    def streamed(self, event: ToolCallStarted | ToolCallArgumentsDelta) -> None:
        """The model's message is streaming a call (its name, or a fragment of its arguments): guesses that
        still fit it gain their conditional chance and may run now
        (:class:`~forethought.agent.narrowing.StreamNarrowing`)."""
        if not self._combine or (self.narrowing.active and self.session.runtime.pressure().level >= 1.0):
            return
        try:
            if isinstance(event, ToolCallStarted):
                self.narrowing.started(event.index, event.name)
            else:
                self.narrowing.delta(event.index, event.text)
        except Exception as exc:  # a guess's odd values must never end the agent's run: narrowing stops
            _log.warning("narrowing failed and is off for this step: %s", type(exc).__name__)
            self.narrowing.reset()
            self.session.runtime.telemetry.emit(
                Event(EventKind.PREDICTOR_FAILED, self.session.id, "", "", "narrowing", detail=type(exc).__name__))

    async def cancel(self) -> None:
        """Stop and wait for the predictor tasks to end (the step failed)."""
        tasks = self._tasks
        self.stop()
        for task in tasks:
            if not task.done():
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def eta_s(self) -> float | None:
        """Seconds until the model's call is expected (``None`` until one step has been timed)."""
        if self.generation_s is None:
            return None
        return max(0.0, self.generation_s - (self._clock.monotonic() - self._started))

    def _limit(self, count: int) -> int:
        level = self.session.runtime.pressure().level
        return 0 if level >= 1.0 else math.ceil(count * (1.0 - max(0.0, level)))

    async def _run(self, predictor: Predictor, context: PredictionContext) -> None:
        """Feed one predictor's guesses as they arrive; a predictor that raises is reported and ignored for
        the rest of this step (a PREDICTOR_FAILED event and one warning naming it)."""
        try:
            if isinstance(predictor, StreamingPredictor):
                async for prediction in predictor.predict_stream(context):
                    self.offer(prediction, predictor, context)
                if self._is_sampler(predictor):
                    votes = cast(SamplingPredictor, predictor).votes(context.session_id) if self._combine else None
                    if votes is not None:
                        self._revise(votes)
                    self._sampler_done(votes)
            else:
                predictions = list(await predictor.predict(context))
                for prediction in predictions[: self._limit(len(predictions))]:
                    self.offer(prediction, predictor, context)
        except Exception as exc:
            if self._is_sampler(predictor):
                self._sampler_done(None)  # no evidence is coming from it
            self._failed(predictor, exc, "failed and is ignored for this step")

    def learn(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Every predictor learns an authoritative call; one that raises loses that call only (logged and
        reported as PREDICTOR_FAILED), never the agent's run. A call of a private tool, or of one with private
        arguments, is learnt by none, and the context a call is learnt in holds none of them either (their
        calls and outputs are taken out of its history and messages: :mod:`~forethought.agent.learnable`): a
        predictor keeps what it learns (in a pattern store, on disk or in Redis), and private means absent
        from every store (docs/design.md)."""
        if self._is_private(observed.call.name):
            return
        context = self._learnable_context(context)
        for predictor in self.predictors:
            try:
                predictor.observe(context, observed)
            except Exception as exc:
                self._failed(predictor, exc, f"failed to learn a call of {observed.call.name} and skipped it")

    def _is_private(self, name: str) -> bool:
        if self._private_name is not None:
            return self._private_name(name)
        known = self.session.tools.get(name)
        return known is not None and known.hide_key

    def _learnable_context(self, context: PredictionContext) -> PredictionContext:
        """``context`` without private calls, worked out once per context (parallel calls share one)."""
        last = self._learnable
        if last is not None and last[0] is context:
            return last[1]
        cleaned = learnable(context, self._is_private)
        self._learnable = (context, cleaned)
        return cleaned

    def _failed(self, predictor: Predictor, exc: Exception, what: str) -> None:
        _log.warning("predictor %s %s: %s", predictor.name, what, type(exc).__name__)
        self.session.runtime.telemetry.emit(
            Event(EventKind.PREDICTOR_FAILED, self.session.id, "", "", predictor.name, detail=type(exc).__name__))

    def offer(self, prediction: Prediction, predictor: Predictor, context: PredictionContext,
              depth: int = 0) -> None:
        """Speculate one prediction (or warm its tool, for a hint); chain past it when it can be chained."""
        session = self.session
        if not prediction.executable:
            session.prepare(prediction.call.name, prediction.call.arguments, prediction.source or predictor.name)
            return
        source = CHAIN_SOURCE if depth else (prediction.source or predictor.name)
        confidence = prediction.confidence
        sampler = self._is_sampler(predictor)
        if not depth and self._priors and sampler and self._combine:
            confidence = self._discounted(prediction.call, confidence)
        if not depth and self._samplers_left and self._combine and not sampler and self.deferral.timing is not None:
            held = self.deferral.hold(prediction, predictor, context, source, confidence, self.eta_s(),
                                      self._elapsed(), self._covered)
            if held is not None:
                self._priors[held[0]] = max(held[1], self._priors.get(held[0], 0.0))
                return
        ticket = session.speculate(prediction.call, source=source, confidence=confidence, eta_s=self.eta_s())
        if not depth and (ticket.status != "rejected" or ticket.priced_out):
            p_hit = session.runtime.calibration.p_hit(source, confidence)  # a number: speculate checked it
            key = ticket.key
            if key is not None and ticket.status != "rejected":
                if key not in self._offered:
                    self._offered.add(key)  # one call, one chance: the model's next call is one of them at most
                    self._covered += p_hit
                if not sampler:
                    self._priors[key] = max(p_hit, self._priors.get(key, 0.0))
            if self._combine:  # launched, joined or priced out: narrowing may revive it
                self.narrowing.add(dataclasses.replace(prediction, confidence=confidence), source, p_hit,
                                   launched=ticket.status != "rejected")
        if self.on_ticket is not None and ticket.key is not None and ticket.status != "rejected":
            self.on_ticket(ticket)
        if ticket.launched and ticket.key is not None:
            self._maybe_chain(ticket.key, prediction, predictor, context, depth)

    def _maybe_chain(self, key: str, prediction: Prediction, predictor: Predictor, context: PredictionContext,
                     depth: int) -> None:
        """Chain past the speculation under ``key`` when its predictor and tool allow it."""
        if depth < self.chain_depth and isinstance(predictor, ChainingPredictor | AsyncChainingPredictor):
            t = self.session.tools.get(prediction.call.name)
            if t is not None and t.effect in _CHAINABLE:
                self._chain_after(key, prediction, predictor, context, depth)

    def _is_sampler(self, predictor: Predictor) -> bool:
        """Whether ``predictor`` samples (a protocol check is slow: it is made once per predictor)."""
        known = self._samplers.get(id(predictor))
        if known is None or known[0] is not predictor:  # the object is kept, so its id is not reused
            known = self._samplers[id(predictor)] = (predictor, isinstance(predictor, SamplingPredictor))
        return known[1]

    def _sampler_done(self, votes: SampleVotes | None) -> None:
        """One of the step's sampling predictors has ended (``votes``: what its samples said; ``None``:
        nothing). Once every one has, the step's samples are timed and what was held is released."""
        if votes is not None and votes.samples:
            self._step_votes.append(votes)
        self._samplers_left = max(0, self._samplers_left - 1)
        if not self._samplers_left:
            self.deferral.samples_ended(self._step_votes, self._elapsed(), self.eta_s())

    def _elapsed(self) -> float:
        return max(0.0, self._clock.monotonic() - self._started)

    def _chain_held(self, key: str, held: Held) -> None:
        self._maybe_chain(key, held.prediction, held.predictor, held.context, 0)

    def _discounted(self, call: ToolCall, confidence: float) -> float:
        """A sample's confidence in a call the other predictors did not propose, given that they already
        cover the model's call with chance ``c``: its odds times ``1 - c`` (the call is one of theirs or
        this one, not both). The calibration, binned by this figure, then learns how often such a guess
        hits; a sample that agrees with a guess already made keeps its own confidence."""
        if not 0.0 < confidence < 1.0:  # NaN fails this too: the session rejects it as it is
            return confidence
        try:
            key = self.session.resolve(call)[2]
        except CallError:
            return confidence  # the session rejects it
        if key in self._priors:
            return confidence
        uncovered = max(0.0, 1.0 - sum(self._priors.values()))
        odds = confidence / (1.0 - confidence) * uncovered
        return odds / (1.0 + odds)

    def _revise(self, votes: SampleVotes) -> None:
        """A sampling predictor's samples for this step have all ended: every guess of this step from the
        other predictors that no sample proposed is less likely now; the session re-prices it and withdraws
        it when it is no longer worth its tool time (:meth:`Session.revise`)."""
        if not self._priors or not votes.samples:
            return
        session = self.session
        proposed = proposed_keys(session, votes)
        eta = self.eta_s()
        for key, prior in self._priors.items():
            support = sum(1 for keys in proposed if key in keys)
            p_hit = votes.revised(prior, support)
            if p_hit < prior:
                withdrawn = session.revise(key, p_hit, eta)
                self.withdrawn += withdrawn
                self.narrowing.revise(key, p_hit, withdrawn)

    def _chain_after(self, key: str, parent: Prediction, predictor: ChainingPredictor | AsyncChainingPredictor,
                     context: PredictionContext, depth: int) -> None:
        step = self._step

        def settled(result: SettledSpeculation) -> None:
            if step != self._step or not result.ok:
                return
            output = render_output(result.value)
            observed = ObservedCall(parent.call, output, not reports_failure(result.value))
            if isinstance(predictor, AsyncChainingPredictor):
                task = asyncio.get_running_loop().create_task(self._chain_async(predictor, observed, parent,
                                                                                context, depth, step))
                self._tasks.append(task)  # cancelled with the step's other predictor tasks
                return
            try:
                successors = predictor.predict_after(context, observed)
            except Exception as exc:
                self._chain_failed(predictor, exc)
                return
            self._offer_successors(successors, parent, predictor, context, depth)

        self.session.on_settled(key, settled)

    async def _chain_async(self, predictor: AsyncChainingPredictor, observed: ObservedCall, parent: Prediction,
                           context: PredictionContext, depth: int, step: int) -> None:
        try:
            successors = await predictor.predict_after_async(context, observed)
        except Exception as exc:
            self._chain_failed(predictor, exc)
            return
        if step == self._step:  # the step is still generating
            self._offer_successors(successors, parent, predictor, context, depth)

    def _offer_successors(self, successors: Sequence[Prediction], parent: Prediction, predictor: Predictor,
                          context: PredictionContext, depth: int) -> None:
        for successor in successors[: self._limit(len(successors))]:
            self.chained += 1
            self.offer(dataclasses.replace(successor, confidence=parent.confidence * successor.confidence),
                       predictor, context, depth + 1)

    @staticmethod
    def _chain_failed(predictor: Predictor, exc: Exception) -> None:
        _log.warning("predictor %s failed to chain and is ignored for this call: %s", predictor.name,
                     type(exc).__name__)
