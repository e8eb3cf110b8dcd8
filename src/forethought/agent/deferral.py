"""Deferring a weak guess until the step's samples have spoken, when it is worth more then than now.

Beside a sampling predictor (a speculator model) a cheap guess may be worth more once the step's samples
have ended than at once. Run now, it is worth ``p * hide_now - (1 - p) * w * run`` (the session's price);
held until the samples end (``delay``: a moving average of how long after a step's start its samples had
all ended) and run only if some sample proposes it, it is worth about ``p * s * hide_then``, where
``s = 1 - (1 - alpha) ** n`` is the chance that one of the ``n`` samples the speculators will draw
(:meth:`SampleCounting.samples_under` at the cover the step's launched guesses give, else as many as last
time) proposes the model's call, and ``hide_then`` the tool time still hideable then. A wrong sample is
taken to land on this particular wrong guess rarely, as in :meth:`SampleVotes.revised`. When the second
figure is larger the guess is held: DEFERRED (both figures in its detail), not counted as cover, so the
samples are drawn as if it were not there. A sample that proposes it runs it under the sample's source
(and the guess's own chain follows that run); once every sampler of the step has ended, a held guess still
pending that no sample's guess runs for is offered at its revised chance when that is still worth its tool
time, at once with its own chance when no samples came (none drawn, or the speculator failed). A guess
whose call came meanwhile (early dispatch) is not run again. Its outcome is learnt once, like a withdrawn
guess's (:meth:`Session.defer`), or as its speculation ends if it ran after all (:meth:`Session.undefer`).

Nothing is held before one step's samples have been timed, while no sampler of the step is still running,
under load (samples are then thinned and may not come), for a certain guess, or for one the session would
refuse outright (:meth:`Session.refusal`). A step that ends before its samples do raises the delay (it
took at least that long), so where samples take most of a step nothing is held.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from forethought._core.entry import SpeculationTicket
from forethought._core.runtime import Session
from forethought._core.session import CERTAIN_VOTE
from forethought.agent.narrowing import StreamNarrowing
from forethought.errors import CallError
from forethought.predictors.base import Prediction, PredictionContext, Predictor, SampleVotes

__all__ = ["VOTES_EWMA_WEIGHT", "Deferral", "Held", "SampleCounting", "SampleTiming", "proposed_keys"]

VOTES_EWMA_WEIGHT = 0.3
"""Weight of the newest step in the moving average of how long a step's samples take to end."""


@runtime_checkable
class SampleCounting(Protocol):
    """A sampling predictor that can say how many samples it will draw (a speculator model)."""

    def samples_under(self, load_level: float, covered: float = 0.0) -> int:
        """Samples it draws at ``load_level`` when the call is already ``covered`` with that chance."""


@dataclass(frozen=True, slots=True)
class SampleTiming:
    """What the last steps' samples were like: how long after the step began they had all ended (a moving
    average), how many there were and how often one proposes the model's call (``alpha``; several
    speculators pooled as one per-sample rate with the same chance of all missing)."""

    delay_s: float
    samples: int
    alpha: float

    def support(self, samples: int | None = None) -> float:
        """The chance that at least one of ``samples`` (default: as many as last time) proposes the model's
        call."""
        return 1.0 - (1.0 - self.alpha) ** (self.samples if samples is None else samples)


@dataclass(frozen=True, slots=True)
class Held:
    """A cheap guess deferred until the step's samples end (with what it needs to run and chain then)."""

    prediction: Prediction
    predictor: Predictor
    context: PredictionContext
    source: str
    confidence: float
    p_hit: float


def proposed_keys(session: Session, votes: SampleVotes) -> list[set[str]]:
    """Each finished sample's calls, as ``session``'s keys (a malformed call supports nothing)."""
    proposed: list[set[str]] = []
    for calls in votes.samples:
        keys = set()
        for call in calls:
            try:
                keys.add(session.resolve(call)[2])
            except CallError:
                continue
        proposed.append(keys)
    return proposed


class Deferral:
    """One agent's held guesses for the current step, and how its samples have been timing."""

    def __init__(self, session: Session, narrowing: StreamNarrowing, counting: Sequence[SampleCounting],
                 chain: Callable[[str, Held], None],
                 on_ticket: Callable[[SpeculationTicket], object] | None = None) -> None:
        self.session = session
        self.narrowing = narrowing
        self.counting = list(counting)
        self.chain = chain
        self.on_ticket = on_ticket
        self.timing: SampleTiming | None = None
        self.deferred = 0
        """Guesses held back so far."""
        self._held: dict[str, list[Held]] = {}

    def reset(self) -> None:
        """A new step, or the model's call is known: what was held is learnt at the call or the turn's end."""
        self._held = {}

    def hold(self, prediction: Prediction, predictor: Predictor, context: PredictionContext, source: str,
             confidence: float, eta_s: float | None, elapsed_s: float, covered: float) -> tuple[str, float] | None:
        """Hold this cheap guess if it is worth more after the samples (``elapsed_s`` into the step, the
        model's call due in ``eta_s``, the launched guesses covering ``covered``); returns its key and P(hit)
        when held, ``None`` when it should be offered as usual."""
        timing = self.timing
        if timing is None or eta_s is None or not 0.0 < confidence < CERTAIN_VOTE:  # NaN fails this too
            return None
        session = self.session
        runtime = session.runtime
        name = prediction.call.name
        t = session.tools.get(name) if isinstance(name, str) else None
        if t is None or session.refusal(t, confidence) is not None:
            return None  # refused outright, as speculate would (the cheap checks first: most guesses stop here)
        now, pressure = runtime.price(t, source, confidence, eta_s)
        if pressure.level > 0.0 or not 0.0 < now.p_hit < CERTAIN_VOTE or now.value < runtime.policy.min_value_s:
            return None  # thinned samples may not come; certainty needs no evidence; refused either way
        due = max(0.0, timing.delay_s - elapsed_s)
        later = now.p_hit * timing.support(self._drawn(pressure.level, covered, timing)) * min(
            runtime.typical_run_s(t), max(0.0, eta_s - due))
        if later <= now.value:
            return None
        try:
            key = session.resolve(prediction.call)[2]
        except CallError:
            return None  # the session rejects it
        if session.has_speculation(key):
            return None  # it joins what runs
        if session.defer(prediction.call, source, confidence,
                         f"worth {1000 * later:.1f} ms after the samples against {1000 * now.value:.1f} ms now"
                         ) is None:
            return None
        self._held.setdefault(key, []).append(Held(prediction, predictor, context, source, confidence, now.p_hit))
        self.deferred += 1
        self.narrowing.add(prediction, source, now.p_hit, launched=False)
        return key, now.p_hit

    def _drawn(self, level: float, covered: float, timing: SampleTiming) -> int:
        if not self.counting:
            return timing.samples
        try:
            return sum(max(0, int(p.samples_under(level, min(1.0, covered)))) for p in self.counting)
        except Exception:  # a speculator's own failure is not this guess's: fall back to the last count
            return timing.samples

    def step_ended_early(self, elapsed_s: float) -> None:
        """The step ended ``elapsed_s`` after it began with its samples still running: they take at least
        that long now."""
        timing = self.timing
        if timing is not None and elapsed_s > timing.delay_s:
            self.timing = dataclasses.replace(
                timing, delay_s=timing.delay_s + VOTES_EWMA_WEIGHT * (elapsed_s - timing.delay_s))

    def samples_ended(self, step_votes: Sequence[SampleVotes], elapsed_s: float, eta_s: float | None) -> None:
        """Every sampler of the step has ended, ``elapsed_s`` after it began: time them, then release."""
        n, miss = 0, 1.0
        for votes in step_votes:
            if 0.0 < votes.alpha < 1.0:
                n += len(votes.samples)
                miss *= (1.0 - votes.alpha) ** len(votes.samples)
        if n:
            old = self.timing
            delay = elapsed_s if old is None else old.delay_s + VOTES_EWMA_WEIGHT * (elapsed_s - old.delay_s)
            self.timing = SampleTiming(delay, n, 1.0 - miss ** (1.0 / n))
        self._release(step_votes, eta_s)

    def _release(self, step_votes: Sequence[SampleVotes], eta_s: float | None) -> None:
        held, self._held = self._held, {}
        if not held:
            return
        session = self.session
        runtime = session.runtime
        proposed = [proposed_keys(session, votes) for votes in step_votes]
        for key, guesses in held.items():
            for h in guesses:
                if not session.is_deferred(key, h.source, h.confidence):
                    continue  # its call came already (served early or run): it was learnt then
                if session.has_speculation(key):
                    self.chain(key, h)  # a sample's guess of the same call runs it
                    break  # the others' outcomes are learnt at the call or the turn's end
                p = h.p_hit
                for votes, keys in zip(step_votes, proposed, strict=True):
                    p = votes.revised(p, sum(1 for sample in keys if key in sample))
                t = session.tools.get(h.prediction.call.name)
                if t is None:
                    continue
                priced, pressure = runtime.price(t, h.source, h.confidence, eta_s, p_hit=p)
                if p < h.p_hit:
                    self.narrowing.revise(key, p, False)
                if (pressure.level >= 1.0 and p < CERTAIN_VOTE) or priced.value < runtime.policy.min_value_s:
                    continue
                ticket = session.speculate(h.prediction.call, source=h.source, confidence=h.confidence, eta_s=eta_s)
                if ticket.status == "rejected" or ticket.key is None:
                    continue
                session.undefer(ticket.key, h.source, h.confidence)
                if p < h.p_hit:
                    session.revise(ticket.key, p, eta_s)  # priced at what the samples left of its chance
                self.narrowing.add(h.prediction, h.source, p, launched=True)
                if self.on_ticket is not None:
                    self.on_ticket(ticket)
                if ticket.launched:
                    self.chain(ticket.key, h)
