"""The client side of forethought's tool-cache gateway: wire names, where to post, and the posters.

The gateway (``forethought gateway``, :mod:`forethought.gateway.app`) answers a streamed chat completion
with three headers: :data:`RESPONSE_ID_HEADER`, :data:`TOKEN_HEADER` (a secret for this response only) and
:data:`CACHE_PATH_HEADER` (``/cache-tool-output/{response_id}``). A client that speculated a tool call
posts the result there, with the token, before or while the model generates the call; when the call closes
and matches, the gateway serves the result itself and continues the response. :class:`CacheTarget` is
where and how to post for one response; :class:`CachedOutput` one entry of the body; a
:class:`ToolCachePoster` sends them (:class:`HttpToolCachePoster` over HTTP, :class:`RecordingPoster`
in memory for tests). docs/gateway.md is the full protocol.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx2

from forethought.errors import UpstreamError
from forethought.llm.events import ResponseStarted

RESPONSE_ID_HEADER = "x-forethought-response-id"
TOKEN_HEADER = "x-forethought-token"
CACHE_PATH_HEADER = "x-forethought-cache-path"
CACHE_CLIENT_HEADER = "x-forethought-cache"
"""Sent by a client that will post results (value ``post``): the gateway then waits ``post_wait_s`` for
posts when a message's calls close. Without it the gateway waits only once the response has had a post."""
CACHE_CLIENT_VALUE = "post"
SEGMENT_HEADER = "x-forethought-segment"
"""Optional on a post: the message (segment) of the response the entries are meant for; 409 if it moved on."""
RESULT_FIELD = "forethought_tool_result"
"""The extension field of a chunk's ``delta`` that carries a served tool result."""
CONTINUATION_METADATA = "continuation"
"""``metadata.continuation = "true"`` marks the gateway's upstream request that continues a response."""
DEFAULT_POST_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class CacheTarget:
    """Where to post speculated results for one response, with its token and current segment."""

    url: str
    response_id: str
    token: str
    segment: int = 0

    @classmethod
    def from_response(cls, event: ResponseStarted) -> CacheTarget | None:
        """The target a gateway response announced in its headers; ``None`` for a plain endpoint."""
        headers = event.headers
        response_id = headers.get(RESPONSE_ID_HEADER)
        token = headers.get(TOKEN_HEADER)
        path = headers.get(CACHE_PATH_HEADER)
        if not response_id or not token or not path:
            return None
        return cls(urljoin(event.url, path), response_id, token)

    def next_segment(self, segment: int) -> CacheTarget:
        return replace(self, segment=segment)


@dataclass(frozen=True, slots=True)
class CachedOutput:
    """One entry of a post: a tool's output for a call (``params`` omitted: match by name alone).

    ``exclusive`` asks the gateway to serve it only when the call is the message's only tool call (for
    results computed against state another call of the same message could change).
    """

    name: str
    output: str
    params: Mapping[str, Any] | None = None
    keep_alive: float | None = None
    exclusive: bool = False

    def wire(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "output": self.output}
        if self.params is not None:
            entry["params"] = dict(self.params)
        if self.keep_alive is not None:
            entry["keep_alive"] = self.keep_alive
        if self.exclusive:
            entry["exclusive"] = True
        return entry


class ToolCachePoster(Protocol):
    """Posts speculated results to a gateway response."""

    async def post(self, target: CacheTarget, entries: Sequence[CachedOutput]) -> int:
        """Send ``entries``; returns how many the gateway cached; raises ``UpstreamError`` when refused."""

    async def aclose(self) -> None:
        """Release connections."""


class HttpToolCachePoster:
    """:class:`ToolCachePoster` over HTTP (``httpx2``)."""

    def __init__(self, timeout: float = DEFAULT_POST_TIMEOUT_S) -> None:
        self._client = httpx2.AsyncClient(timeout=timeout)

    async def post(self, target: CacheTarget, entries: Sequence[CachedOutput]) -> int:
        body = json.dumps([e.wire() for e in entries], ensure_ascii=False, allow_nan=False)
        headers = {TOKEN_HEADER: target.token, SEGMENT_HEADER: str(target.segment),
                   "content-type": "application/json"}
        try:
            response = await self._client.post(target.url, content=body.encode(), headers=headers)
        except httpx2.HTTPError as exc:
            raise UpstreamError(f"cannot post to the gateway at {target.url}: {exc!r}") from exc
        if response.status_code != 200:
            raise UpstreamError(f"gateway refused the post (HTTP {response.status_code}): {response.text[:300]}")
        try:
            cached = response.json()["cached"]
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"unreadable gateway answer: {response.text[:300]!r}") from exc
        return int(cached)

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(slots=True)
class RecordingPoster:
    """An in-memory :class:`ToolCachePoster` for tests: records every post, answers ``len(entries)``."""

    posts: list[tuple[CacheTarget, tuple[CachedOutput, ...]]] = field(default_factory=list)
    closed: bool = False

    async def post(self, target: CacheTarget, entries: Sequence[CachedOutput]) -> int:
        self.posts.append((target, tuple(entries)))
        return len(entries)

    async def aclose(self) -> None:
        self.closed = True

