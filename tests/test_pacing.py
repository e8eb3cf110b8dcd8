"""Pacing returns: a TTFT-steered limit on returning requests, first come first served, nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FakeClock, spin
from forethought.agent.pacing import ReturnPacer
from forethought.llm.events import LLMEvent, TextDelta


def test_rising_time_to_first_token_shrinks_the_limit_and_steady_grows_it() -> None:
    pacer = ReturnPacer(initial_limit=16, smoothing=0.5)
    for _ in range(5):
        pacer.observe(0.1)
    steady = pacer.limit
    assert steady > 16  # near the best TTFT: room to grow
    for _ in range(20):
        pacer.observe(1.0)  # the server queues: ten times slower
    assert pacer.limit < steady / 2
    for _ in range(200):
        pacer.observe(0.1)
    assert pacer.limit > steady  # recovered once TTFT came back


@given(st.lists(st.floats(0, 100), min_size=1, max_size=50))
def test_the_limit_stays_in_its_bounds(samples: list[float]) -> None:
    pacer = ReturnPacer(initial_limit=4, min_limit=2, max_limit=40)
    for s in samples:
        pacer.observe(s)
        assert 2 <= pacer.limit <= 40


async def test_returns_beyond_the_limit_wait_in_order_and_are_counted() -> None:
    clock = FakeClock()
    pacer = ReturnPacer(initial_limit=2, clock=clock)
    order: list[int] = []

    async def one(i: int) -> None:
        await pacer.acquire()
        order.append(i)

    tasks = [asyncio.ensure_future(one(i)) for i in range(5)]
    await spin(5)
    assert order == [0, 1] and pacer.held == 3 and pacer.in_flight == 2
    clock.advance(2.0)
    pacer.release(None)
    await spin(5)
    assert order == [0, 1, 2]
    pacer.release(None)
    pacer.release(None)
    await spin(5)
    assert order == [0, 1, 2, 3, 4]
    await asyncio.gather(*tasks)
    assert pacer.waited_s >= 2.0 * 3


async def test_a_cancelled_waiter_loses_nothing() -> None:
    pacer = ReturnPacer(initial_limit=1)
    await pacer.acquire()
    waiting = asyncio.ensure_future(pacer.acquire())
    behind = asyncio.ensure_future(pacer.acquire())
    await spin(3)
    waiting.cancel()
    await spin(3)
    pacer.release(None)
    await asyncio.wait_for(behind, 5)
    assert pacer.in_flight == 1


async def _events(n: int, fail: bool = False) -> AsyncIterator[LLMEvent]:
    for i in range(n):
        yield TextDelta(str(i))
    if fail:
        raise ConnectionError("engine went away")


async def test_paced_releases_at_the_first_event_and_on_failure() -> None:
    pacer = ReturnPacer(initial_limit=1)
    seen = []
    async for event in pacer.paced(_events(3)):
        seen.append(event)
        assert pacer.in_flight == 0  # released once the first token came
    assert len(seen) == 3
    with pytest.raises(ConnectionError):
        async for _ in pacer.paced(_events(0, fail=True)):
            pass
    assert pacer.in_flight == 0


def test_bad_settings_are_refused() -> None:
    for kwargs in ({"initial_limit": 0}, {"min_limit": 5, "initial_limit": 2}, {"smoothing": 0.0}):
        with pytest.raises(ValueError):
            ReturnPacer(**kwargs)  # type: ignore[arg-type]


async def test_an_agent_paces_only_its_returns_and_its_answers_are_unchanged() -> None:
    from forethought import Agent, Effect, FakeLLMClient, Runtime, ToolCall, scripted_message, tool
    from forethought.llm.fake import FakeRequest

    @tool(effect=Effect.READ_ONLY)
    async def look(city: str) -> str:
        return f"sunny in {city}"

    def respond(request: FakeRequest) -> object:
        outputs = [m["content"] for m in request.messages if m["role"] == "tool"]
        if len(outputs) < 2:
            return scripted_message("", [ToolCall("look", {"city": f"c{len(outputs)}"})])
        return scripted_message(" / ".join(outputs))

    results = []
    for pacer in (None, ReturnPacer(initial_limit=1)):
        runtime = Runtime([look])
        agents = [Agent(FakeLLMClient(respond=respond), "m", [look], runtime, pacer=pacer) for _ in range(3)]
        done = await asyncio.gather(*(a.run([{"role": "user", "content": "weather?"}]) for a in agents))
        results.append([r.final_text for r in done])
        if pacer is not None:
            assert pacer.in_flight == 0 and pacer.held >= 1  # three agents came back at once, one at a time
    assert results[0] == results[1] == ["sunny in c0 / sunny in c1"] * 3
