"""Gateway replicas: response scopes and cached entries in Redis, so any replica takes a post for any response.

:class:`RedisScopeStore` is the :class:`~forethought.gateway.state.ScopeStore` that several gateway
processes (on one machine or many) share through one Redis (:mod:`forethought.stores.gateway_scopes` has
the commands). The replica that relays a response keeps its stream, its segment and its token; Redis holds
what another replica needs to accept a post: the scope (sealed: a keyed digest of the token, never the
token, and the request's tools, whose schemas decide what a post's ``params`` match), the segment, a post
counter and the entries.

Authenticated: every value read from Redis (scope and entries) is opened with the deployment secret
(:class:`~forethought.stores.sealing.Sealer`, HMAC-SHA256 over the key and the payload) before it is
used; a value that fails is ignored with a ``rejected`` event, so a Redis writer without the secret can
cost a miss, never a wrong result. Entries carry the segment they were posted for inside the seal, and
the relaying replica matches only entries of its own current segment. A scope's seal also carries the end
of its maximum life, so a scope put back into Redis after its TTL ran out is refused.

Expiry is measured on ``clock`` (wall-clock time by default: replicas on several machines share it, so
``keep_alive`` should be much longer than their clock skew). Scope keys carry the response's maximum life
as a Redis TTL, so an abandoned response disappears by itself.

Degrading (never a wrong result): an error or a timeout (``op_timeout_s``) emits a ``degraded``
:class:`~forethought.stores.events.StoreEvent` (logged) and Redis is not tried again for
``retry_after_s``. Meanwhile a new response is kept **local-only** (this replica alone takes its posts;
any other answers 404), a post for a response this replica cannot look up answers **503**, and a relay
that cannot read its entries ends the message as a miss. The first operation that succeeds afterwards
emits ``recovered``. A value in Redis that is not what this module wrote (a garbled post count) costs that
response a miss and never marks the store down. ``stats()`` shows the state and Redis round-trip times.

Owed writes: what Redis must learn of a response this replica relays — that it moved on to a segment, that
it finished, or that a create whose answer timed out must be undone (the response went local-only) — is
owed until Redis has it: sent again before this replica's next read or write of that response and, in the
background, as soon as Redis is tried again. Until then the relay reads nothing for it (a miss), a post
to this replica for the segment it moved to is refused (503), and on this replica a finished response
answers 410. Another replica that reaches Redis meanwhile judges posts by the segment Redis still has:
one naming the new segment gets 409, and one naming none is taken for the old message and dropped with
it, never served. ``advance`` names its segment, so sending it twice changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette

from forethought.gateway.cache import ResponseScope
from forethought.gateway.state import (
    CachedEntry,
    LocalScopeStore,
    PostRejected,
    check_token,
    entry_bytes,
    finished,
    moved_on,
    too_big,
)
from forethought.stores.errors import StoreError, StoreIntegrityError, StoreUnavailableError
from forethought.stores.events import EventSink, StoreEvent, emit
from forethought.stores.gateway_scopes import FINISHED, MOVED_ON, TOO_BIG, TOO_MANY, UNKNOWN, RedisScopeBackend
from forethought.stores.sealing import MIN_SECRET_BYTES, NotShareable, Sealer, decode, encode

OP_TIMEOUT_S = 0.25
RETRY_AFTER_S = 5.0
POLL_S = 0.001
MAX_POLL_S = 0.008
MAX_SCOPE_BYTES = 1 << 20
"""A scope (mostly the request's tools) larger than this stays local-only."""
MAX_RTT_SAMPLES = 10_000
STORE_NAME = "gateway-scopes"
REPAIR_MIN_S = 0.05
"""The shortest pause between two tries of the writes Redis is owed (when ``retry_after_s`` is shorter)."""
_ADVANCE, _FINISH, _FORGET = "advance", "finish", "forget"
_UNAVAILABLE = "the gateway's shared state (Redis) is unavailable; run the tool yourself"
_GARBLED = "this response's shared state in Redis is garbled; run the tool yourself"

T = TypeVar("T")


class RedisScopeStore:
    """A :class:`~forethought.gateway.state.ScopeStore` shared by gateway replicas through Redis."""

    kind = "redis"

    def __init__(self, backend: RedisScopeBackend, secret: bytes, *, max_response_s: float = 3600.0,
                 clock: Callable[[], float] = time.time, on_event: EventSink | None = None,
                 op_timeout_s: float = OP_TIMEOUT_S, retry_after_s: float = RETRY_AFTER_S,
                 finished_memory: int = 4096) -> None:
        self._backend = backend
        self._sealer = Sealer(secret)
        self._max_response_s = max_response_s
        self._clock = clock
        self._on_event = on_event
        self._op_timeout_s = op_timeout_s
        self._retry_after_s = retry_after_s
        self._mine: dict[str, ResponseScope] = {}
        """Responses this replica relays through Redis."""
        self._local = LocalScopeStore(finished_memory, max_response_s, clock)
        """Responses opened while Redis was away (or too large for it): this replica alone serves them."""
        self._finished_memory = finished_memory
        self._owed: dict[str, tuple[str, int, float]] = {}
        """Response id -> the write Redis still lacks (kind, segment, when it was first owed; monotonic)."""
        self._repair: asyncio.Task[None] | None = None
        self._closed = False
        self._down_until: float | None = None
        self.degraded = False
        self.errors = 0
        self.rejected = 0
        self.local_only = 0
        self.rtt_s: deque[float] = deque(maxlen=MAX_RTT_SAMPLES)

    @classmethod
    def from_url(cls, url: str, secret: bytes, **options: Any) -> RedisScopeStore:
        """A store on a new Redis client for ``url`` (see :meth:`RedisScopeBackend.from_url`)."""
        return cls(RedisScopeBackend.from_url(url), secret, **options)

    def now(self) -> float:
        return self._clock()

    def open_count(self) -> int:
        return len(self._mine) + self._local.open_count()

    # --- health ---------------------------------------------------------------------------------------

    def _usable(self) -> bool:
        return self._down_until is None or time.monotonic() >= self._down_until

    def _fail(self, exc: BaseException) -> None:
        self.errors += 1
        self._down_until = time.monotonic() + self._retry_after_s
        if not self.degraded:
            self.degraded = True
            emit(self._on_event, StoreEvent("degraded", STORE_NAME, f"{type(exc).__name__}: {exc}"))

    def _ok(self) -> None:
        if self.degraded:
            self.degraded = False
            self._down_until = None
            emit(self._on_event, StoreEvent("recovered", STORE_NAME))

    async def _op(self, operation: Callable[[], Awaitable[T]]) -> T:
        """One bounded Redis operation; raises :class:`StoreError` (or ``TimeoutError``) and marks the store down."""
        if not self._usable():
            raise StoreUnavailableError("Redis is skipped until its retry period ends")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._op_timeout_s):
                result = await operation()
        except (StoreUnavailableError, TimeoutError) as exc:
            self._fail(exc)
            raise
        except StoreError:
            raise  # Redis answered, refusing what one response's keys hold: that response misses, Redis is fine
        finally:
            self.rtt_s.append(time.perf_counter() - started)
        self._ok()
        return result

    def _reject(self, what: str) -> None:
        self.rejected += 1
        emit(self._on_event, StoreEvent("rejected", STORE_NAME, what))

    # --- writes Redis is owed -------------------------------------------------------------------------

    def _owe(self, response_id: str, kind: str, segment: int = 0) -> None:
        self._owed.pop(response_id, None)  # re-inserted last: the oldest are dropped first past the bound
        self._owed[response_id] = (kind, segment, time.monotonic())
        while len(self._owed) > self._finished_memory:  # the keys of the oldest end by their TTL ...
            victim = next((r for r, (k, _, _) in self._owed.items() if k != _ADVANCE or r not in self._mine), None)
            if victim is None:  # ... but a response still relayed here keeps the move it is owed
                break
            del self._owed[victim]

    def _finished_here(self, response_id: str) -> bool:
        """Whether this replica finished the response and Redis does not know yet (its finish is owed)."""
        owed = self._owed.get(response_id)
        return owed is not None and owed[0] == _FINISH

    async def _settle(self, response_id: str) -> bool:
        """Send what Redis is owed for ``response_id``, if anything; whether Redis has it now."""
        owed = self._owed.get(response_id)
        if owed is None:
            return True
        kind, segment, _ = owed
        try:
            if kind == _ADVANCE:
                await self._op(lambda: self._backend.advance(response_id, segment))
            elif kind == _FINISH:
                await self._op(lambda: self._backend.finish(response_id, self._max_response_s))
            else:
                await self._op(lambda: self._backend.forget(response_id))
        except (StoreUnavailableError, TimeoutError):
            self._schedule_repair()
            return False
        except StoreError:  # refused: the response's keys are garbled; sending it again would not help
            if self._owed.get(response_id) is owed:
                del self._owed[response_id]
            self._reject("a write owed to a garbled gateway scope was dropped")
            return False
        except BaseException:  # cancelled on the way (a client hung up): sent again later, landed or not
            self._schedule_repair()
            raise
        if self._owed.get(response_id) is owed:
            del self._owed[response_id]
        return True

    def _schedule_repair(self) -> None:
        if not self._closed and (self._repair is None or self._repair.done()):
            self._repair = asyncio.get_running_loop().create_task(self._repair_owed())

    async def _repair_owed(self) -> None:
        """Send every owed write as soon as Redis is tried again, until none is left (or the store closes)."""
        while self._owed and not self._closed:
            wait = 0.0 if self._down_until is None else self._down_until - time.monotonic()
            await asyncio.sleep(max(wait, REPAIR_MIN_S))
            now = time.monotonic()
            for response_id, (_, _, since) in list(self._owed.items()):
                if now - since > self._max_response_s:  # its keys have expired by now
                    self._owed.pop(response_id, None)
                elif not await self._settle(response_id) and response_id in self._owed:
                    break  # Redis is away again (a garbled response's write is dropped: the others go on)

    # --- the protocol ---------------------------------------------------------------------------------

    async def create(self, scope: ResponseScope) -> None:
        for stale in [s for s in self._mine.values() if scope.created - s.created > self._max_response_s]:
            del self._mine[stale.response_id]  # never relayed to its end (its keys expire by their TTL)
        key = self._backend.key(scope.response_id, "meta")
        try:
            meta = self._sealer.seal(key, encode({"token": self._token_digest(scope.token), "tools": scope.tools,
                                                  "created": scope.created}),
                                     expires_at=scope.created + self._max_response_s)
        except NotShareable:
            meta = b""
        if not meta or len(meta) > MAX_SCOPE_BYTES or not self._usable():
            await self._keep_local(scope)
            return
        try:
            await self._op(lambda: self._backend.create(scope.response_id, meta, self._max_response_s))
        except (StoreError, TimeoutError):
            # The create may have landed after all (its answer was lost or late): undo it once Redis answers,
            # so that no other replica takes posts for a response this replica keeps to itself.
            self._owe(scope.response_id, _FORGET)
            self._schedule_repair()
            await self._keep_local(scope)
            return
        except BaseException:  # cancelled on the way (the client hung up): undone too, in case it landed
            self._owe(scope.response_id, _FORGET)
            self._schedule_repair()
            raise
        self._mine[scope.response_id] = scope

    async def _keep_local(self, scope: ResponseScope) -> None:
        self.local_only += 1
        await self._local.create(scope)

    def _token_digest(self, token: str) -> str:
        return self._sealer.digest("token\0" + token)

    async def authorize(self, response_id: str, token: str | None) -> ResponseScope:
        if self._local.has(response_id):
            return await self._local.authorize(response_id, token)
        mine = self._mine.get(response_id)
        if mine is not None:
            check_token(mine.token, token)
            return mine
        if self._finished_here(response_id):
            raise finished(response_id)
        try:
            sealed, segment, posts = await self._op(lambda: self._backend.lookup(response_id))
        except StoreIntegrityError:
            raise PostRejected(503, _GARBLED) from None
        except (StoreError, TimeoutError):
            raise PostRejected(503, _UNAVAILABLE) from None
        if sealed is None:
            if segment == FINISHED:
                raise finished(response_id)
            return await self._local.authorize(response_id, token)  # 404, or 410 if finished while local
        try:
            meta = decode(self._sealer.open(self._backend.key(response_id, "meta"), sealed, now=self._clock()))
            digest, tools, created = str(meta["token"]), meta["tools"], float(meta["created"])
        except (StoreIntegrityError, ValueError, KeyError, TypeError):
            self._reject("a gateway scope failed its authentication")
            raise PostRejected(404, f"unknown response id {response_id!r}") from None
        check_token(digest, self._token_digest(token) if token else token)
        return ResponseScope(response_id, "", tools, created, segment=segment, posts=posts)

    async def add(self, scope: ResponseScope, segment: int, entries: Sequence[CachedEntry], limit: int,
                  max_bytes: int) -> None:
        if self._local.has(scope.response_id):
            await self._local.add(scope, segment, entries, limit, max_bytes)
            return
        mine = self._mine.get(scope.response_id)
        if mine is not None:
            if segment != mine.segment:  # moved on while the post's body was on its way
                raise PostRejected(409, moved_on(segment))
            if not await self._settle(scope.response_id):
                raise PostRejected(503, _UNAVAILABLE)
        elif self._finished_here(scope.response_id):
            raise finished(scope.response_id)
        key = self._backend.key(scope.response_id, "entries")
        sealed = [self._sealer.seal(key, encode({"name": e.name, "key": e.key, "output": e.output,
                                                 "expires": e.expires, "exclusive": e.exclusive,
                                                 "segment": e.segment}), expires_at=e.expires) for e in entries]
        size = entry_bytes(entries)
        try:
            posts = await self._op(lambda: self._backend.append(scope.response_id, segment, sealed, limit, max_bytes,
                                                                size))
        except StoreIntegrityError:
            raise PostRejected(503, _GARBLED) from None
        except (StoreError, TimeoutError):
            raise PostRejected(503, _UNAVAILABLE) from None
        if posts == UNKNOWN:
            raise PostRejected(404, f"unknown response id {scope.response_id!r}")
        if posts == FINISHED:
            raise finished(scope.response_id)
        if posts == MOVED_ON:
            raise PostRejected(409, moved_on(segment))
        if posts == TOO_MANY:
            raise PostRejected(413, f"too many cached entries for this response (at most {limit})")
        if posts == TOO_BIG:
            raise PostRejected(413, too_big(max_bytes))
        for target in {id(s): s for s in (scope, mine) if s is not None}.values():
            target.posts = max(target.posts, posts)
            target.posted.set()

    async def snapshot(self, scope: ResponseScope) -> tuple[int, list[CachedEntry]]:
        if self._local.has(scope.response_id):
            return await self._local.snapshot(scope)
        if not await self._settle(scope.response_id):
            return scope.posts, []  # Redis may still hold an earlier message's entries: a miss
        try:
            posts, sealed = await self._op(lambda: self._backend.snapshot(scope.response_id))
        except (StoreError, TimeoutError):
            return scope.posts, []  # nothing to serve: the message ends as a miss
        scope.posts = max(scope.posts, posts)
        key = self._backend.key(scope.response_id, "entries")
        entries = []
        for value in sealed:
            try:
                item = decode(self._sealer.open(key, value))
                entries.append(CachedEntry(str(item["name"]), None if item["key"] is None else str(item["key"]),
                                           str(item["output"]), float(item["expires"]), bool(item["exclusive"]),
                                           int(item["segment"])))
            except (StoreIntegrityError, ValueError, KeyError, TypeError):
                self._reject("a cached gateway entry failed its authentication")
        return scope.posts, entries

    async def wait_post(self, scope: ResponseScope, posts: int, timeout_s: float) -> None:
        if self._local.has(scope.response_id):
            await self._local.wait_post(scope, posts, timeout_s)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        poll = POLL_S
        while scope.posts <= posts:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            scope.posted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(scope.posted.wait(), min(poll, remaining))  # a post to this replica
            if scope.posts > posts:
                return
            try:
                scope.posts = max(scope.posts, await self._op(lambda: self._backend.posts(scope.response_id)))
            except (StoreError, TimeoutError):  # no post can land now: wait out the bound, then it is a miss
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                return
            poll = min(poll * 2, MAX_POLL_S)

    async def advance(self, scope: ResponseScope) -> int:
        if self._local.has(scope.response_id):
            return await self._local.advance(scope)
        scope.segment += 1  # this replica's count is the truth; Redis follows it for other replicas' 409s
        self._owe(scope.response_id, _ADVANCE, scope.segment)
        await self._settle(scope.response_id)
        return scope.segment

    async def finish(self, scope: ResponseScope) -> None:
        if self._local.has(scope.response_id):
            await self._local.finish(scope)
            return
        if self._mine.pop(scope.response_id, None) is None:
            return
        self._owe(scope.response_id, _FINISH)  # supersedes an advance still owed
        await self._settle(scope.response_id)

    def stats(self) -> dict[str, Any]:
        samples = sorted(self.rtt_s)
        out: dict[str, Any] = {"kind": self.kind, "degraded": self.degraded, "errors": self.errors,
                               "rejected": self.rejected, "local_only": self.local_only, "owed": len(self._owed),
                               "operations": self._backend.operations}
        if samples:
            out["rtt_p50_ms"] = statistics.median(samples) * 1000
            out["rtt_p99_ms"] = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000
        return out

    async def aclose(self) -> None:
        self._closed = True
        if self._repair is not None:
            self._repair.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._repair
        with contextlib.suppress(StoreError):
            await self._backend.close()


def load_secret(path: str | Path) -> bytes:
    """The deployment secret in a file (its bytes, surrounding whitespace stripped; at least 16 of them)."""
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise StoreError(f"cannot read the secret file {path}: {exc.strerror}") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise StoreError(f"the secret in {path} has {len(secret)} bytes; at least {MIN_SECRET_BYTES} are needed")
    return secret


def replica_store(redis_url: str, secret: bytes, limits: Any = None) -> RedisScopeStore:
    """The store of one replica on the Redis at ``redis_url``, under the gateway's ``limits`` (a
    :class:`~forethought.gateway.cache.CacheLimits`: a response's maximum life, finished responses remembered),
    as the local store is."""
    from forethought.gateway.cache import CacheLimits

    bounds = limits if isinstance(limits, CacheLimits) else CacheLimits()
    return RedisScopeStore.from_url(redis_url, secret, max_response_s=bounds.max_response_s,
                                    finished_memory=bounds.finished_memory)


def create_replica(upstream_base_url: str, redis_url: str, secret: bytes, config: Any = None) -> Starlette:
    """The app of a gateway replica sharing its scopes through Redis at ``redis_url`` (importable, picklable)."""
    from forethought.gateway.app import Gateway

    gateway = Gateway(upstream_base_url, config, replica_store(redis_url, secret, getattr(config, "limits", None)))
    return gateway.app
