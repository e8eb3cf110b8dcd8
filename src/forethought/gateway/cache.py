"""The gateway's tool-output cache: per-response scopes, validated posts, all-or-nothing matching.

Every streamed response the gateway relays opens a :class:`ResponseScope` with a random id and a secret
token (sent to the client in response headers). Speculators post entries to
``/cache-tool-output/{response_id}``; :meth:`ToolOutputCache.post` checks, in this order: the id is known
(404; 410 once the response finished), the token matches (401 missing, 403 wrong), the optional segment
header names the current message (409), the body size (413), its JSON shape (400), each entry's fields
(400; an output, entry count or byte total over the limits: 413). A post is stored whole or not at all,
for the segment it was authorized for: a post whose body arrives after the response moved on is refused
(409), never stored for the message that followed (:class:`PostGrant`).

Where scopes and entries live is the :class:`~forethought.gateway.state.ScopeStore`'s business: in
this process (the default), or in Redis so that any replica takes a post for a response another replica
relays (:mod:`~forethought.gateway.replicas`). This module holds the rules, which are the same for
every store.

A message waits for posts still on their way only if its client announced posts (request header
``x-forethought-cache: post``) or has posted to the response (a client that never posts pays nothing).
Entries belong to their response's current message (*segment*): when the gateway continues the response
after serving results, unused entries are dropped, because they were computed for a conversation state
the continuation has moved past. An entry lives ``keep_alive`` seconds (default and maximum from the
config). :func:`match` pairs the closed calls of one message with entries: every call needs an entry —
same canonical key (:mod:`forethought._core.calls`, schemas from the request's ``tools``), or an entry without
``params`` of the same name when exactly one call of that name is in the message; an ``exclusive`` entry
serves only a message with a single call. Either every call is matched (and the response moves on to its
next segment) or nothing is.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import CallKey, ToolCall
from forethought.errors import InvalidArgumentsError
from forethought.gateway.scope import ResponseScope
from forethought.gateway.state import CachedEntry, LocalScopeStore, PostRejected, ScopeStore

ENTRY_FIELDS = frozenset({"name", "params", "output", "keep_alive", "exclusive"})

__all__ = ["CacheLimits", "CachedEntry", "PostGrant", "PostRejected", "ResponseScope", "ToolOutputCache", "match"]


@dataclass(frozen=True, slots=True)
class CacheLimits:
    """Bounds on what the cache accepts and keeps."""

    default_keep_alive_s: float = 30.0
    max_keep_alive_s: float = 300.0
    max_body_bytes: int = 1 << 20
    max_output_bytes: int = 256 << 10
    max_entries_per_post: int = 64
    max_entries_per_response: int = 256
    max_bytes_per_response: int = 8 << 20
    """Bytes of outputs and canonical arguments held for one message of a response (what a relay reads back
    from a shared store at once)."""
    finished_memory: int = 4096
    max_response_s: float = 3600.0

    def __post_init__(self) -> None:
        if not 0 < self.default_keep_alive_s <= self.max_keep_alive_s:
            raise ValueError("need 0 < default_keep_alive_s <= max_keep_alive_s")
        if min(self.max_body_bytes, self.max_output_bytes, self.max_entries_per_post,
               self.max_entries_per_response, self.max_bytes_per_response, self.finished_memory) < 1 \
                or self.max_response_s <= 0:
            raise ValueError("size limits must be >= 1 and max_response_s > 0")


@dataclass(frozen=True, slots=True)
class PostGrant:
    """A post let in: the scope it writes to and the segment it was let in for (the response's segment when the
    post's headers were checked). Its entries belong to that segment alone; a body that arrives after the
    response moved on is refused (409), so a result computed for one message never serves a later one."""

    scope: ResponseScope
    segment: int


def match(scope: ResponseScope, entries: Sequence[CachedEntry], calls: Sequence[ToolCall | None],
          now: float) -> list[str] | None:
    """Outputs for every call of a message from ``entries`` (live ones of the scope's segment), or ``None``."""
    if not calls or any(c is None for c in calls):
        return None
    live = [e for e in entries if e.expires > now and e.segment == scope.segment]
    names = Counter(c.name for c in calls if c is not None)
    alone = len(calls) == 1
    used: list[int] = []
    for call in calls:
        assert call is not None
        key = scope.key(call)
        usable = [(i, e) for i, e in enumerate(live) if i not in used and (alone or not e.exclusive)]
        found = next((i for i, e in usable if key is not None and e.key == key), None)
        if found is None and names[call.name] == 1:
            found = next((i for i, e in usable if e.key is None and e.name == call.name), None)
        if found is None:
            return None
        used.append(found)
    return [live[i].output for i in used]


class ToolOutputCache:
    """The rules for opening, posting into, matching and closing response scopes, on a :class:`ScopeStore`."""

    def __init__(self, limits: CacheLimits | None = None, deny: Callable[[str], str | None] | None = None,
                 store: ScopeStore | None = None) -> None:
        self.limits = limits or CacheLimits()
        self.store: ScopeStore = store or LocalScopeStore(self.limits.finished_memory, self.limits.max_response_s)
        self._deny = deny
        """Why a tool's results may not be served from the cache (the gateway's policy), or ``None``."""
        self.rejected: Counter[int] = Counter()
        self.posts = 0
        self.entries_cached = 0

    def __len__(self) -> int:
        return self.store.open_count()

    async def open(self, tools: Any, expects_posts: bool = False) -> ResponseScope:
        """A new scope for a response offering ``tools`` (``expects_posts``: its client announced posts)."""
        scope = ResponseScope(f"ftg-{secrets.token_hex(12)}", secrets.token_urlsafe(24), tools, self.store.now(),
                              expects_posts=expects_posts)
        await self.store.create(scope)
        return scope

    async def close(self, scope: ResponseScope) -> None:
        """The response finished: forget its entries; later posts get 410."""
        await self.store.finish(scope)

    async def advance(self, scope: ResponseScope) -> int:
        """The response moves on to its next message: unused entries are dropped; returns the new segment."""
        return await self.store.advance(scope)

    async def take(self, scope: ResponseScope, calls: Sequence[ToolCall | None], wait_s: float) -> list[str] | None:
        """Outputs for every call of a message, retried on every post for up to ``wait_s`` seconds.

        Only a response whose client announced posts, or has posted, waits: a client that does not use the
        cache never pays for it.
        """
        if not calls or any(c is None for c in calls):
            return None
        posts, entries = await self.store.snapshot(scope)
        if not posts and not scope.expects_posts:
            return match(scope, entries, calls, self.store.now())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            outputs = match(scope, entries, calls, self.store.now())
            remaining = deadline - loop.time()
            if outputs is not None or remaining <= 0:
                return outputs
            await self.store.wait_post(scope, posts, remaining)
            posts, entries = await self.store.snapshot(scope)

    async def authorize(self, response_id: str, token: str | None, segment: str | None) -> PostGrant:
        """What a post may write to, and for which segment; raises :class:`PostRejected` (404/410/401/403/409, 503)."""
        try:
            scope = await self.store.authorize(response_id, token)
            if segment is not None and segment.strip() != str(scope.segment):
                raise PostRejected(409, f"the response is at segment {scope.segment}, not {segment!r}")
        except PostRejected as exc:
            self.rejected[exc.status] += 1
            raise
        return PostGrant(scope, scope.segment)

    async def post(self, grant: PostGrant, body: Any) -> int:
        """Validate a parsed body and store its entries for the grant's segment; returns how many were cached
        (409 if the response has moved on since the grant)."""
        scope = grant.scope
        try:
            entries = self._entries(scope, grant.segment, body)
            await self.store.add(scope, grant.segment, entries, self.limits.max_entries_per_response,
                                 self.limits.max_bytes_per_response)
        except PostRejected as exc:
            self.rejected[exc.status] += 1
            raise
        self.posts += 1
        self.entries_cached += len(entries)
        return len(entries)

    def reject(self, status: int) -> None:
        """Count a rejection decided outside :meth:`post` (body too large or not JSON)."""
        self.rejected[status] += 1

    def _entries(self, scope: ResponseScope, segment: int, body: Any) -> list[CachedEntry]:
        if not isinstance(body, list):
            raise PostRejected(400, "body must be a JSON array of {name, params?, output, keep_alive?} objects")
        if len(body) > self.limits.max_entries_per_post:
            raise PostRejected(413, f"too many entries in one post (at most {self.limits.max_entries_per_post})")
        now = self.store.now()
        return [self._entry(scope, segment, item, i, now) for i, item in enumerate(body)]

    def _entry(self, scope: ResponseScope, segment: int, item: Any, i: int, now: float) -> CachedEntry:
        where = f"entry {i}"
        if not isinstance(item, dict):
            raise PostRejected(400, f"{where} must be an object")
        unknown = sorted(set(item) - ENTRY_FIELDS)
        if unknown:
            raise PostRejected(400, f"{where} has unknown field(s) {unknown}; allowed: {sorted(ENTRY_FIELDS)}")
        name, output = item.get("name"), item.get("output")
        if not isinstance(name, str) or not name:
            raise PostRejected(400, f"{where}: name must be a non-empty string")
        if not isinstance(output, str):
            raise PostRejected(400, f"{where}: output must be a string (the text the model will see)")
        if len(output.encode("utf-8", "surrogatepass")) > self.limits.max_output_bytes:
            raise PostRejected(413, f"{where}: output exceeds {self.limits.max_output_bytes} bytes")
        if not scope.offers(name):
            raise PostRejected(400, f"{where}: the response offers no tool named {name!r}")
        denied = self._deny(name) if self._deny is not None else None
        if denied is not None:
            raise PostRejected(403, f"{where}: the gateway's policy does not serve {name!r} from the cache ({denied})")
        key: CallKey | None = None
        if "params" in item:
            params = item["params"]
            if not isinstance(params, dict):
                raise PostRejected(400, f"{where}: params must be an object")
            spec = scope.spec(name)
            if spec is None:
                raise PostRejected(400, f"{where}: the schema of {name!r} cannot be used to match calls")
            try:
                key = spec.key(ToolCall(name, params))
            except InvalidArgumentsError as exc:
                raise PostRejected(400, f"{where}: params do not fit the tool's schema: {exc}") from None
        keep_alive = item.get("keep_alive", self.limits.default_keep_alive_s)
        if isinstance(keep_alive, bool) or not isinstance(keep_alive, int | float) or not (
                math.isfinite(keep_alive) and keep_alive > 0):
            raise PostRejected(400, f"{where}: keep_alive must be a positive number of seconds")
        exclusive = item.get("exclusive", False)
        if not isinstance(exclusive, bool):
            raise PostRejected(400, f"{where}: exclusive must be true or false")
        expires = now + min(float(keep_alive), self.limits.max_keep_alive_s)
        return CachedEntry(name, key, output, expires, exclusive, segment)
