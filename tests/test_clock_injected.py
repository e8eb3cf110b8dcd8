"""The runtime's clock is the only clock of the agent's step timing, the guess feed and the daemon's dispatch:
with a fake clock, every duration they report is what the test advanced, never wall time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, Runtime, tool
from forethought.agent.feed import GuessFeed
from forethought.daemon.dispatch import Kind, StepDispatch
from forethought.llm.events import MessageDone, ToolCallClosed, ToolCallStarted
from forethought.predictors.base import PredictionContext
from forethought.testing import FakeClock


@tool(effect=Effect.READ_ONLY, threaded=False)
async def lookup(k: int) -> int:
    """A read."""
    return k


@settings(max_examples=50, deadline=None)
@given(generation=st.floats(0.01, 100), waited=st.floats(0, 200))
async def test_the_feeds_eta_counts_down_on_the_runtimes_clock(generation: float, waited: float) -> None:
    clock = FakeClock()
    runtime = Runtime([lookup], clock=clock)
    feed = GuessFeed(runtime.session(), [])
    feed.generation_s = generation
    feed.start(PredictionContext("s", [], ""))
    assert feed.eta_s() == pytest.approx(generation)
    clock.advance(waited)
    assert feed.eta_s() == pytest.approx(max(0.0, generation - waited))
    runtime.close()


async def test_the_daemons_step_times_its_first_token_and_end_on_the_runtimes_clock() -> None:
    clock = FakeClock(50.0)
    runtime = Runtime([lookup], clock=clock)
    stopped: list[Any] = []

    class Feed:
        def streamed(self, event: Any) -> None:
            pass

        def stop(self, generation_s: float, tokens: int, first_s: float | None) -> None:
            stopped.append((generation_s, first_s))

    dispatch = StepDispatch(runtime.session(), lambda _: Kind.UNSEEN, lambda _: None, lambda _: None,
                            Feed())  # type: ignore[arg-type]
    assert dispatch.started == 50.0
    clock.advance(1.5)
    dispatch.event(ToolCallStarted(0, "c0", "x"))
    clock.advance(2.0)
    dispatch.event(ToolCallClosed(0, "c0", "x", {}, "{}", None))
    dispatch.event(MessageDone("tool_calls"))
    assert stopped and stopped[0][0] == pytest.approx(3.5) and stopped[0][1] == pytest.approx(1.5)
    runtime.close()

