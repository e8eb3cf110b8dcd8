"""The engine-side tool-cache gateway: an OpenAI-compatible streaming proxy that serves speculated results.

``create_gateway(upstream_base_url)`` returns a Starlette app that sits in front of any OpenAI-compatible
engine (``upstream_base_url`` includes ``/v1``, as for an OpenAI client):

* ``POST /v1/chat/completions`` with ``stream: true`` is relayed (:mod:`.gateway_relay`). The response
  headers carry ``x-forethought-response-id``, ``x-forethought-token`` and ``x-forethought-cache-path``.
  When a message's tool calls close and the cache holds a result for each, the gateway continues the
  response server-side; otherwise the stream ends with ``finish_reason: "tool_calls"`` as usual. A client
  that will post sends ``x-forethought-cache: post``; the gateway then waits up to ``post_wait_s`` for
  posts on their way before it ends the message. An
  upstream error status is passed on unchanged. Non-streaming requests are proxied as they are.
* ``POST /cache-tool-output/{response_id}`` with ``[{"name", "params"?, "output", "keep_alive"?,
  "exclusive"?}]`` and the response's token answers ``{"cached": n}`` (:mod:`.gateway_cache` has the rules
  and the 4xx answers).
* ``POST /v1/responses`` (the Responses API) with ``stream: true`` is relayed on the same cache and the
  same headers (:mod:`.gateway_responses`: served results arrive as ``response.forethought_tool_result``
  events); non-streaming requests are proxied as they are.
* ``GET /v1/models`` is proxied; ``GET /health``; ``GET /gateway/stats`` (relay and cache counters, and
  the process's CPU seconds); ``GET /metrics`` (the same counters in the Prometheus text format);
  ``POST /gateway/reset`` zeroes the counters, for a request carrying the gateway's admin token
  (``GatewayConfig.admin_token``) in ``x-forethought-admin-token``: 401 without one, 403 with another one,
  and 403 always when the gateway has none (resetting is then off).

A client that goes away (mid-body, mid-stream) ends its request quietly: a DEBUG line, never a traceback.

Hardening (:class:`GatewayConfig`): a request body larger than ``max_request_bytes`` answers 413, one
not read completely within ``body_timeout_s`` answers 408, JSON nested deeper than ``max_json_depth``
answers 400 (never a RecursionError); a ``policy`` refuses posts of tools it does not let speculate, or
marks private. Header timeouts and the connection bound are the server's (:mod:`.http`).

docs/gateway.md describes the protocol, the timing race and its bound (``post_wait_s``).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought._core.policy import Policy
from forethought.errors import UpstreamError
from forethought.gateway.cache import CacheLimits, PostRejected, ResponseScope, ToolOutputCache
from forethought.gateway.relay import Relay, RelayStats, UpstreamRefused
from forethought.gateway.responses import ResponsesRelay
from forethought.gateway.state import ScopeStore
from forethought.llm.tool_cache import (
    CACHE_CLIENT_HEADER,
    CACHE_CLIENT_VALUE,
    CACHE_PATH_HEADER,
    RESPONSE_ID_HEADER,
    SEGMENT_HEADER,
    TOKEN_HEADER,
)
from forethought.serve.http import BodyRefused, EventStream, read_body

CACHE_ROUTE = "/cache-tool-output/{response_id}"
ADMIN_TOKEN_HEADER = "x-forethought-admin-token"
"""The header that carries the gateway's admin token (``POST /gateway/reset``)."""
MIN_ADMIN_TOKEN_CHARS = 16
CLIENT_CLOSED = 499
"""The status logged for a request whose client went away (nothing reaches the client)."""
_FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """How the gateway waits, continues and limits.

    ``post_wait_s``: how long a closed message waits for posts still on their way before it ends normally
    (the bound on the race between the model closing a call and a speculator posting its result).
    ``max_continuations``: server-side continuations per response. ``mark_continuations``: add
    ``metadata.continuation = "true"`` to continuation requests (the simulated engine then keeps the prefix
    hot and admits them first; turn off for upstreams that reject unknown metadata).
    """

    post_wait_s: float = 0.05
    max_continuations: int = 32
    mark_continuations: bool = True
    upstream_timeout_s: float = 600.0
    upstream_api_key: str | None = None
    max_request_bytes: int = 32 << 20
    max_json_depth: int = 64
    body_timeout_s: float = 30.0
    max_line_bytes: int = 16 << 20
    """The longest upstream stream line passed on; a longer one ends the stream with an error chunk."""
    limits: CacheLimits = field(default_factory=CacheLimits)
    policy: Policy | None = None
    admin_token: str | None = field(default=None, repr=False)
    """The secret ``POST /gateway/reset`` requires (``x-forethought-admin-token``); ``None``: no reset."""

    def __post_init__(self) -> None:
        if self.post_wait_s < 0 or self.max_continuations < 0 or self.upstream_timeout_s <= 0:
            raise ValueError("post_wait_s, max_continuations must be >= 0 and upstream_timeout_s > 0")
        if self.max_request_bytes < 1 or self.max_json_depth < 1 or self.body_timeout_s <= 0:
            raise ValueError("max_request_bytes and max_json_depth must be >= 1, body_timeout_s > 0")
        if self.admin_token is not None and len(self.admin_token) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(f"admin_token must have at least {MIN_ADMIN_TOKEN_CHARS} characters")

    def cache_denial(self, tool: str) -> str | None:
        """Why the policy does not let ``tool``'s results be served from the cache, or ``None``."""
        if self.policy is None:
            return None
        rules = self.policy.for_tool(tool)
        if not rules.speculate:
            return "speculate = false"
        if rules.private:
            return "private"
        return None


def _error(status: int, message: str, code: str = "invalid_request") -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


async def _client_gone(request: Request, exc: Exception) -> Response:
    """Starlette's handler for :class:`ClientDisconnect`: the client left, nothing can reach it; no traceback."""
    log.debug("%s %s: the client went away", request.method, request.url.path)
    return Response(status_code=CLIENT_CLOSED)


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests (a scalar is 0, ``[]`` is 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in item if isinstance(child, dict | list))
    return deepest


def parse_body(raw: bytes, max_depth: int) -> Any:
    """The JSON of a request body; :class:`BodyRefused` (400) when it is not JSON or nests too deeply."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BodyRefused(400, f"request body nests deeper than {max_depth} levels", "too_deep") from None
    except ValueError as exc:
        raise BodyRefused(400, f"request body is not JSON: {exc}", "invalid_json") from None
    if json_depth(value) > max_depth:
        raise BodyRefused(400, f"request body nests deeper than {max_depth} levels", "too_deep")
    return value


class Gateway:
    """State of one gateway (upstream connection pool, cache, counters) and its Starlette ``app``."""

    def __init__(self, upstream_base_url: str, config: GatewayConfig | None = None,
                 store: ScopeStore | None = None) -> None:
        self.upstream = upstream_base_url.rstrip("/")
        self.config = config or GatewayConfig()
        self.cache = ToolOutputCache(self.config.limits, deny=self.config.cache_denial, store=store)
        self.relay_stats = RelayStats()
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(self.config.upstream_timeout_s, connect=10.0),
                                        limits=httpx2.Limits(max_connections=None, max_keepalive_connections=256))
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route(CACHE_ROUTE, self._cache_post, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/gateway/stats", self._stats, methods=["GET"]),
            Route("/gateway/reset", self._reset, methods=["POST"]),
        ], exception_handlers={ClientDisconnect: _client_gone})

    async def aclose(self) -> None:
        """Close the upstream connection pool and the scope store."""
        await self._http.aclose()
        await self.cache.store.aclose()

    def stats(self) -> dict[str, Any]:
        """Relay counters, cache counters and open responses."""
        return {**dataclasses.asdict(self.relay_stats), "open_responses": len(self.cache),
                "process_cpu_s": time.process_time(),
                "posts": self.cache.posts, "entries_cached": self.cache.entries_cached,
                "posts_rejected": {str(k): v for k, v in sorted(self.cache.rejected.items())},
                "store": self.cache.store.stats()}

    def reset_stats(self) -> None:
        self.relay_stats = RelayStats()
        self.cache.rejected.clear()
        self.cache.posts = self.cache.entries_cached = 0

    # --- upstream ---------------------------------------------------------------------------------

    def _headers(self, request: Request | None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if request is not None:
            headers.update({k: v for k, v in request.headers.items() if k.lower() in _FORWARDED_HEADERS})
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        return headers

    async def _open(self, content: bytes, headers: dict[str, str], path: str = "/chat/completions") -> httpx2.Response:
        request = self._http.build_request("POST", self.upstream + path, content=content, headers=headers)
        response = await self._http.send(request, stream=True)
        if response.status_code != 200:
            content = await response.aread()
            await response.aclose()
            raise UpstreamRefused(response.status_code, content)
        return response

    # --- routes -----------------------------------------------------------------------------------

    async def _request_body(self, request: Request) -> tuple[bytes, Any]:
        raw = await read_body(request, self.config.max_request_bytes, self.config.body_timeout_s)
        return raw, parse_body(raw, self.config.max_json_depth)

    async def _completions(self, request: Request) -> Response:
        try:
            raw, body = await self._request_body(request)
        except BodyRefused as exc:
            return _error(exc.status, str(exc), exc.code)
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        headers = self._headers(request)
        if not body.get("stream"):
            return await self._passthrough(body, headers)
        try:
            first = await self._open(raw, headers)  # the client's own bytes: nothing re-encoded
        except UpstreamRefused as exc:
            return Response(exc.body, status_code=exc.status, media_type="application/json")
        except httpx2.HTTPError as exc:
            self.relay_stats.upstream_errors += 1
            return _error(502, f"cannot reach the upstream at {self.upstream}: {exc!r}", "upstream_unreachable")
        scope = await self.cache.open(body.get("tools"),
                                      expects_posts=request.headers.get(CACHE_CLIENT_HEADER) == CACHE_CLIENT_VALUE)

        async def opener(next_body: dict[str, Any]) -> httpx2.Response:
            return await self._open(json.dumps(next_body, ensure_ascii=False).encode(), headers)

        relay = Relay(body, first, scope, opener, self.cache, self.relay_stats,
                      post_wait_s=self.config.post_wait_s, max_continuations=self.config.max_continuations,
                      mark_continuations=self.config.mark_continuations, max_line_bytes=self.config.max_line_bytes)
        return self._scoped(EventStream(relay.chunks()), scope)

    async def _passthrough(self, body: dict[str, Any], headers: dict[str, str]) -> Response:
        try:
            response = await self._http.post(self.upstream + "/chat/completions",
                                              content=json.dumps(body, ensure_ascii=False).encode(), headers=headers)
        except httpx2.HTTPError as exc:
            self.relay_stats.upstream_errors += 1
            return _error(502, f"cannot reach the upstream at {self.upstream}: {exc!r}", "upstream_unreachable")
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type", "application/json"))

    async def _cache_post(self, request: Request) -> Response:
        response_id = str(request.path_params["response_id"])
        try:
            grant = await self.cache.authorize(response_id, request.headers.get(TOKEN_HEADER),
                                               request.headers.get(SEGMENT_HEADER))
        except PostRejected as exc:
            return _error(exc.status, str(exc), f"http_{exc.status}")
        try:
            raw = await read_body(request, self.config.limits.max_body_bytes, self.config.body_timeout_s)
            body = parse_body(raw, self.config.max_json_depth)
        except BodyRefused as exc:
            self.cache.reject(exc.status)
            return _error(exc.status, str(exc).replace("request body", "body"), f"http_{exc.status}")
        try:
            cached = await self.cache.post(grant, body)
        except PostRejected as exc:
            return _error(exc.status, str(exc), f"http_{exc.status}")
        return JSONResponse({"cached": cached})

    async def _responses(self, request: Request) -> Response:
        """The Responses API: streamed requests relayed with the cache (:mod:`.gateway_responses`), others
        proxied as they are."""
        try:
            raw, body = await self._request_body(request)
        except BodyRefused as exc:
            return _error(exc.status, str(exc), exc.code)
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        headers = self._headers(request)
        if body.get("stream"):
            return await self._relayed_responses(request, raw, body, headers)
        try:
            response = await self._http.post(self.upstream + "/responses", content=raw, headers=headers)
        except httpx2.HTTPError as exc:
            self.relay_stats.upstream_errors += 1
            return _error(502, f"cannot reach the upstream at {self.upstream}: {exc!r}", "upstream_unreachable")
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type", "application/json"))

    async def _relayed_responses(self, request: Request, raw: bytes, body: dict[str, Any],
                                 headers: dict[str, str]) -> Response:
        try:
            first = await self._open(raw, headers, "/responses")
        except UpstreamRefused as exc:
            return Response(exc.body, status_code=exc.status, media_type="application/json")
        except httpx2.HTTPError as exc:
            self.relay_stats.upstream_errors += 1
            return _error(502, f"cannot reach the upstream at {self.upstream}: {exc!r}", "upstream_unreachable")
        scope = await self.cache.open(body.get("tools"),
                                      expects_posts=request.headers.get(CACHE_CLIENT_HEADER) == CACHE_CLIENT_VALUE)

        async def opener(next_body: dict[str, Any]) -> httpx2.Response:
            return await self._open(json.dumps(next_body, ensure_ascii=False).encode(), headers, "/responses")

        relay = ResponsesRelay(body, first, scope, opener, self.cache, self.relay_stats,
                               post_wait_s=self.config.post_wait_s, max_continuations=self.config.max_continuations,
                               mark_continuations=self.config.mark_continuations,
                               max_line_bytes=self.config.max_line_bytes)
        return self._scoped(EventStream(relay.chunks()), scope)

    @staticmethod
    def _scoped(stream: EventStream, scope: ResponseScope) -> EventStream:
        """``stream`` with the headers that tell the client where to post for ``scope``."""
        stream.headers[RESPONSE_ID_HEADER] = scope.response_id
        stream.headers[TOKEN_HEADER] = scope.token
        stream.headers[CACHE_PATH_HEADER] = CACHE_ROUTE.format(response_id=scope.response_id)
        return stream

    async def _metrics(self, request: Request) -> Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_GatewayCollector(self))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def _models(self, request: Request) -> Response:
        try:
            response = await self._http.get(self.upstream + "/models", headers=self._headers(request))
        except httpx2.HTTPError as exc:
            return _error(502, f"cannot reach the upstream at {self.upstream}: {exc!r}", "upstream_unreachable")
        return Response(response.content, status_code=response.status_code, media_type="application/json")

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstream": self.upstream, "open_responses": len(self.cache)})

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(self.stats())

    async def _reset(self, request: Request) -> Response:
        expected = self.config.admin_token
        token = request.headers.get(ADMIN_TOKEN_HEADER)
        if expected is None:
            return _error(403, "resetting is off: this gateway has no admin token (GatewayConfig.admin_token)",
                          "http_403")
        if not token:
            return _error(401, f"missing {ADMIN_TOKEN_HEADER} header", "http_401")
        if not hmac.compare_digest(token.encode("utf-8", "surrogateescape"),
                                   expected.encode("utf-8", "surrogateescape")):
            return _error(403, "wrong admin token", "http_403")
        self.reset_stats()
        return JSONResponse({"reset": True})


class _GatewayCollector:
    """The gateway's counters as Prometheus metrics (read at each scrape)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Any:
        stats = dataclasses.asdict(self.gateway.relay_stats)
        for name, value in sorted(stats.items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield CounterMetricFamily(f"forethought_gateway_{name}", f"Gateway relay counter {name}.",
                                          value=float(value))
        cache = self.gateway.cache
        yield CounterMetricFamily("forethought_gateway_posts", "Accepted cache posts.", value=float(cache.posts))
        yield CounterMetricFamily("forethought_gateway_entries_cached", "Tool results cached from posts.",
                                  value=float(cache.entries_cached))
        rejected = CounterMetricFamily("forethought_gateway_posts_rejected", "Rejected cache posts by status.",
                                       labels=["status"])
        for status, count in sorted(cache.rejected.items()):
            rejected.add_metric([str(status)], float(count))
        yield rejected
        yield GaugeMetricFamily("forethought_gateway_open_responses", "Responses being relayed now.",
                                value=float(len(cache)))
        for name, value in sorted(cache.store.stats().items()):  # kind aside: the store's health and round trips
            if isinstance(value, int | float):
                yield GaugeMetricFamily(f"forethought_gateway_store_{name}",
                                        f"Scope store ({cache.store.kind}): {name}.", value=float(value))


def probe_upstream(upstream_base_url: str, timeout_s: float = 5.0) -> None:
    """Check at start that the upstream answers HTTP (any status); :class:`UpstreamError` in one line if not."""
    url = upstream_base_url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UpstreamError(f"upstream {upstream_base_url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    try:
        httpx2.get(url + "/models", timeout=timeout_s)
    except httpx2.HTTPError as exc:
        raise UpstreamError(f"the upstream {url} does not answer: {type(exc).__name__}: {exc}") from None


def create_gateway(upstream_base_url: str, config: GatewayConfig | None = None,
                   store: ScopeStore | None = None) -> Starlette:
    """The Starlette app of a new :class:`Gateway` (use ``Gateway`` to reach its state and close it)."""
    return Gateway(upstream_base_url, config, store).app
