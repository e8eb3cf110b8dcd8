"""Shared speculation: a session's guesses of ``shared`` tools reuse what any worker of the tenant computed.

A :class:`SharedPolicy` marks the tools whose answer is the same for every caller of a tenant (public
search, documentation lookups) and bounds their sharing (TTL, value size, single-flight wait).
:class:`SharedSpeculation` (one per tenant and worker) wraps such a tool so that, **only when it runs as a
speculation** launched through :meth:`SharedSpeculation.speculate`, it

1. serves an authenticated value another worker published (``served``), or
2. leads: runs the tool itself and publishes the value in the background (``led``), or
3. waits up to ``wait_s`` for the worker that leads (single flight), then runs locally if nothing came.

Authoritative calls run the tool exactly as without sharing; through :meth:`SharedSpeculation.execute`
their result is also published, in the background (the call never waits for Redis). The value a speculation
obtains this way becomes an ordinary entry of the session's store: the authoritative call claims it under
every local rule (identical key, served once, TTL, failures never surface), so equivalence holds exactly as
for a local hit.

A served value is the published one exactly (its JSON text included: dict keys keep their order), and
only until the expiry sealed with it (wall-clock time, ``wall_clock``): a value put back into the backend
after its TTL ran out is refused (``rejected``), whatever TTL the backend now gives it.

Never shared: private tools, tools with private arguments, tools with state, reads, writes or a validator,
anything but PURE / READ_ONLY, and values not built of JSON's own types (:mod:`~forethought.stores.sealing`).
Every backend error or timeout (``op_timeout_s``) makes that speculation local, emits a ``degraded``
:class:`~forethought.stores.events.StoreEvent` and skips the backend for ``retry_after_s``.

How it reaches the runtime: ``Runtime(shared=shared.runs())`` (or ``runtime.session(shared=...)`` for one
tenant's sessions) makes every speculation of a shared tool, from any caller (the Agent, the tap, the MCP
proxy, code speculation), obtain its value here and every authoritative run publish its value — the
runtime's own seam, :class:`~forethought._core.shared.SharedRuns`. The older way still works: :meth:`wrap` a
tool and call :meth:`speculate` / :meth:`execute` instead of the session's, which sets a context variable
the wrapped function reads inside that speculation only. Shared tools run on the event loop
(``threaded=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import struct
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.clock import SYSTEM_CLOCK, Clock
from forethought._core.entry import CallOutcome, SpeculationTicket
from forethought._core.runtime import Session
from forethought._core.scheduler import maybe_await
from forethought._core.shared import SharedRuns
from forethought._core.tools import Effect, Tool
from forethought.errors import ToolDefinitionError
from forethought.stores.errors import StoreError, StoreIntegrityError, StoreUnavailableError
from forethought.stores.events import EventSink, StoreEvent, emit
from forethought.stores.results import SharedResults
from forethought.stores.sealing import NotShareable, Sealer, decode, encode

OP_TIMEOUT_S = 0.05
RETRY_AFTER_S = 5.0
POLL_S = 0.002
MAX_POLL_S = 0.01
MAX_RTT_SAMPLES = 100_000
_SPECULATE, _PUBLISH = "speculate", "publish"

_MODE: contextvars.ContextVar[tuple[SharedSpeculation, str] | None] = contextvars.ContextVar(
    "forethought_shared_mode", default=None)


@dataclass(frozen=True, slots=True)
class SharedTool:
    """How one shared tool is shared."""

    ttl_s: float = 60.0
    """How long a published value may be served (never longer than the tool's own ``ttl_s``)."""
    max_value_bytes: int = 256 * 1024
    """Larger values are not published."""
    wait_s: float = 1.0
    """How long a speculation waits for the worker that leads the same call before running it itself."""
    lease_s: float = 10.0
    """How long a leader holds the call before others may run it (a crashed leader frees it so)."""


@dataclass(frozen=True, slots=True)
class SharedPolicy:
    """Which tools are shared (by name), and the backend's time limits."""

    tools: Mapping[str, SharedTool] = field(default_factory=dict)
    op_timeout_s: float = OP_TIMEOUT_S
    retry_after_s: float = RETRY_AFTER_S
    poll_s: float = POLL_S


_STAMP = struct.Struct("!d")
"""Before a value's JSON in its sealed payload: when the run that computed it began (wall-clock seconds)."""

@dataclass
class SharedStats:
    """What sharing did in one worker; ``rtt_s`` holds backend round trips (seconds, most recent kept)."""

    served: int = 0
    waited_served: int = 0
    led: int = 0
    local: int = 0
    published: int = 0
    too_large: int = 0
    not_shareable: int = 0
    rejected: int = 0
    too_old: int = 0
    """Values refused because their run began before a write the speculation depends on ended."""
    unavailable: int = 0
    operations: int = 0
    shared_calls: int = 0
    rtt_s: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_RTT_SAMPLES))


def unshareable(t: Tool) -> str | None:
    """Why ``t`` may never be shared (``None`` when it may)."""
    if t.private or t.private_arguments:
        return "private tool or private arguments"
    if t.effect not in (Effect.PURE, Effect.READ_ONLY):
        return f"effect {t.effect.value}"
    if t.state is not None or t.reads or t.writes or t.validator is not None:
        return "it depends on state (state, reads, writes or a validator)"
    if t.threaded:
        return "it runs on a worker thread (shared tools run on the event loop)"
    return None


class _Missing:
    pass


_MISSING = _Missing()


class SharedSpeculation:
    """Shares speculative results of one tenant's ``shared`` tools through a :class:`SharedResults` backend."""

    def __init__(self, backend: SharedResults, secret: bytes, tenant: str, policy: SharedPolicy,
                 clock: Clock = SYSTEM_CLOCK, on_event: EventSink | None = None, prefix: str = "ft:res",
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._backend = backend
        self._sealer = Sealer(secret)
        self._tenant = self._sealer.digest("tenant\0" + tenant)
        self.policy = policy
        self._clock = clock
        self._wall = wall_clock
        """Wall-clock seconds: a value's expiry is sealed with it, so every worker judges it alike."""
        self._on_event = on_event
        self._prefix = prefix
        self._down_until: float | None = None
        self.degraded = False
        self.stats = SharedStats()
        self._background: set[asyncio.Task[None]] = set()

    # --- wiring ---------------------------------------------------------------------------------------

    def wrap(self, t: Tool) -> Tool:
        """``t`` itself if the policy does not mark it shared, else a copy whose speculations are shared."""
        spec = self.policy.tools.get(t.name)
        if spec is None:
            return t
        reason = unshareable(t)
        if reason is not None:
            raise ToolDefinitionError(f"{t.label}: marked shared, but it may not be shared: {reason}")
        original = t.fn
        ttl_s = min(spec.ttl_s, t.ttl_s)

        def fn(*args: Any, **kwargs: Any) -> Any:
            mode = _MODE.get()
            if mode is None or mode[0] is not self:
                return original(*args, **kwargs)
            key = self.storage_key(t.arguments.key(ToolCall(t.name, kwargs)))
            if mode[1] == _SPECULATE:
                return self._shared_run(key, spec, ttl_s, lambda: original(*args, **kwargs))
            return self._run_and_publish(key, spec, ttl_s, lambda: original(*args, **kwargs))

        return dataclasses.replace(t, fn=fn)

    # --- the runtime's seam (forethought._core.shared.SharedRuns) ------------------------------------------

    def shares(self, t: Tool) -> bool:
        """Whether the policy marks ``t`` shared and it may be (private or stateful tools never are)."""
        return t.name in self.policy.tools and unshareable(t) is None

    async def speculate_value(self, t: Tool, key: str, run: Callable[[], Any], not_before: float = 0.0) -> Any:
        """A speculation's value of shared tool ``t`` under call ``key``: served (if computed after
        ``not_before``, wall-clock seconds), waited for, or run and published (the runtime calls this as
        :meth:`forethought._core.shared.SharedRuns.speculate`)."""
        spec = self.policy.tools[t.name]
        return await self._shared_run(self.storage_key(key), spec, min(spec.ttl_s, t.ttl_s), run, not_before)

    def published(self, t: Tool, key: str, value: Any, started_at: float | None = None) -> None:
        """An authoritative value of ``t``, from a run that began at ``started_at`` (wall-clock seconds; now if
        not given): encoded now (the caller may change it next), published in the background unless the
        backend is down."""
        spec = self.policy.tools.get(t.name)
        if spec is None or not self._usable():
            return
        try:
            payload = encode(value)
        except NotShareable:
            self.stats.not_shareable += 1
            return
        stamped = _STAMP.pack(self._wall() if started_at is None else started_at) + payload
        self._soon(self._publish_payload(self.storage_key(key), stamped, spec, min(spec.ttl_s, t.ttl_s), ""))

    def runs(self) -> SharedRuns:
        """This object as the runtime's :class:`~forethought._core.shared.SharedRuns` (``Runtime(shared=...)``)."""
        return _Seam(self)

    def storage_key(self, call_key: str) -> str:
        """The backend key of ``call_key`` for this tenant (keyed digests: no argument reaches the backend)."""
        call = self._sealer.digest("call\0" + call_key)
        return f"{self._prefix}:{{{self._tenant}:{call}}}:v2"  # v2: stamped with when it was computed

    def speculate(self, session: Session, call: ToolCall, source: str = "unknown",
                  confidence: float = 1.0) -> SpeculationTicket:
        """``session.speculate`` whose speculation of a shared tool goes through the shared backend."""
        token = _MODE.set((self, _SPECULATE))
        try:
            return session.speculate(call, source=source, confidence=confidence)
        finally:
            _MODE.reset(token)

    async def execute(self, session: Session, call: ToolCall) -> Any:
        """``session.execute``; when a shared tool really runs, its result is published in the background."""
        return (await self.execute_detailed(session, call)).value

    async def execute_detailed(self, session: Session, call: ToolCall) -> CallOutcome:
        """``session.execute_detailed``, publishing as :meth:`execute` does."""
        token = _MODE.set((self, _PUBLISH))
        try:
            return await session.execute_detailed(call)
        finally:
            _MODE.reset(token)

    async def drain(self) -> None:
        """Wait for background publications to finish (tests and orderly shutdown)."""
        while self._background:
            await asyncio.gather(*tuple(self._background), return_exceptions=True)

    # --- the backend, bounded -------------------------------------------------------------------------

    def _usable(self) -> bool:
        return self._down_until is None or self._clock.monotonic() >= self._down_until

    def _fail(self, exc: BaseException) -> None:
        self.stats.unavailable += 1
        self._down_until = self._clock.monotonic() + self.policy.retry_after_s
        if not self.degraded:
            self.degraded = True
            emit(self._on_event, StoreEvent("degraded", "shared-results", f"{type(exc).__name__}: {exc}"))

    def _ok(self) -> None:
        if self.degraded:
            self.degraded = False
            self._down_until = None
            emit(self._on_event, StoreEvent("recovered", "shared-results"))

    async def _op(self, operation: Awaitable[Any]) -> Any:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.policy.op_timeout_s):
                return await operation
        finally:
            self.stats.operations += 1
            self.stats.rtt_s.append(time.perf_counter() - started)

    def _open(self, key: str, sealed: bytes, not_before: float = 0.0) -> Any:
        """The value in ``sealed``, or ``_MISSING``: forged, expired, or computed by a run that began before
        ``not_before`` (the last write this speculation depends on: counted ``too_old``)."""
        try:
            stamped = self._sealer.open(key, sealed, now=self._wall())
            if len(stamped) < _STAMP.size:
                raise StoreIntegrityError("a shared value without the time it was computed")
            (computed_at,) = _STAMP.unpack_from(stamped)
            if not computed_at > not_before:
                self.stats.too_old += 1
                return _MISSING
            return decode(stamped[_STAMP.size:])
        except (StoreIntegrityError, ValueError) as exc:
            self.stats.rejected += 1
            emit(self._on_event, StoreEvent("rejected", "shared-results", type(exc).__name__))
            return _MISSING

    # --- the speculative path -------------------------------------------------------------------------

    async def _shared_run(self, key: str, spec: SharedTool, ttl_s: float, run: Callable[[], Any],
                          not_before: float = 0.0) -> Any:
        self.stats.shared_calls += 1
        if not self._usable():
            self.stats.local += 1
            return await maybe_await(run())
        lead_token = uuid.uuid4().hex
        try:
            sealed, leading = await self._op(self._backend.get_or_lead(key, lead_token, spec.lease_s))
            self._ok()
            value = _MISSING if sealed is None else self._open(key, sealed, not_before)
            if value is not _MISSING:
                self.stats.served += 1
                return value
            leading = leading or sealed is not None  # forged or too old: run it and publish over it
            if not leading:
                value, leading = await self._wait(key, spec, lead_token, not_before)
                if value is not _MISSING:
                    self.stats.waited_served += 1
                    return value
                if not leading:
                    self.stats.local += 1
                    return await maybe_await(run())
        except (StoreError, TimeoutError) as exc:
            self._fail(exc)
            self.stats.local += 1
            return await maybe_await(run())
        self.stats.led += 1
        started = self._wall()
        try:
            value = await maybe_await(run())
        except BaseException:
            self._soon(self._release(key, lead_token))
            raise
        self._soon(self._publish(key, value, spec, ttl_s, lead_token, started))
        return value

    async def _wait(self, key: str, spec: SharedTool, token: str, not_before: float = 0.0) -> tuple[Any, bool]:
        """Poll for the leader's value; take the lease over if the leader let it go (cancelled, failed,
        crashed). Returns (value or _MISSING, whether this speculation now leads)."""
        deadline = time.monotonic() + spec.wait_s
        poll = self.policy.poll_s
        while time.monotonic() < deadline:
            await asyncio.sleep(poll)
            poll = min(poll * 2, MAX_POLL_S)
            sealed, leading = await self._op(self._backend.get_or_lead(key, token, spec.lease_s))
            if sealed is not None:
                return self._open(key, sealed, not_before), False  # too old or forged: run here, unpublished
            if leading:
                return _MISSING, True
        return _MISSING, False

    async def _run_and_publish(self, key: str, spec: SharedTool, ttl_s: float, run: Callable[[], Any]) -> Any:
        started = self._wall()
        value = await maybe_await(run())
        if self._usable():
            self._soon(self._publish(key, value, spec, ttl_s, "", started))
        return value

    # --- background work ------------------------------------------------------------------------------

    def _soon(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _publish(self, key: str, value: Any, spec: SharedTool, ttl_s: float, token: str,
                       started: float) -> None:
        try:
            payload = encode(value)
        except NotShareable:
            self.stats.not_shareable += 1
            await self._release(key, token)
            return
        await self._publish_payload(key, _STAMP.pack(started) + payload, spec, ttl_s, token)

    async def _publish_payload(self, key: str, payload: bytes, spec: SharedTool, ttl_s: float, token: str) -> None:
        if len(payload) > spec.max_value_bytes:
            self.stats.too_large += 1
            await self._release(key, token)
            return
        try:
            sealed = self._sealer.seal(key, payload, expires_at=self._wall() + ttl_s)
            await self._op(self._backend.publish(key, sealed, ttl_s, token))
            self.stats.published += 1
        except (StoreError, TimeoutError) as exc:
            self._fail(exc)

    async def _release(self, key: str, token: str) -> None:
        if not token:
            return
        try:
            await self._op(self._backend.release(key, token))
        except (StoreError, TimeoutError) as exc:
            self._fail(exc)

    async def close(self) -> None:
        """Finish background publications and close the backend."""
        await self.drain()
        with contextlib.suppress(StoreUnavailableError):
            await self._backend.close()


class _Seam:
    """:class:`SharedSpeculation` seen through the runtime's :class:`~forethought._core.shared.SharedRuns`."""

    def __init__(self, shared: SharedSpeculation) -> None:
        self._shared = shared

    def shares(self, t: Tool) -> bool:
        return self._shared.shares(t)

    async def speculate(self, t: Tool, key: str, run: Callable[[], Any], not_before: float = 0.0) -> Any:
        return await self._shared.speculate_value(t, key, run, not_before)

    def published(self, t: Tool, key: str, value: Any, started_at: float) -> None:
        self._shared.published(t, key, value, started_at)
