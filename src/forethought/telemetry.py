"""Telemetry: every state change of a speculation is an event; events feed counters and Prometheus.

Events carry the tool name and a short hash of the call key, never raw argument values, so a private
argument cannot leak through telemetry. Subscribers (tests, the bench, loggers) observe behaviour without
reaching into the store. Each :class:`Telemetry` owns its own Prometheus registry, so several runtimes in
one process never collide.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter


class EventKind(enum.Enum):
    """What happened to a speculation or an authoritative call."""

    LAUNCHED = "launched"
    DEDUPLICATED = "deduplicated"
    REJECTED = "rejected"
    HIT = "hit"
    PARTIAL_HIT = "partial_hit"
    MISS = "miss"
    WASTED = "wasted"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    FAILED = "failed"
    STALE = "stale"
    CONFLICT = "conflict"
    COMMITTED = "committed"
    EARLY_DISPATCH = "early_dispatch"


@dataclass(frozen=True, slots=True)
class Event:
    """One telemetry event. ``seconds`` is time saved (hits), wasted (wasted) or waited (misses)."""

    kind: EventKind
    session: str
    tool: str
    key_hash: str
    source: str = ""
    confidence: float | None = None
    seconds: float = 0.0
    detail: str = ""
    at: float = field(default_factory=time.monotonic)


def key_hash(key: str) -> str:
    """A short stable digest of a call key, safe to log."""
    return hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


Subscriber = Callable[[Event], None]


class Telemetry:
    """Event bus plus Prometheus metrics for one runtime."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._subscribers: list[Subscriber] = []
        self.counts: Counter[EventKind] = Counter()
        self.saved_s = 0.0
        self.wasted_s = 0.0
        self.speculations = PromCounter(
            "forethought_speculations", "Speculation outcomes", ["outcome", "tool"], registry=self.registry)
        self.tool_wait = Histogram(
            "forethought_tool_wait_seconds", "Time an authoritative call waited for its result",
            ["outcome"], registry=self.registry,
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.saved = PromCounter(
            "forethought_saved_seconds", "Tool seconds hidden by speculation", registry=self.registry)
        self.wasted = PromCounter(
            "forethought_wasted_seconds", "Tool seconds spent on unclaimed speculations",
            registry=self.registry)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` with every event; returns a function that unsubscribes it."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        self.counts[event.kind] += 1
        self.speculations.labels(event.kind.value, event.tool).inc()
        if event.kind in (EventKind.HIT, EventKind.PARTIAL_HIT) and event.seconds > 0:
            self.saved_s += event.seconds
            self.saved.inc(event.seconds)
        elif event.kind is EventKind.WASTED and event.seconds > 0:
            self.wasted_s += event.seconds
            self.wasted.inc(event.seconds)
        for subscriber in list(self._subscribers):
            subscriber(event)

    def observe_wait(self, outcome: str, seconds: float) -> None:
        self.tool_wait.labels(outcome).observe(seconds)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this runtime's metrics."""
        return generate_latest(self.registry)
