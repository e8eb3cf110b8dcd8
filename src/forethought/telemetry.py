"""Telemetry: every state change of a speculation is an event; events feed counters and Prometheus.

Events carry the tool name and a short hash of the call key, never raw argument values. The hash is keyed
with a secret each :class:`Telemetry` draws at random (a keyed BLAKE2b, i.e. a MAC), so nobody without
the secret can test guesses against it (a 4-digit PIN in a key was recovered from an unkeyed 48-bit hash
in milliseconds); calls of private tools or with private arguments carry no hash at all, and a private
tool's name is shown as ``"<private>"`` (the runtime passes that label).

Subscribers (tests, the bench, loggers) observe behaviour without
reaching into the store; a subscriber that raises is logged and never disturbs the call that emitted.

Counting is on the hot path of every call, so it is plain Python arithmetic; the Prometheus view is built
from those counts when it is scraped (a custom collector on a registry each :class:`Telemetry` owns, so
several runtimes in one process never collide). An :class:`Event` object is built only when someone
subscribed.
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # prometheus_client is imported when the Prometheus view is first built, not at import
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

_log = logging.getLogger(__name__)


class MonotonicClock(Protocol):
    """What telemetry reads time from: any clock with ``monotonic()`` (the runtime passes its own)."""

    def monotonic(self) -> float: ...


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
    PREDICTOR_FAILED = "predictor_failed"
    """A predictor raised; its guesses for that step are ignored (``source`` names it, ``detail`` the error type)."""
    PREEMPTED = "preempted"
    """A queued or running speculation was cancelled to make room for a more valuable one."""
    PREPARED = "prepared"
    """A tool's ``prepare`` hook ran for a hint (``detail``: "ok" or the error type)."""
    BACKOFF = "backoff"
    """The runtime's load level changed state (normal, reduced, off); ``detail`` says why."""
    WITHDRAWN = "withdrawn"
    """A running or queued speculation was cancelled because new evidence made it no longer worth its tool
    time (``Session.revise``; ``detail`` gives the revised P(hit)); WASTED follows if its tool had run."""
    DEFERRED = "deferred"
    """A guess was held back, not run, because evidence due soon (a speculator's samples) makes it worth more
    then than now (``Session.defer``); it runs later if it is still worth it, and its outcome is learnt."""
    POLICY = "policy"
    """Policy resolution failed closed for a tool (a table could not be matched: ``detail`` says why); the tool
    runs only when called and stays private."""

    # Members are singletons compared by identity; the C identity hash keeps the hot-path counting (dict
    # and set lookups keyed by kind) cheaper than Enum's Python-level hash of the member name.
    __hash__ = object.__hash__


SAVING_KINDS = frozenset({EventKind.HIT, EventKind.PARTIAL_HIT})
_WASTED = EventKind.WASTED

WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (seconds) of the ``forethought_tool_wait_seconds`` histogram."""


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


@dataclass(frozen=True, slots=True)
class Transition:
    """One move of a guess or speculation through its lifecycle (``forethought._core.lifecycle``).

    ``old`` and ``new`` are state names (``"queued"``, ``"running"``, ...); ``cause`` says why when the
    move has an outcome event (its name: ``"hit"``, ``"expired"``, ...). Like :class:`Event` it names the
    tool (``"<private>"`` for a private one) and a keyed hash of the call key (none for private calls).
    """

    session: str
    tool: str
    key_hash: str
    old: str
    new: str
    cause: str = ""
    at: float = field(default_factory=time.monotonic)


KEY_SECRET_BYTES = 16


def key_hash(key: str, secret: bytes = b"") -> str:
    """A short digest of a call key (any string, lone surrogates included), keyed with ``secret``.

    Unkeyed (``secret=b""``) it is only a fingerprint, not safe against guessing; telemetry always keys it.
    """
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6, key=secret).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionStats:
    """Counts and seconds for one session (or a whole runtime).

    ``wasted`` counts speculations whose tool ran (fully or partly) and served nothing, whatever the
    reason (discarded, expired, stale, conflicting, failed, cancelled while running); ``wasted_s`` is their
    tool time. ``cancelled`` counts speculations stopped while queued or running.
    """

    launched: int = 0
    deduplicated: int = 0
    rejected: int = 0
    hits: int = 0
    partial_hits: int = 0
    misses: int = 0
    wasted: int = 0
    cancelled: int = 0
    expired: int = 0
    failed: int = 0
    stale: int = 0
    conflicts: int = 0
    committed: int = 0
    preempted: int = 0
    withdrawn: int = 0
    deferred: int = 0
    saved_s: float = 0.0
    wasted_s: float = 0.0

    @property
    def alpha(self) -> float:
        """Acceptance rate: the fraction of authoritative calls served by a speculation."""
        total = self.hits + self.partial_hits + self.misses
        return (self.hits + self.partial_hits) / total if total else 0.0


_STAT_FIELDS = {EventKind.LAUNCHED: "launched", EventKind.DEDUPLICATED: "deduplicated",
                EventKind.REJECTED: "rejected", EventKind.HIT: "hits", EventKind.PARTIAL_HIT: "partial_hits",
                EventKind.MISS: "misses", EventKind.WASTED: "wasted", EventKind.CANCELLED: "cancelled",
                EventKind.EXPIRED: "expired", EventKind.FAILED: "failed", EventKind.STALE: "stale",
                EventKind.CONFLICT: "conflicts", EventKind.COMMITTED: "committed",
                EventKind.PREEMPTED: "preempted", EventKind.WITHDRAWN: "withdrawn",
                EventKind.DEFERRED: "deferred"}


def stats_from(counts: Counter[EventKind], saved_s: float, wasted_s: float) -> SessionStats:
    """Event counts (and saved/wasted seconds) as :class:`SessionStats`."""
    values: dict[str, Any] = {field: counts.get(kind, 0) for kind, field in _STAT_FIELDS.items()}
    return SessionStats(**values, saved_s=saved_s, wasted_s=wasted_s)


Subscriber = Callable[[Event], None]
TransitionSubscriber = Callable[[Transition], None]


@dataclass(slots=True)
class _WaitHistogram:
    counts: list[int]
    total: float = 0.0


class _Collector:
    """Builds the Prometheus metric families from a :class:`Telemetry`'s counts at scrape time."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        go_float: Callable[[float], str] = floatToGoString  # untyped upstream
        t = self._telemetry
        outcomes = CounterMetricFamily("forethought_speculations", "Speculation outcomes",
                                       labels=["outcome", "tool"])
        for (kind, tool), n in sorted(t.by_tool.items(), key=lambda item: (item[0][0].value, item[0][1])):
            outcomes.add_metric([kind.value, tool], n)
        yield outcomes
        wait = HistogramMetricFamily("forethought_tool_wait_seconds",
                                     "Time an authoritative call waited for its result", labels=["outcome"])
        for outcome, hist in sorted(t.waits.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*WAIT_BUCKETS, float("inf")), hist.counts, strict=True):
                cumulative += n
                buckets.append((go_float(bound), cumulative))
            wait.add_metric([outcome], buckets, hist.total)
        yield wait
        saved = CounterMetricFamily("forethought_saved_seconds", "Tool seconds hidden by speculation")
        saved.add_metric([], t.saved_s)
        yield saved
        wasted = CounterMetricFamily("forethought_wasted_seconds", "Tool seconds spent on unclaimed speculations")
        wasted.add_metric([], t.wasted_s)
        yield wasted


class Telemetry:
    """Event bus plus Prometheus metrics for one runtime; event times are read from ``clock``."""

    def __init__(self, clock: MonotonicClock | None = None, secret: bytes | None = None) -> None:
        self._now = clock.monotonic if clock is not None else time.monotonic
        self._secret = secret if secret is not None else os.urandom(KEY_SECRET_BYTES)
        self._subscribers: list[Subscriber] = []
        self.by_tool: dict[tuple[EventKind, str], int] = {}
        self.waits: dict[str, _WaitHistogram] = {}
        self.saved_s = 0.0
        self.wasted_s = 0.0
        self.wasted_by_source: dict[str, float] = {}
        """Wasted tool seconds per guess source."""
        self.transition_watchers: list[TransitionSubscriber] = []
        """Subscribers of lifecycle moves (:meth:`subscribe_transitions`); empty on the hot path."""
        self._registry: CollectorRegistry | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """This runtime's Prometheus registry (built, with prometheus_client imported, on first use)."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            registry = CollectorRegistry(auto_describe=True)
            registry.register(_Collector(self))
            self._registry = registry
        return self._registry

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` with every event; returns a function that unsubscribes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def key_hash(self, key: str) -> str:
        """The digest events carry for ``key``: keyed with this telemetry's secret."""
        return key_hash(key, self._secret)

    @property
    def counts(self) -> Counter[EventKind]:
        """Events so far by kind (all tools)."""
        out: Counter[EventKind] = Counter()
        for (kind, _tool), n in self.by_tool.items():
            out[kind] += n
        return out

    @property
    def subscribed(self) -> bool:
        return bool(self._subscribers)

    def record(self, kind: EventKind, session: str, tool: str, key: str, source: str = "",
               confidence: float | None = None, seconds: float = 0.0, detail: str = "") -> None:
        """Count one event; build and publish the :class:`Event` (hashing ``key``) only for subscribers."""
        pair = (kind, tool)
        self.by_tool[pair] = self.by_tool.get(pair, 0) + 1
        if seconds > 0.0:
            if kind in SAVING_KINDS:
                self.saved_s += seconds
            elif kind is _WASTED:
                self.wasted_s += seconds
                self.wasted_by_source[source] = self.wasted_by_source.get(source, 0.0) + seconds
        if self._subscribers:
            self._publish(Event(kind, session, tool, key_hash(key, self._secret) if key else "", source,
                                confidence, seconds, detail, self._now()))

    def emit(self, event: Event) -> None:
        """Count and publish an event built by the caller."""
        pair = (event.kind, event.tool)
        self.by_tool[pair] = self.by_tool.get(pair, 0) + 1
        if event.seconds > 0.0:
            if event.kind in SAVING_KINDS:
                self.saved_s += event.seconds
            elif event.kind is EventKind.WASTED:
                self.wasted_s += event.seconds
                self.wasted_by_source[event.source] = self.wasted_by_source.get(event.source, 0.0) + event.seconds
        self._publish(event)

    def _publish(self, event: Event) -> None:
        for subscriber in tuple(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                _log.exception("telemetry subscriber %r failed on %s", subscriber, event.kind.value)

    def subscribe_transitions(self, subscriber: TransitionSubscriber) -> Callable[[], None]:
        """Call ``subscriber`` with every lifecycle :class:`Transition`; returns a function that unsubscribes."""
        self.transition_watchers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self.transition_watchers:
                self.transition_watchers.remove(subscriber)

        return unsubscribe

    def transition(self, session: str, tool: str, key: str, old: str, new: str, cause: str = "") -> None:
        """Publish one lifecycle move to the subscribers (:meth:`subscribe_transitions`)."""
        if self.transition_watchers:
            move = Transition(session, tool, key_hash(key, self._secret) if key else "", old, new, cause,
                              self._now())
            for subscriber in tuple(self.transition_watchers):
                try:
                    subscriber(move)
                except Exception:
                    _log.exception("transition subscriber %r failed on %s -> %s", subscriber, old, new)

    def observe_wait(self, outcome: str, seconds: float) -> None:
        hist = self.waits.get(outcome)
        if hist is None:
            hist = self.waits[outcome] = _WaitHistogram([0] * (len(WAIT_BUCKETS) + 1))
        hist.counts[bisect.bisect_left(WAIT_BUCKETS, seconds)] += 1
        hist.total += seconds

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this runtime's metrics."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
