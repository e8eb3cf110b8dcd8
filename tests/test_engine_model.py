"""The simulated engine's timing model: batch slots, prefix cache with LRU eviction, continuations.

Unit tests drive :class:`BatchSlots` and :class:`PrefixCache` directly (a fake clock for the occupancy
meter); the HTTP tests check that the engine behind ``/v1/chat/completions`` enforces its slot limit,
evicts under pressure and keeps a continuation's prefix hot, as its ``/stats`` and usage report.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.bench.engine_sim.cache import PrefixCache, count_tokens
from forethought.bench.engine_sim.engine import EngineModel, TimingConfig
from forethought.bench.engine_sim.model_server import ModelServer, SpeculatorConfig
from forethought.bench.engine_sim.slots import BatchSlots
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import MessageDone
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

TOOLS = ({"type": "function", "function": {"name": "look", "parameters": {
    "type": "object", "properties": {"where": {"type": "string"}}, "required": ["where"]}}},)
TRAJECTORY = Trajectory("t-engine", (Turn("look around", ((ToolCall("look", {"where": "up"}),),
                                                           (ToolCall("look", {"where": "down"}),)), "Seen."),),
                        TOOLS)


async def spin(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- batch slots ---------------------------------------------------------------------------------


async def test_slots_admit_at_most_k_and_hand_over_in_fifo_order() -> None:
    slots = BatchSlots(2)
    order: list[str] = []
    await slots.acquire()
    await slots.acquire()
    waiters = [asyncio.create_task(slots.acquire()) for _ in range(3)]
    for task, name in zip(waiters, "abc", strict=True):
        task.add_done_callback(lambda _t, n=name: order.append(n))
    await asyncio.sleep(0)
    assert slots.running == 2 and slots.queued == 3 and not any(t.done() for t in waiters)
    slots.release()
    await spin()
    assert order == ["a"] and slots.running == 2
    slots.release()
    slots.release()
    await asyncio.gather(*waiters)
    assert order == ["a", "b", "c"] and slots.peak == 2


async def test_a_continuation_goes_ahead_of_queued_requests() -> None:
    slots = BatchSlots(1)
    await slots.acquire()
    order: list[str] = []
    plain = asyncio.create_task(slots.acquire())
    plain.add_done_callback(lambda _t: order.append("plain"))
    await asyncio.sleep(0)
    resumed = asyncio.create_task(slots.acquire(priority=True))
    resumed.add_done_callback(lambda _t: order.append("continuation"))
    await asyncio.sleep(0)
    slots.release()
    await resumed
    assert order == ["continuation"]
    slots.release()
    await plain
    assert order == ["continuation", "plain"]


async def test_a_cancelled_waiter_does_not_leak_its_slot() -> None:
    slots = BatchSlots(1)
    await slots.acquire()
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.release()
    assert slots.running == 0
    await asyncio.wait_for(slots.acquire(), 1)


async def test_occupancy_is_time_weighted() -> None:
    clock = Clock()
    slots = BatchSlots(4, clock=clock)
    await slots.acquire()
    await slots.acquire()
    clock.now = 10.0  # two of four slots busy for 10 s
    slots.release()
    clock.now = 20.0  # one busy for 10 s
    assert slots.mean_running() == pytest.approx(1.5)
    assert slots.occupancy() == pytest.approx(1.5 / 4)


# --- prefix cache --------------------------------------------------------------------------------


def test_a_client_round_trip_reuses_the_prompt_and_recomputes_the_rerendered_output() -> None:
    cache = PrefixCache()
    first = cache.admit("c", "P" * 400)
    assert first.cached_tokens == 0 and first.recomputed_tokens == 0
    cache.finish("c", output_chars=40)
    again = cache.admit("c", "P" * 400 + "A" * 40 + "R" * 80)
    assert again.cached_tokens == count_tokens("P" * 400)
    assert again.recomputed_tokens == count_tokens("A" * 40)  # the call the client re-rendered


def test_a_continuation_finds_its_prompt_and_generated_call_hot() -> None:
    cache = PrefixCache()
    cache.admit("c", "P" * 400)
    cache.finish("c", output_chars=40)
    resumed = cache.admit("c", "P" * 400 + "A" * 40 + "R" * 80, continuation=True, tail_chars=80)
    assert resumed.computed_tokens == count_tokens("R" * 80)
    assert resumed.recomputed_tokens == 0


def test_lru_eviction_trims_the_least_recently_used_unpinned_conversation() -> None:
    cache = PrefixCache(capacity_tokens=250)
    cache.admit("old", "o" * 400)  # 100 tokens
    cache.finish("old", 0)
    cache.admit("pinned", "p" * 400)  # still running: never evicted
    cache.admit("new", "n" * 400)
    cache.finish("new", 0)
    assert cache.held_tokens <= 250 and cache.evicted_tokens >= 50
    back = cache.admit("old", "o" * 400 + "x" * 8)
    assert back.cached_tokens < 100 and back.recomputed_tokens == 100 - back.cached_tokens
    still = cache.admit("pinned", "p" * 400)
    assert still.cached_tokens == 100


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 300), st.integers(0, 60), st.booleans()),
                min_size=1, max_size=30), st.integers(50, 400))
def test_cache_never_serves_more_than_the_prompt_and_respects_its_capacity(
        ops: list[tuple[str, int, int, bool]], capacity: int) -> None:
    cache = PrefixCache(capacity_tokens=capacity)
    for key, size, output, continuation in ops:
        prompt = key * size
        prefill = cache.admit(key, prompt, continuation=continuation, tail_chars=min(size, 20))
        assert 0 <= prefill.cached_tokens <= prefill.prompt_tokens
        assert 0 <= prefill.recomputed_tokens <= prefill.computed_tokens
        cache.finish(key, output)
        assert cache.held_tokens <= capacity  # nothing is pinned after finish


def test_configs_reject_impossible_values() -> None:
    with pytest.raises(ValueError):
        TimingConfig(cache_tokens=-1)
    with pytest.raises(ValueError):
        TimingConfig(chunk_tokens=0)
    with pytest.raises(ValueError):
        TimingConfig(batch_slowdown=-0.1)
    with pytest.raises(ValueError):
        BatchSlots(-1)
    with pytest.raises(ValueError):
        PrefixCache(capacity_tokens=-5)


async def test_decode_slows_down_with_the_running_batch() -> None:
    engine = EngineModel(TimingConfig(decode_tokens_per_s=100.0, batch_slowdown=0.5, max_concurrency=4))
    alone = engine.token_s()
    for _ in range(3):
        await engine.slots.acquire()
    assert engine.token_s() == pytest.approx(alone * 2.0)


# --- over HTTP -----------------------------------------------------------------------------------


def _messages(step: int, continuation_tail: bool = True) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "look around"}]
    for i in range(step):
        call_id = f"c{i}"
        messages.append({"role": "assistant", "content": "x", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "look", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "result " * 10})
    return messages


async def _usage(llm: OpenAIChatClient, messages: list[dict[str, Any]], **metadata: str) -> Any:
    done = None
    async for event in llm.stream("main", messages, list(TOOLS),
                                  metadata={"trajectory_id": TRAJECTORY.id, **metadata}):
        if isinstance(event, MessageDone):
            done = event
    assert done is not None and done.usage is not None
    return done.usage


async def test_the_engine_never_runs_more_than_its_slots() -> None:
    timing = TimingConfig(ttft_s=0.02, decode_tokens_per_s=400.0, reasoning_tokens=8, max_concurrency=2)
    server = ModelServer([TRAJECTORY], timing, SpeculatorConfig(timing=timing))
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        await asyncio.gather(*(_usage(llm, _messages(0), conversation_id=f"c{i}") for i in range(5)))
    stats = server.stats()["by_model"]["main"]
    assert stats["requests"] == 5 and stats["peak_running"] == 2
    assert stats["queue_wait_s"] > 0 and 0 < stats["slot_occupancy"] <= 1


async def test_eviction_under_pressure_makes_a_conversation_prefill_again() -> None:
    timing = TimingConfig(ttft_s=0.0, decode_tokens_per_s=1000.0, reasoning_tokens=2, time_scale=0.0)
    one = count_tokens("\n".join([str(TOOLS)] * 1))
    server = ModelServer([TRAJECTORY], replace_cache(timing, 3 * one), SpeculatorConfig(timing=timing))
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        await _usage(llm, _messages(0), conversation_id="a")
        for other in "bcdefg":  # other conversations push "a" out of the small cache
            await _usage(llm, _messages(0), conversation_id=other)
        again = await _usage(llm, _messages(1), conversation_id="a")
    stats = server.stats()["by_model"]["main"]
    assert stats["evicted_tokens"] > 0
    assert again.cached_tokens == 0 and stats["recomputed_tokens"] > 0


def replace_cache(timing: TimingConfig, tokens: int) -> TimingConfig:
    return TimingConfig(ttft_s=timing.ttft_s, decode_tokens_per_s=timing.decode_tokens_per_s,
                        reasoning_tokens=timing.reasoning_tokens, time_scale=timing.time_scale, cache_tokens=tokens)


async def test_a_continuation_keeps_its_prefix_hot_and_a_round_trip_does_not() -> None:
    timing = TimingConfig(ttft_s=0.0, decode_tokens_per_s=1000.0, reasoning_tokens=4, time_scale=0.0)
    server = ModelServer([TRAJECTORY], timing, SpeculatorConfig(timing=timing))
    async with serve_in_process(server.app) as url, OpenAIChatClient(url + "/v1", max_retries=0) as llm:
        await _usage(llm, _messages(0), conversation_id="resumed")
        resumed = await _usage(llm, _messages(1), conversation_id="resumed", continuation="true")
        await _usage(llm, _messages(0), conversation_id="client")
        round_trip = await _usage(llm, _messages(1), conversation_id="client")
    tail = count_tokens('{"content":"' + "result " * 10 + '","role":"tool","tool_call_id":"c0"}') + 1
    assert resumed.prompt_tokens == round_trip.prompt_tokens
    assert resumed.prompt_tokens - resumed.cached_tokens <= tail
    assert round_trip.cached_tokens < resumed.cached_tokens
    stats = server.stats()["by_model"]["main"]
    assert stats["continuations"] == 1 and stats["recomputed_tokens"] > 0
