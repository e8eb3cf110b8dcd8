"""The gateway's tool-output cache: per-response scopes, validated posts, all-or-nothing matching.

Every streamed response the gateway relays opens a :class:`ResponseScope` with a random id and a secret
token (sent to the client in response headers). Speculators post entries to
``/cache-tool-output/{response_id}``; :meth:`ToolOutputCache.post` checks, in this order: the id is known
(404; 410 once the response finished), the token matches (401 missing, 403 wrong), the optional segment
header names the current message (409), the body size (413), its JSON shape (400), each entry's fields
(400; an output or entry count over the limits: 413). A post is stored whole or not at all.

A message waits for posts still on their way only if its client announced posts (request header
``x-forethought-cache: post``) or has posted to the response (a client that never posts pays nothing).
Entries belong to their response's current message (*segment*): when the gateway continues the response
after serving results, unused entries are dropped, because they were computed for a conversation state
the continuation has moved past. An entry lives ``keep_alive`` seconds (default and maximum from the
config). :meth:`ResponseScope.take` matches the closed calls of one message: every call needs an entry —
same canonical key (:mod:`forethought._calls`, schemas from the request's ``tools``), or an entry without
``params`` of the same name when exactly one call of that name is in the message; an ``exclusive`` entry
serves only a message with a single call. Either every call is matched (and the entries are used up) or
nothing is.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._calls import ArgumentSpec, CallKey, ToolCall, compile_arguments
from forethought.errors import InvalidArgumentsError

ENTRY_FIELDS = frozenset({"name", "params", "output", "keep_alive", "exclusive"})


@dataclass(frozen=True, slots=True)
class CacheLimits:
    """Bounds on what the cache accepts and keeps."""

    default_keep_alive_s: float = 30.0
    max_keep_alive_s: float = 300.0
    max_body_bytes: int = 1 << 20
    max_output_bytes: int = 256 << 10
    max_entries_per_post: int = 64
    max_entries_per_response: int = 256
    finished_memory: int = 4096
    max_response_s: float = 3600.0

    def __post_init__(self) -> None:
        if not 0 < self.default_keep_alive_s <= self.max_keep_alive_s:
            raise ValueError("need 0 < default_keep_alive_s <= max_keep_alive_s")
        if min(self.max_body_bytes, self.max_output_bytes, self.max_entries_per_post,
               self.max_entries_per_response, self.finished_memory) < 1 or self.max_response_s <= 0:
            raise ValueError("size limits must be >= 1 and max_response_s > 0")


class PostRejected(Exception):
    """A post the cache refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True, eq=False)
class _Entry:
    name: str
    key: CallKey | None
    output: str
    expires: float
    exclusive: bool


def tool_parameters(tools: Any) -> dict[str, Mapping[str, Any] | None]:
    """Tool name -> parameters schema of the tools a chat request offers (non-functions are skipped)."""
    out: dict[str, Mapping[str, Any] | None] = {}
    for entry in tools if isinstance(tools, list) else ():
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            out[function["name"]] = parameters if isinstance(parameters, Mapping) else None
    return out


@dataclass(slots=True)
class ResponseScope:
    """One relayed response: its id, token, tool specs, current segment and cached entries."""

    response_id: str
    token: str
    tools: Any
    created: float
    clock: Callable[[], float]
    segment: int = 0
    entries: list[_Entry] = field(default_factory=list)
    posted: asyncio.Event = field(default_factory=asyncio.Event)
    posts: int = 0
    """Accepted posts over the whole response."""
    expects_posts: bool = False
    """The client announced it will post (``x-forethought-cache: post``)."""
    _parameters: dict[str, Mapping[str, Any] | None] | None = None
    _specs: dict[str, ArgumentSpec | None] = field(default_factory=dict)

    def offers(self, name: str) -> bool:
        """Whether the request offered a tool of this name."""
        if self._parameters is None:
            self._parameters = tool_parameters(self.tools)
        return name in self._parameters

    def spec(self, name: str) -> ArgumentSpec | None:
        """The argument spec of an offered tool (compiled on first use); ``None`` if absent or unusable."""
        if name not in self._specs:
            spec = None
            if self.offers(name):
                assert self._parameters is not None
                try:
                    spec = compile_arguments(name, self._parameters[name])
                except Exception:  # a schema the canonicaliser cannot compile: the tool is never served
                    spec = None
            self._specs[name] = spec
        return self._specs[name]

    def key(self, call: ToolCall) -> CallKey | None:
        """The canonical key of ``call`` under this response's schemas; ``None`` if it has none."""
        spec = self.spec(call.name)
        if spec is None:
            return None
        try:
            return spec.key(call)
        except InvalidArgumentsError:
            return None

    def add(self, entries: Sequence[_Entry], limit: int) -> None:
        now = self.clock()
        self.entries = [e for e in self.entries if e.expires > now]
        if len(self.entries) + len(entries) > limit:
            raise PostRejected(413, f"too many cached entries for this response (at most {limit})")
        self.entries.extend(entries)
        self.posts += 1
        self.posted.set()

    def take(self, calls: Sequence[ToolCall | None]) -> list[str] | None:
        """Outputs for every call of a message (entries used up), or ``None`` (nothing used)."""
        if not calls or any(c is None for c in calls):
            return None
        now = self.clock()
        live = [e for e in self.entries if e.expires > now]
        names = Counter(c.name for c in calls if c is not None)
        alone = len(calls) == 1
        used: list[_Entry] = []
        for call in calls:
            assert call is not None
            key = self.key(call)
            usable = [e for e in live if e not in used and (alone or not e.exclusive)]
            match = next((e for e in usable if key is not None and e.key == key), None)
            if match is None and names[call.name] == 1:
                match = next((e for e in usable if e.key is None and e.name == call.name), None)
            if match is None:
                return None
            used.append(match)
        self.entries = [e for e in live if e not in used]
        return [e.output for e in used]

    async def wait_take(self, calls: Sequence[ToolCall | None], wait_s: float) -> list[str] | None:
        """:meth:`take`, retried on every post for up to ``wait_s`` seconds.

        Only a response whose client announced posts, or has posted, waits: a client that does not use the
        cache never pays for it.
        """
        if not self.posts and not self.expects_posts:
            return self.take(calls)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            self.posted.clear()
            outputs = self.take(calls)
            remaining = deadline - loop.time()
            if outputs is not None or remaining <= 0 or any(c is None for c in calls):
                return outputs
            try:
                await asyncio.wait_for(self.posted.wait(), remaining)
            except TimeoutError:
                return self.take(calls)

    def advance(self) -> int:
        """The response moves on to its next message: drop unused entries; returns the new segment."""
        self.entries.clear()
        self.segment += 1
        return self.segment


class ToolOutputCache:
    """All open response scopes of one gateway, and the rules for posting into them."""

    def __init__(self, limits: CacheLimits | None = None, clock: Callable[[], float] = time.monotonic,
                 deny: Callable[[str], str | None] | None = None) -> None:
        self.limits = limits or CacheLimits()
        self._clock = clock
        self._deny = deny
        """Why a tool's results may not be served from the cache (the gateway's policy), or ``None``."""
        self._scopes: dict[str, ResponseScope] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self.rejected: Counter[int] = Counter()
        self.posts = 0
        self.entries_cached = 0

    def __len__(self) -> int:
        return len(self._scopes)

    def open(self, tools: Any, expects_posts: bool = False) -> ResponseScope:
        """A new scope for a response offering ``tools`` (``expects_posts``: its client announced posts)."""
        now = self._clock()
        for stale in [s for s in self._scopes.values() if now - s.created > self.limits.max_response_s]:
            self.close(stale)
        scope = ResponseScope(f"ftg-{secrets.token_hex(12)}", secrets.token_urlsafe(24), tools, now, self._clock,
                              expects_posts=expects_posts)
        self._scopes[scope.response_id] = scope
        return scope

    def close(self, scope: ResponseScope) -> None:
        """The response finished: forget its entries; later posts get 410."""
        if self._scopes.pop(scope.response_id, None) is None:
            return
        scope.entries.clear()
        self._finished[scope.response_id] = None
        while len(self._finished) > self.limits.finished_memory:
            self._finished.popitem(last=False)

    def authorize(self, response_id: str, token: str | None, segment: str | None) -> ResponseScope:
        """The scope a post may write to; raises :class:`PostRejected` (404/410/401/403/409)."""
        try:
            scope = self._scopes.get(response_id)
            if scope is None:
                if response_id in self._finished:
                    raise PostRejected(410, f"response {response_id!r} has finished")
                raise PostRejected(404, f"unknown response id {response_id!r}")
            if not token:
                raise PostRejected(401, "missing x-forethought-token header")
            if not hmac.compare_digest(token.encode(), scope.token.encode()):
                raise PostRejected(403, "token does not belong to this response")
            if segment is not None and segment.strip() != str(scope.segment):
                raise PostRejected(409, f"the response is at segment {scope.segment}, not {segment!r}")
        except PostRejected as exc:
            self.rejected[exc.status] += 1
            raise
        return scope

    def post(self, scope: ResponseScope, body: Any) -> int:
        """Validate a parsed body and store its entries in ``scope``; returns how many were cached."""
        try:
            entries = self._entries(scope, body)
            scope.add(entries, self.limits.max_entries_per_response)
        except PostRejected as exc:
            self.rejected[exc.status] += 1
            raise
        self.posts += 1
        self.entries_cached += len(entries)
        return len(entries)

    def reject(self, status: int) -> None:
        """Count a rejection decided outside :meth:`post` (body too large or not JSON)."""
        self.rejected[status] += 1

    def _entries(self, scope: ResponseScope, body: Any) -> list[_Entry]:
        if not isinstance(body, list):
            raise PostRejected(400, "body must be a JSON array of {name, params?, output, keep_alive?} objects")
        if len(body) > self.limits.max_entries_per_post:
            raise PostRejected(413, f"too many entries in one post (at most {self.limits.max_entries_per_post})")
        now = self._clock()
        return [self._entry(scope, item, i, now) for i, item in enumerate(body)]

    def _entry(self, scope: ResponseScope, item: Any, i: int, now: float) -> _Entry:
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
        return _Entry(name, key, output, expires, exclusive)
