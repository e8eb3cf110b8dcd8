"""The simulated engine's timing model: slots, batch-dependent decode, prefill of uncached tokens.

One :class:`EngineModel` per served model. A request waits for one of ``max_concurrency`` batch slots
(:class:`~forethought.bench.engine_sim.slots.BatchSlots`; continuations first), then its prompt is priced by
the conversation's prefix cache (:class:`~forethought.bench.engine_sim.cache.PrefixCache`, ``cache_tokens``
capacity with LRU eviction), and its first token comes ``ttft_s + prefill_s_per_token * uncached tokens``
later. Each further token takes ``(1 + batch_slowdown * (b - 1)) / decode_tokens_per_s`` with ``b`` the
sequences running at that moment. Every delay is multiplied by ``time_scale`` (0: no waiting at all).
When the response ends the slot is released: a sequence that leaves for a tool call queues again on its
next request, and its cached prompt is LRU-evictable meanwhile.

Counters (since the last reset): requests, prompt tokens, cached and computed prefill tokens, recomputed
tokens (computed before: evicted prefix, re-rendered output), generated tokens, continuations, queue
wait, evicted tokens; the slot meter gives mean running sequences and occupancy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from forethought.bench.engine_sim.cache import Prefill, PrefixCache
from forethought.bench.engine_sim.slots import BatchSlots


@dataclass(frozen=True, slots=True)
class TimingConfig:
    """Timing of one simulated model; all delays are multiplied by ``time_scale``.

    ``max_concurrency`` is the number of batch slots (0: unlimited); ``batch_slowdown`` the relative
    decode slowdown per additional running sequence; ``cache_tokens`` the prefix-cache capacity (0:
    unbounded); ``chunk_tokens`` how many generated tokens one streamed chunk carries at most (fewer chunks,
    same timing of the last token of each).
    """

    ttft_s: float = 0.05
    prefill_s_per_token: float = 0.0
    decode_tokens_per_s: float = 100.0
    reasoning_tokens: int = 32
    fragment_tokens: int = 3
    max_concurrency: int = 0
    time_scale: float = 1.0
    batch_slowdown: float = 0.0
    cache_tokens: int = 0
    chunk_tokens: int = 1

    def __post_init__(self) -> None:
        if min(self.ttft_s, self.prefill_s_per_token, self.time_scale, self.batch_slowdown) < 0 or (
                self.decode_tokens_per_s <= 0):
            raise ValueError("timing values must be >= 0 and decode_tokens_per_s > 0")
        if self.reasoning_tokens < 0 or self.fragment_tokens < 1 or self.max_concurrency < 0:
            raise ValueError("reasoning_tokens, max_concurrency must be >= 0 and fragment_tokens >= 1")
        if self.cache_tokens < 0 or self.chunk_tokens < 1:
            raise ValueError("cache_tokens must be >= 0 and chunk_tokens >= 1")


@dataclass(slots=True)
class EngineCounters:
    """What one model has done since the last reset (all additive)."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    computed_tokens: int = 0
    recomputed_tokens: int = 0
    generated_tokens: int = 0
    continuations: int = 0
    queue_wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Admission:
    """A request that holds a slot: its conversation, how its prompt was priced, and how long it queued."""

    conversation: str
    prefill: Prefill
    queued_s: float
    continuation: bool


class EngineModel:
    """Slots, prefix cache, pacing and counters of one simulated model."""

    def __init__(self, timing: TimingConfig) -> None:
        self.timing = timing
        self.slots = BatchSlots(timing.max_concurrency)
        self.cache = PrefixCache(timing.cache_tokens)
        self.counters = EngineCounters()

    async def admit(self, conversation: str, prompt: str, *, continuation: bool = False,
                    tail_chars: int = 0) -> Admission:
        """Wait for a slot, then price the prompt against the prefix cache (pinning it while it runs)."""
        queued = await self.slots.acquire(priority=continuation)
        prefill = self.cache.admit(conversation, prompt, continuation=continuation, tail_chars=tail_chars)
        c = self.counters
        c.requests += 1
        c.prompt_tokens += prefill.prompt_tokens
        c.cached_tokens += prefill.cached_tokens
        c.computed_tokens += prefill.computed_tokens
        c.recomputed_tokens += prefill.recomputed_tokens
        c.continuations += continuation
        c.queue_wait_s += queued
        return Admission(conversation, prefill, queued, continuation)

    def release(self, admission: Admission, output_chars: int) -> None:
        """The response ended (or was abandoned): free the slot, keep the output's KV as evictable cache."""
        self.cache.finish(admission.conversation, output_chars)
        self.slots.release()

    def first_token_s(self, prefill: Prefill) -> float:
        """Seconds from admission to the first token (scaled)."""
        t = self.timing
        return (t.ttft_s + t.prefill_s_per_token * prefill.computed_tokens) * t.time_scale

    def token_s(self) -> float:
        """Seconds per further token with the batch as it is now (scaled)."""
        t = self.timing
        batch = max(1, self.slots.running)
        return t.time_scale * (1.0 + t.batch_slowdown * (batch - 1)) / t.decode_tokens_per_s

    def stats(self) -> dict[str, Any]:
        """Counters plus the slot meter and cache state."""
        return {**dataclasses.asdict(self.counters), "slots": self.slots.slots,
                "mean_running": self.slots.mean_running(), "slot_occupancy": self.slots.occupancy(),
                "peak_running": self.slots.peak, "evicted_tokens": self.cache.evicted_tokens,
                "cache_held_tokens": self.cache.held_tokens}

    def reset(self) -> None:
        """Zero the counters, restart the meter, empty the prefix cache."""
        self.counters = EngineCounters()
        self.slots.reset()
        self.cache.clear()
