"""Where the gateway keeps response scopes and their cached entries: the :class:`ScopeStore` seam.

A store holds, per relayed response, its scope (id, token, the request's tools), its current segment, a
counter of accepted posts, the entries posted for the current segment, and, once the response finished,
a marker so that late posts get 410. The rules (what a valid post is, how entries match calls) live in
:mod:`~forethought.gateway.cache` and are the same for every store.

* :class:`LocalScopeStore` keeps everything in this process (the default; one gateway process).
* :class:`~forethought.gateway.replicas.RedisScopeStore` keeps it in Redis, so a post to any
  replica reaches the replica that relays the response.

Every method may be awaited on the event loop of the gateway; none raises anything but
:class:`PostRejected` (a store that loses its backend degrades as its docstring says).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from forethought._core.calls import CallKey

if TYPE_CHECKING:
    from forethought.gateway.scope import ResponseScope


class PostRejected(Exception):
    """A post the cache refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class CachedEntry:
    """One posted tool output: matched by canonical ``key`` (or by ``name`` alone when ``key`` is None)."""

    name: str
    key: CallKey | None
    output: str
    expires: float
    """On the store's clock (:meth:`ScopeStore.now`)."""
    exclusive: bool
    segment: int
    """The message of the response it was posted for."""


class ScopeStore(Protocol):
    """Response scopes and their entries (see the module docstring)."""

    kind: str
    """``local`` or ``redis`` (shown in stats)."""

    def now(self) -> float:
        """The clock entry expiry is measured on (shared by every replica of a shared store)."""

    def open_count(self) -> int:
        """Responses this replica relays now."""

    async def create(self, scope: ResponseScope) -> None:
        """Register a new response (this replica relays it)."""

    async def authorize(self, response_id: str, token: str | None) -> ResponseScope:
        """The scope a post with ``token`` may write to; :class:`PostRejected` 404/410/401/403 (503: store away)."""

    async def add(self, scope: ResponseScope, segment: int, entries: Sequence[CachedEntry], limit: int,
                  max_bytes: int) -> None:
        """Store ``entries``, posted for ``segment``, whole or not at all: 409 if the response is no longer at
        ``segment``, 410 if it finished, 413 past ``limit`` entries or ``max_bytes`` bytes (:func:`entry_bytes`) per
        segment."""

    async def snapshot(self, scope: ResponseScope) -> tuple[int, list[CachedEntry]]:
        """Accepted posts so far, and the entries of the scope's current segment."""

    async def wait_post(self, scope: ResponseScope, posts: int, timeout_s: float) -> None:
        """Return once more than ``posts`` posts were accepted, or after ``timeout_s``."""

    async def advance(self, scope: ResponseScope) -> int:
        """Drop the entries of the current segment and move on to the next; returns it."""

    async def finish(self, scope: ResponseScope) -> None:
        """The response ended: forget it; later posts get 410."""

    def stats(self) -> dict[str, Any]:
        """What the store did (kind, health, round trips)."""

    async def aclose(self) -> None:
        """Release connections."""


def finished(response_id: str) -> PostRejected:
    """The 410 of a post for a response that has finished."""
    return PostRejected(410, f"response {response_id!r} has finished")


def moved_on(segment: int) -> str:
    """The 409 message of a post for a segment the response has left."""
    return f"the response has moved on from segment {segment}"


def too_big(max_bytes: int) -> str:
    """The 413 message of a post past the bound on the bytes a message's entries hold."""
    return f"too many bytes of cached entries for this response's message (at most {max_bytes})"


def entry_bytes(entries: Iterable[CachedEntry]) -> int:
    """The UTF-8 size of the entries' outputs and keys (their canonical arguments): what a message's bound on
    bytes counts."""
    return sum(len(e.output.encode("utf-8", "surrogatepass")) + len((e.key or "").encode("utf-8", "surrogatepass"))
               for e in entries)


def check_token(expected: str, token: str | None) -> None:
    """:class:`PostRejected` 401 without a token, 403 for another one (constant-time comparison)."""
    if not token:
        raise PostRejected(401, "missing x-forethought-token header")
    if not hmac.compare_digest(token.encode(), expected.encode()):
        raise PostRejected(403, "token does not belong to this response")


class LocalScopeStore:
    """A :class:`ScopeStore` in this process's memory (one event loop)."""

    kind = "local"

    def __init__(self, finished_memory: int = 4096, max_response_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._finished_memory = finished_memory
        self._max_response_s = max_response_s
        self._scopes: dict[str, ResponseScope] = {}
        self._entries: dict[str, list[CachedEntry]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()

    def now(self) -> float:
        return self._clock()

    def open_count(self) -> int:
        return len(self._scopes)

    def has(self, response_id: str) -> bool:
        """Whether this store holds the (unfinished) response."""
        return response_id in self._scopes

    async def create(self, scope: ResponseScope) -> None:
        now = self._clock()
        for stale in [s for s in self._scopes.values() if now - s.created > self._max_response_s]:
            await self.finish(stale)
        self._scopes[scope.response_id] = scope
        self._entries[scope.response_id] = []

    async def authorize(self, response_id: str, token: str | None) -> ResponseScope:
        scope = self._scopes.get(response_id)
        if scope is None:
            if response_id in self._finished:
                raise finished(response_id)
            raise PostRejected(404, f"unknown response id {response_id!r}")
        check_token(scope.token, token)
        return scope

    async def add(self, scope: ResponseScope, segment: int, entries: Sequence[CachedEntry], limit: int,
                  max_bytes: int) -> None:
        held = self._entries.get(scope.response_id)
        if held is None:
            raise finished(scope.response_id)
        if segment != scope.segment:
            raise PostRejected(409, moved_on(segment))
        now = self._clock()
        live = [e for e in held if e.expires > now and e.segment == scope.segment]
        if len(live) + len(entries) > limit:
            raise PostRejected(413, f"too many cached entries for this response (at most {limit})")
        if entry_bytes(live) + entry_bytes(entries) > max_bytes:
            raise PostRejected(413, too_big(max_bytes))
        self._entries[scope.response_id] = live + list(entries)
        scope.posts += 1
        scope.posted.set()

    async def snapshot(self, scope: ResponseScope) -> tuple[int, list[CachedEntry]]:
        return scope.posts, list(self._entries.get(scope.response_id, ()))

    async def wait_post(self, scope: ResponseScope, posts: int, timeout_s: float) -> None:
        if scope.posts > posts:
            return
        scope.posted.clear()
        try:
            await asyncio.wait_for(scope.posted.wait(), timeout_s)
        except TimeoutError:
            return

    async def advance(self, scope: ResponseScope) -> int:
        if scope.response_id in self._entries:
            self._entries[scope.response_id] = []
        scope.segment += 1
        return scope.segment

    async def finish(self, scope: ResponseScope) -> None:
        if self._scopes.pop(scope.response_id, None) is None:
            return
        self._entries.pop(scope.response_id, None)
        self._finished[scope.response_id] = None
        while len(self._finished) > self._finished_memory:
            self._finished.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        return {"kind": self.kind}

    async def aclose(self) -> None:
        """Nothing to release."""
