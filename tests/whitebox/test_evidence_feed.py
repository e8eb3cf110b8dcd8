"""Weighing sources together, in the feed: a speculator model's samples against the cheap predictors'
guesses of one step (a guess no sample proposed is withdrawn, one the samples do not argue against
stays, a sample call the others did not propose is discounted by their coverage), and the policy switch."""

from __future__ import annotations

import math
from typing import Any

import pytest

from conftest import Gate, settle, spin
from evidence_fakes import Listed, Sampler, ctx, guess, run_step, tools
from forethought import Policy, Runtime, ToolCall
from forethought._core.policy_file import policy_from_mapping
from forethought.agent.feed import GuessFeed
from forethought.errors import PolicyError
from forethought.predictors.base import Prediction
from forethought.telemetry import EventKind


@pytest.mark.parametrize("samples", [1, 2, 3])
async def test_a_cheap_guess_no_sample_proposed_is_withdrawn(samples: int) -> None:
    other = [ToolCall("read", {"id": str(i)}) for i in range(samples)]
    _, session, feed, events, _, gate = await run_step(
        [Listed([guess("find", 0.3, q="x")]), Sampler([[c] for c in other], alpha=0.8)])
    withdrawn = [e for e in events if e.kind is EventKind.WITHDRAWN]
    # prior 0.3 (no calibration yet): odds 0.43 * 0.2 ** n -> p 0.08, 0.017, ...: below the waste price
    assert len(withdrawn) == 1 and withdrawn[0].source == "listed" and feed.withdrawn == 1
    gate.open()
    assert (await session.execute_detailed(other[0])).kind == "hit"  # the samples' guesses stand
    feed.stop(0.5)
    await session.close()


@pytest.mark.parametrize("case", ["a sample agrees", "confident guess", "combine off", "no sample finished",
                                  "finished tool"])
async def test_a_cheap_guess_stays_where_the_samples_do_not_argue_against_it(case: str) -> None:
    mine = ToolCall("find", {"q": "x"})
    confidence = 0.95 if case == "confident guess" else 0.3
    samples: list[list[ToolCall]] = [[mine], [ToolCall("read", {"id": "1"})]]
    if case != "a sample agrees":
        samples = [[ToolCall("read", {"id": "1"})]]
    if case == "no sample finished":
        samples = []
    policy = Policy(backoff=False, combine_evidence=case != "combine off")
    gate, ran = Gate(), list[str]()
    runtime = Runtime(tools(gate, ran), policy)
    session = runtime.session()
    if case == "finished tool":
        gate.open()
    feed = GuessFeed(session, [Listed([guess("find", confidence, q="x")]), Sampler(samples)])
    feed.start(ctx(session.id))
    await spin(20)
    if case == "finished tool":
        await settle(session)
    assert feed.withdrawn == 0
    gate.open()
    assert (await session.execute_detailed(mine)).kind == "hit"
    feed.stop(0.5)
    await session.close()


async def test_a_sample_call_the_others_did_not_propose_is_discounted_by_their_coverage() -> None:
    _, session, feed, events, _, gate = await run_step(
        [Listed([guess("find", 0.6, q="x")]),
         Sampler([[ToolCall("read", {"id": "1"})], [ToolCall("find", {"q": "x"})]], confidence=0.7)])
    launched = {e.source: e.confidence for e in events if e.kind is EventKind.LAUNCHED}
    dedup = [e for e in events if e.kind is EventKind.DEDUPLICATED]
    # odds 0.7 / 0.3 times the uncovered 0.4 -> 0.933 -> 0.483
    assert launched["model"] == pytest.approx((7 / 3 * 0.4) / (1 + 7 / 3 * 0.4))
    assert len(dedup) == 1 and dedup[0].confidence == 0.7  # agreeing keeps its own confidence
    gate.open()
    feed.stop(0.5)
    await session.close()


async def test_without_cheap_guesses_samples_keep_their_confidence() -> None:
    _, session, feed, events, _, gate = await run_step([Sampler([[ToolCall("read", {"id": "1"})]], confidence=0.7)])
    assert [e.confidence for e in events if e.kind is EventKind.LAUNCHED] == [0.7]
    gate.open()
    feed.stop(0.5)
    await session.close()


async def test_a_malformed_sample_call_supports_nothing_and_breaks_nothing() -> None:
    _, session, feed, _, _, gate = await run_step(
        [Listed([guess("find", 0.3, q="x")]),
         Sampler([[ToolCall("nope", {})], [ToolCall("find", {"q": 1, "extra": True})]], alpha=0.9)])
    assert feed.withdrawn == 1
    gate.open()
    feed.stop(0.5)
    await session.close()


def test_the_policy_switch_parses_and_rejects_non_booleans() -> None:
    assert policy_from_mapping({"combine_evidence": False}).combine_evidence is False
    assert Policy().combine_evidence is True
    with pytest.raises(PolicyError, match="combine_evidence"):
        policy_from_mapping({"combine_evidence": "no"})


# --- found in review ---------------------------------------------------------------------------------

async def test_the_strongest_cheap_guess_for_a_call_is_what_the_samples_revise() -> None:
    weak, strong = Listed([guess("find", 0.3, q="x")]), Listed([guess("find", 0.9, q="x")])
    strong.name = "strong"
    _, session, feed, _, _, gate = await run_step([weak, strong, Sampler([[ToolCall("read", {"id": "1"})]],
                                                                         alpha=0.7)])
    # from 0.9 one disagreeing sample leaves 0.73: kept (from 0.3 it would be 0.11: withdrawn)
    assert feed.withdrawn == 0
    gate.open()
    assert (await session.execute_detailed(ToolCall("find", {"q": "x"}))).kind == "hit"
    feed.stop(0.5)
    await session.close()


@pytest.mark.parametrize("bad", [math.inf, "0.5", math.nan, -1.0])
async def test_a_guess_with_a_nonsense_confidence_is_rejected_and_the_rest_still_run(bad: Any) -> None:
    _, session, feed, events, ran, gate = await run_step(
        [Listed([Prediction(ToolCall("read", {"id": "0"}), bad, "listed"), guess("find", 0.9, q="x")])])
    assert not [e for e in events if e.kind is EventKind.PREDICTOR_FAILED]
    assert ran == ["find x"]
    gate.open()
    feed.stop(0.5)
    await session.close()
