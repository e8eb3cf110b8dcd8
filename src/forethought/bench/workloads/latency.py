"""Injected tool latency: a seeded, deterministic delay per call, so every arm of a benchmark waits alike.

:class:`LatencyModel` draws a delay from a normal distribution around a mean (per tool if configured) with
a relative standard deviation, clipped at zero, then scaled by ``time_scale``. The draw depends only on the
seed, the tool name, the call's canonical key and an occurrence number, never on wall-clock time or the
order calls happen to run in: the same call gets the same latency in the serial arm and in every
speculative arm. :func:`with_latency` wraps any :class:`~forethought._core.tools.Tool` so that it waits before
doing its work (the wait comes before the tool touches any state); the wait is ``asyncio.sleep`` unless a
test passes its own (:data:`Sleep`), which lets it hold a tool at its wait or record the delays asked for.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import random
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from forethought._core.calls import dumps_canonical
from forethought._core.tools import Tool

Sleep = Callable[[float], Awaitable[None]]
"""How an async tool waits out its latency (``asyncio.sleep``, or a test's gate)."""


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Normal latency around ``mean_s`` (or ``per_tool[name]``), relative sd ``jitter``, scaled by ``time_scale``."""

    mean_s: float = 0.0
    jitter: float = 0.3
    seed: int = 0
    per_tool: Mapping[str, float] | None = field(default=None)
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.mean_s < 0 or self.jitter < 0 or self.time_scale < 0:
            raise ValueError("mean_s, jitter and time_scale must be >= 0")
        if self.per_tool is not None and any(v < 0 for v in self.per_tool.values()):
            raise ValueError("per-tool latencies must be >= 0")

    def mean_for(self, tool_name: str) -> float:
        """The unscaled mean latency of one tool."""
        if self.per_tool is not None and tool_name in self.per_tool:
            return float(self.per_tool[tool_name])
        return self.mean_s

    def delay(self, tool_name: str, key: str = "", occurrence: int = 0) -> float:
        """Seconds to wait for this call: deterministic in (seed, tool, key, occurrence), never negative."""
        mean = self.mean_for(tool_name)
        if mean <= 0 or self.time_scale == 0:
            return 0.0
        digest = hashlib.blake2b(
            f"{self.seed}\x1f{tool_name}\x1f{key}\x1f{occurrence}".encode(), digest_size=8).digest()
        rng = random.Random(struct.unpack("<Q", digest)[0])
        return max(0.0, rng.gauss(mean, self.jitter * mean)) * self.time_scale

    def scaled(self, time_scale: float) -> LatencyModel:
        return replace(self, time_scale=time_scale)


def call_key_text(arguments: Mapping[str, Any]) -> str:
    """The latency key of a call's (canonical) arguments."""
    try:
        return dumps_canonical(dict(arguments))
    except (TypeError, ValueError):
        return repr(sorted(arguments.items()))


def with_latency(t: Tool, model: LatencyModel, sleep: Sleep = asyncio.sleep) -> Tool:
    """``t`` with ``model``'s delay injected before its function runs.

    Async and unthreaded tools get an async wrapper (awaiting ``sleep``); threaded sync tools keep running
    in a worker thread and sleep there. For stateful tools the state target is passed through untouched.
    """
    fn = t.fn
    name = t.name

    def delay_for(kwargs: Mapping[str, Any]) -> float:
        return model.delay(name, call_key_text(kwargs))

    if t.threaded and not inspect.iscoroutinefunction(fn):
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            seconds = delay_for(kwargs)
            if seconds > 0:
                time.sleep(seconds)
            return fn(*args, **kwargs)

        return replace(t, fn=sync_wrapper)

    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        seconds = delay_for(kwargs)
        if seconds > 0:
            await sleep(seconds)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value

    return replace(t, fn=async_wrapper, threaded=False)
