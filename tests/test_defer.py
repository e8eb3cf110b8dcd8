"""Deferring a cheap guess until the step's samples have spoken: held when it is worth more then than now,
run by a sample that proposes it, released at its revised chance when none does (or at once when no
samples come), its outcome learnt exactly once whichever way it ends."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import Gate, spin
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.agent.deferral import Deferral, SampleCounting, SampleTiming
from forethought.agent.feed import GuessFeed
from forethought.predictors.base import Prediction, PredictionContext
from forethought.predictors.model import ModelSpeculator
from forethought.telemetry import EventKind
from forethought.testing import FixedPressure
from test_evidence import Listed, Sampler, ctx, guess
from test_evidence import tools as evidence_tools

FIND_X = ToolCall("find", {"q": "x"})
READ_1 = ToolCall("read", {"id": "1"})
TIMED = SampleTiming(0.0, 3, 0.7)
"""As if an earlier step's three samples had ended at once, each with a 0.7 chance of the call."""


def tools(gate: Gate, ran: list[str]) -> list[Any]:
    """The evidence tests' two reads, and a tool that may never run early."""
    @tool(effect=Effect.DESTRUCTIVE, expected_s=1.0)
    async def send(to: str) -> str:
        ran.append(f"send {to}")
        return "sent"

    return [*evidence_tools(gate, ran), send]


class CountingSampler(Sampler):
    """The scripted sampler, saying how many samples it draws (as a speculator model does)."""

    def samples_under(self, load_level: float, covered: float = 0.0) -> int:
        return len(self.samples)


class FailingSampler(CountingSampler):
    async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
        raise RuntimeError("speculator endpoint down")
        yield  # pragma: no cover - makes this an async generator


class Setup:
    def __init__(self, predictors: Sequence[Any], *, policy: Policy | None = None, level: float = 0.0,
                 timing: SampleTiming | None = TIMED, generation_s: float = 10.0) -> None:
        self.gate, self.ran = Gate(), list[str]()
        self.runtime = Runtime(tools(self.gate, self.ran), policy or Policy(backoff=False),
                               pressure=FixedPressure(level))
        self.session = self.runtime.session()
        self.events: list[Any] = []
        self.runtime.telemetry.subscribe(self.events.append)
        self.feed = GuessFeed(self.session, list(predictors))
        self.feed.deferral.timing = timing  # as if an earlier step's samples had been timed
        self.feed.generation_s = generation_s

    async def step(self) -> None:
        self.feed.start(ctx(self.session.id))
        await spin(30)

    def kinds(self, source: str) -> list[EventKind]:
        return [e.kind for e in self.events if e.source == source
                and e.kind in (EventKind.DEFERRED, EventKind.LAUNCHED, EventKind.DEDUPLICATED, EventKind.REJECTED)]

    def learnt(self, source: str) -> list[tuple[int, float]]:
        return [(row.guesses, row.hit_rate) for row in self.runtime.calibration.table([source])]

    async def close(self) -> None:
        self.gate.open()
        self.feed.stop(0.5)
        await self.session.close()


def test_the_fake_samplers_say_how_many_samples_they_draw() -> None:
    assert isinstance(CountingSampler([[READ_1]]), SampleCounting)
    assert isinstance(ModelSpeculator(object(), "m"), SampleCounting)  # type: ignore[arg-type]
    assert not isinstance(Sampler([]), SampleCounting)


@given(st.floats(0.0, 1.0), st.integers(0, 8), st.integers(0, 8))
def test_support_is_the_chance_one_sample_finds_the_call_and_grows_with_samples(alpha: float, n: int,
                                                                               more: int) -> None:
    timing = SampleTiming(0.1, n, alpha)
    s = timing.support()
    assert 0.0 <= s <= 1.0 and not math.isnan(s)
    assert s == pytest.approx(1.0 - (1.0 - alpha) ** n)
    assert timing.support(n + more) >= s - 1e-12
    assert timing.support(0) == 0.0


async def test_a_weak_guess_waits_for_the_samples_and_runs_under_the_sample_that_proposes_it() -> None:
    s = Setup([Listed([guess("find", 0.3, q="x")]), CountingSampler([[FIND_X], [FIND_X], [READ_1]])])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED] and s.feed.deferral.deferred == 1
    assert EventKind.LAUNCHED in s.kinds("model")
    assert s.ran.count("find x") == 1  # one run: the sample's
    (deferred,) = [e for e in s.events if e.kind is EventKind.DEFERRED]
    assert "after the samples" in deferred.detail and deferred.confidence == 0.3
    s.gate.open()
    assert (await s.session.execute_detailed(FIND_X)).kind == "hit"
    assert s.learnt("listed") == [(1, 1.0)]  # the held guess was right, and that was learnt
    s.session.end_turn()
    assert s.learnt("listed") == [(1, 1.0)]  # once
    assert s.session.stats().deferred == 1
    await s.close()


async def test_a_held_guess_no_sample_proposed_never_runs_and_is_learnt_as_a_miss_at_the_turn_end() -> None:
    s = Setup([Listed([guess("find", 0.3, q="x")]), CountingSampler([[READ_1], [READ_1], [READ_1]])])
    await s.step()
    # prior 0.3, odds 0.43 * 0.3 ** 3 -> p 0.011: worth less than its waste, so it stays unrun
    assert s.kinds("listed") == [EventKind.DEFERRED]
    assert "find x" not in s.ran
    s.gate.open()
    assert (await s.session.execute_detailed(READ_1)).kind == "hit"
    assert s.learnt("listed") == []
    s.session.end_turn()
    assert s.learnt("listed") == [(1, 0.0)]
    await s.close()


@pytest.mark.parametrize("case", ["no samples drawn", "sampler failed"])
async def test_a_held_guess_runs_with_its_own_chance_when_no_evidence_comes(case: str) -> None:
    sampler = CountingSampler([]) if case == "no samples drawn" else FailingSampler([[READ_1]] * 3)
    if case == "no samples drawn":
        sampler.samples_under = lambda load_level, covered=0.0: 3  # type: ignore[method-assign]
    s = Setup([Listed([guess("find", 0.3, q="x")]), sampler])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED, EventKind.LAUNCHED]
    assert s.ran == ["find x"]
    s.gate.open()
    assert (await s.session.execute_detailed(FIND_X)).kind == "hit"
    assert s.learnt("listed") == [(1, 1.0)]  # learnt as the speculation ended, not twice
    s.session.end_turn()
    assert s.learnt("listed") == [(1, 1.0)]
    await s.close()


async def test_a_held_guess_the_samples_weakened_but_left_worth_running_runs_at_its_revised_price() -> None:
    # one weak sample (alpha 0.2) against it: odds 0.6 / 0.4 * 0.8 -> p 0.545, still worth a 1 s tool
    sampler = CountingSampler([[READ_1]], alpha=0.2)
    # held: it expected strong evidence (alpha 0.99), then the samples turned out weak
    s = Setup([Listed([guess("find", 0.6, q="x")]), sampler], timing=SampleTiming(0.0, 1, 0.99))
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED, EventKind.LAUNCHED]
    assert s.ran.count("find x") == 1
    await s.close()


@pytest.mark.parametrize("case", ["confident guess", "combine off", "under load", "first step", "no sampler",
                                  "never early", "priced out", "samples come too late"])
async def test_a_guess_that_cannot_gain_by_waiting_is_not_held(case: str) -> None:
    confidence = {"confident guess": 0.98, "priced out": 0.02}.get(case, 0.3)
    name, arguments = ("send", {"to": "bob"}) if case == "never early" else ("find", {"q": "x"})
    predictors: list[Any] = [Listed([guess(name, confidence, **arguments)])]
    if case != "no sampler":
        predictors.append(CountingSampler([[READ_1], [READ_1], [READ_1]]))
    policy = Policy(backoff=case == "under load", combine_evidence=case != "combine off")
    timing = None if case == "first step" else SampleTiming(20.0 if case == "samples come too late" else 0.0, 3, 0.7)
    s = Setup(predictors, policy=policy, level=0.3 if case == "under load" else 0.0, timing=timing)
    await s.step()
    assert EventKind.DEFERRED not in s.kinds("listed") and s.feed.deferral.deferred == 0
    assert s.kinds("listed")[:1] == [EventKind.REJECTED if case in ("never early", "priced out")
                                     else EventKind.LAUNCHED]
    await s.close()


async def test_held_guesses_are_not_counted_as_cover_so_the_samples_are_drawn_in_full() -> None:
    sampler = CountingSampler([[FIND_X], [READ_1], [READ_1]])
    s = Setup([Listed([guess("find", 0.3, q="x")]), sampler])
    await s.step()
    assert sampler.contexts[0].covered == 0.0
    await s.close()


async def test_the_step_ending_before_the_samples_drops_what_was_held_and_still_learns_it() -> None:
    class Slow(CountingSampler):
        async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
            await Gate().wait()  # never ends by itself
            yield Prediction(READ_1, 0.7, "model")  # pragma: no cover

    s = Setup([Listed([guess("find", 0.3, q="x")]), Slow([[READ_1]] * 3)])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    s.feed.stop(0.5)  # the model's message is done: nothing held runs now
    await spin(10)
    assert "find x" not in s.ran
    s.gate.open()
    assert (await s.session.execute_detailed(FIND_X)).kind == "miss"
    assert s.learnt("listed") == [(1, 1.0)]
    await s.close()


@pytest.mark.parametrize("seed", range(12))
async def test_every_guess_is_run_or_learnt_exactly_once(seed: int) -> None:
    """Many mixes of cheap guesses and samples: each cheap guess either ran (and is learnt as its run
    ends) or was held and never ran (learnt at its call or the turn's end), never both, never lost."""
    import random
    rng = random.Random(seed)
    queries = ["a", "b", "c", "d"]
    cheap = [guess("find", rng.choice([0.05, 0.15, 0.3, 0.5, 0.8]), q=q) for q in rng.sample(queries, 3)]
    samples = [[ToolCall("find", {"q": rng.choice(queries)})] for _ in range(rng.randint(0, 3))]
    sampler = CountingSampler(samples, alpha=rng.choice([0.3, 0.7, 0.9]))
    s = Setup([Listed(cheap), sampler], timing=SampleTiming(0.0, 3, rng.choice([0.5, 0.7, 0.9])))
    await s.step()
    s.gate.open()
    truth = ToolCall("find", {"q": rng.choice(queries)})
    await s.session.execute_detailed(truth)
    s.feed.stop(0.5)
    s.session.end_turn()
    learnt = sum(n for n, _ in s.learnt("listed"))
    admitted = [e for e in s.events if e.source == "listed" and e.kind in (EventKind.LAUNCHED, EventKind.DEDUPLICATED)]
    deferred = [e for e in s.events if e.source == "listed" and e.kind is EventKind.DEFERRED]
    rejected = [e for e in s.events if e.source == "listed" and e.kind is EventKind.REJECTED]
    # every cheap guess is offered once: it is admitted at once, held, or refused
    assert len(admitted) + len(deferred) + len(rejected) - sum(
        1 for e in admitted if any(d.key_hash == e.key_hash for d in deferred)) == len(cheap)
    assert learnt == len(admitted) + len(deferred) - sum(
        1 for e in admitted if any(d.key_hash == e.key_hash for d in deferred))
    await s.session.close()


# --- regressions found in review, and the parts each test above leaves out ---------------------------

class GatedSampler(CountingSampler):
    """Proposes its first sample's calls at once, then ends only when ``release`` opens."""

    def __init__(self, samples: Sequence[Sequence[ToolCall]], **kwargs: Any) -> None:
        super().__init__(samples, **kwargs)
        self.release = Gate()

    async def predict_stream(self, context: PredictionContext) -> AsyncIterator[Prediction]:
        self.contexts.append(context)
        for call in self.samples[0]:
            yield Prediction(call, self.confidence, self.name)
        await self.release.wait()


class NoVotes(CountingSampler):
    """Draws nothing and says so as a speculator model does: no votes at all."""

    def votes(self, session_id: str) -> None:
        return None


async def test_a_held_guess_whose_call_came_before_the_samples_ended_is_not_run_again() -> None:
    sampler = GatedSampler([[FIND_X], [READ_1], [READ_1]])
    s = Setup([Listed([guess("find", 0.3, q="x")]), sampler])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    s.gate.open()
    assert (await s.session.execute_detailed(FIND_X)).kind == "hit"  # served early, by the sample's run
    sampler.release.open()
    await spin(20)
    assert s.ran.count("find x") == 1 and s.kinds("listed") == [EventKind.DEFERRED]
    s.session.end_turn()
    assert s.learnt("listed") == [(1, 1.0)]  # learnt once, at the call
    await s.close()


async def test_a_second_weak_guess_of_a_held_call_is_held_too() -> None:
    s = Setup([Listed([guess("find", 0.3, q="x")]), Listed([guess("find", 0.25, "other", q="x")]),
               CountingSampler([[READ_1], [READ_1], [READ_1]])])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED] and s.kinds("other") == [EventKind.DEFERRED]
    assert "find x" not in s.ran and s.feed.deferral.deferred == 2
    assert not [e for e in s.events if e.kind is EventKind.WITHDRAWN]
    s.session.end_turn()
    assert s.learnt("listed") == [(1, 0.0)] and s.learnt("other") == [(1, 0.0)]
    await s.close()


async def test_samples_still_running_at_the_steps_end_raise_the_delay_until_nothing_is_held() -> None:
    sampler = GatedSampler([[READ_1], [READ_1], [READ_1]])
    s = Setup([Listed([guess("find", 0.3, q="x")]), sampler], generation_s=10.0)
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    s.feed._started -= 20.0  # the step has run 20 s (white-box: no sleeping) and the samples still have not ended
    s.feed.stop(20.0)
    timing = s.feed.deferral.timing
    assert timing is not None and timing.delay_s == pytest.approx(0.3 * 20.0, rel=0.01)
    for _ in range(8):
        s.feed.start(ctx(s.session.id))
        await spin(10)
        s.feed._started -= 20.0
        s.feed.stop(20.0)
    timing = s.feed.deferral.timing
    assert timing is not None and timing.delay_s > 15.0
    s.session.end_turn()
    s.events.clear()
    s.feed.generation_s = 10.0
    await s.step()  # samples now take longer than the model: waiting hides nothing, so it runs at once
    assert s.kinds("listed") == [EventKind.LAUNCHED]
    await s.close()


async def test_with_two_speculators_a_held_guess_waits_for_both_and_weighs_both() -> None:
    quick = CountingSampler([[READ_1]], alpha=0.5)
    slow = GatedSampler([[READ_1], [READ_1]], alpha=0.5)
    slow.name = "model2"
    s = Setup([Listed([guess("find", 0.3, q="x")]), quick, slow], timing=SampleTiming(0.0, 3, 0.7))
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    assert "find x" not in s.ran  # the first speculator alone does not release it
    slow.release.open()
    await spin(20)
    # odds 0.43 * 0.5 (quick) * 0.25 (slow) -> p 0.05: worth less than its waste, so it never runs
    assert "find x" not in s.ran
    assert not [e for e in s.events if e.kind in (EventKind.WITHDRAWN, EventKind.WASTED)]
    timing = s.feed.deferral.timing
    assert timing is not None and timing.samples == 3 and timing.alpha == pytest.approx(0.5)
    await s.close()


class ChainingListed(Listed):
    """A cheap predictor that also says what follows a call (reads the id a find gives)."""

    def predict_after(self, context: PredictionContext, speculated: Any) -> list[Prediction]:
        return [guess("read", 0.9, id=str(speculated.output))]


async def test_a_held_guess_run_by_a_sample_still_gets_its_own_chain() -> None:
    s = Setup([ChainingListed([guess("find", 0.3, q="x")]), CountingSampler([[FIND_X], [FIND_X], [READ_1]])])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    s.gate.open()
    await spin(30)
    assert "read id-x" in s.ran and s.feed.chained == 1
    await s.close()


async def test_a_speculator_whose_sample_count_fails_does_not_cost_the_cheap_guesses() -> None:
    sampler = CountingSampler([[READ_1], [READ_1], [READ_1]])

    def broken(load_level: float, covered: float = 0.0) -> int:
        raise RuntimeError("speculator's own bug")

    sampler.samples_under = broken  # type: ignore[method-assign]
    s = Setup([Listed([guess("find", 0.3, q="x"), guess("read", 0.9, id="2")]), sampler])
    await s.step()
    assert not [e for e in s.events if e.kind is EventKind.PREDICTOR_FAILED]
    assert s.kinds("listed") == [EventKind.DEFERRED, EventKind.LAUNCHED]  # held on the last count; the 0.9 runs
    await s.close()


async def test_a_guess_offered_once_the_samples_have_ended_is_not_held() -> None:
    s = Setup([Listed([]), CountingSampler([[READ_1], [READ_1], [READ_1]])])
    await s.step()
    s.feed.offer(guess("find", 0.3, q="x"), s.feed.predictors[0], ctx(s.session.id))
    assert s.kinds("listed") == [EventKind.LAUNCHED]
    await s.close()


@pytest.mark.parametrize("case", ["min confidence", "closed", "certain"])
async def test_a_guess_the_session_would_refuse_or_need_not_weigh_is_not_reported_as_deferred(case: str) -> None:
    policy = Policy(backoff=False, min_confidence=0.5 if case == "min confidence" else 0.0)
    confidence = 0.995 if case == "certain" else 0.3
    s = Setup([Listed([guess("find", confidence, q="x")]), CountingSampler([[READ_1], [READ_1], [READ_1]])],
              policy=policy, timing=SampleTiming(0.0, 3, 0.999))
    if case == "closed":
        await s.session.close()
        assert s.session.defer(FIND_X, "listed", 0.3) is None
    await s.step()
    assert EventKind.DEFERRED not in s.kinds("listed") and s.session.stats().deferred == 0
    assert s.kinds("listed")[:1] == [EventKind.LAUNCHED if case == "certain" else EventKind.REJECTED]
    await s.close()


async def test_a_real_step_times_its_samples_and_the_next_step_holds() -> None:
    s = Setup([Listed([guess("find", 0.3, q="x")]), CountingSampler([[READ_1], [READ_1], [READ_1]], alpha=0.7)],
              timing=None)
    await s.step()
    assert s.kinds("listed") == [EventKind.LAUNCHED]  # nothing timed yet: nothing held
    timing = s.feed.deferral.timing
    assert timing is not None and timing.samples == 3 and timing.alpha == pytest.approx(0.7)
    assert timing.delay_s >= 0.0
    s.gate.open()
    await s.session.execute(READ_1)
    s.feed.stop(10.0)
    s.session.end_turn()
    s.events.clear()
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED]
    await s.close()


@pytest.mark.parametrize(("drawn", "held"), [(1, False), (3, True)])
async def test_what_the_speculator_will_draw_decides_not_what_it_drew_last_time(drawn: int, held: bool) -> None:
    sampler = CountingSampler([[READ_1]] * drawn)
    s = Setup([Listed([guess("find", 0.3, q="x")]), sampler], timing=SampleTiming(0.0, 4 - drawn, 0.7))
    await s.step()
    # support 0.7 (one sample) leaves 0.21 s against 0.23 s now; 0.973 (three) gives 0.29 s
    assert (s.kinds("listed")[:1] == [EventKind.DEFERRED]) is held
    await s.close()


async def test_a_speculator_with_no_votes_at_all_releases_what_was_held_at_its_own_chance() -> None:
    s = Setup([Listed([guess("find", 0.3, q="x")]), NoVotes([[READ_1]] * 3)])
    await s.step()
    assert s.kinds("listed") == [EventKind.DEFERRED, EventKind.LAUNCHED]
    await s.close()


def test_a_step_ending_early_only_ever_raises_the_delay() -> None:
    deferral = Deferral.__new__(Deferral)
    deferral.timing = SampleTiming(1.0, 3, 0.7)
    deferral.step_ended_early(0.5)
    assert deferral.timing.delay_s == 1.0
    deferral.step_ended_early(11.0)
    assert deferral.timing.delay_s == pytest.approx(4.0)
    deferral.timing = None
    deferral.step_ended_early(3.0)
    assert deferral.timing is None
