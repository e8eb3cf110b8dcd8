"""The model path: every request passed to the user's upstream, every response passed back as it came.

Routes (:class:`ModelRelay`): ``/anthropic/{path}`` goes to the Anthropic upstream and ``/openai/{path}`` to
the OpenAI one, each with its path and query string unchanged (Claude Code: ``ANTHROPIC_BASE_URL=
http://127.0.0.1:PORT/anthropic``; Codex: ``base_url = "http://127.0.0.1:PORT/openai/v1"``). Bare ``/v1/...``
paths are accepted too: ``/v1/messages...`` and ``/v1/complete`` go to Anthropic, ``/v1/chat/completions``,
``/v1/responses...``, ``/v1/models`` and ``/v1/embeddings`` to OpenAI.

What the client receives is what the upstream sent: its status, its headers (but those of one hop) and its
body, chunk by chunk, as the bytes arrived; an error status with its body; a body that breaks off, broken
off (the client's connection is dropped where the upstream's was). The daemon answers for itself only when
there is nothing of the upstream's to pass on: it cannot be reached (502), or the request itself is refused
(413 too large, 408 too slow): each with a JSON error naming the cause.

Reading (:class:`~forethought.daemon.observer.ResponseObserver`) happens beside the relay: the request goes
upstream first; the request's conversation is read and its step begun (a :class:`StepSource`) while the
upstream thinks; chunks are queued for the observer as they are forwarded, never waited for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from forethought.daemon.headers import request_headers, response_headers
from forethought.daemon.observer import ResponseObserver, Watcher
from forethought.daemon.wire import Wire
from forethought.serve.http import BodyRefused, pump_until_disconnect, read_body

__all__ = ["ModelRelay", "RelayCounts", "StepSource", "Upstreams"]

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 64 << 20
BODY_TIMEOUT_S = 60.0
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_ANTHROPIC_BARE = ("/v1/messages", "/v1/complete")
_OPENAI_BARE = ("/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/embeddings", "/v1/completions")


@dataclass(frozen=True, slots=True)
class Upstreams:
    """Where model requests go: each provider's base URL, without ``/v1`` (``None``: not relayed)."""

    anthropic: str | None = "https://api.anthropic.com"
    openai: str | None = "https://api.openai.com"

    def base(self, provider: str) -> str | None:
        url = self.anthropic if provider == "anthropic" else self.openai if provider == "openai" else None
        return url.rstrip("/") if url else None


class StepSource(Protocol):
    """Who reads a model request's conversation and watches its response (the daemon's conversations)."""

    def step(self, wire: Wire, url: str, headers: Sequence[tuple[str, str]], raw: bytes) -> Watcher | None:
        """Begin the step of this request; the watcher of its response (``None``: nothing to watch)."""


@dataclass
class RelayCounts:
    """What the relay did (counts only: nothing of a request's content)."""

    requests: int = 0
    observed: int = 0
    upstream_unreachable: int = 0
    upstream_errors: int = 0
    dropped: int = 0
    refused: int = 0
    unreadable: int = 0
    left: int = 0
    """Responses whose client left before the message ended."""


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "forethought_daemon", "code": code, "message": message}},
                        status_code=status)


class ModelRelay:
    """The pass-through routes of the daemon (see the module docstring)."""

    def __init__(self, upstreams: Upstreams, http: httpx2.AsyncClient, steps: StepSource | None = None, *,
                 max_request_bytes: int = MAX_REQUEST_BYTES, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.upstreams = upstreams
        self._http = http
        self._steps = steps
        self._max = max_request_bytes
        self._body_timeout_s = body_timeout_s
        self.counts = RelayCounts()
        self._observers: set[asyncio.Task[Any]] = set()

    def routes(self) -> list[Route]:
        return [Route("/anthropic/{path:path}", self._prefixed("anthropic"), methods=_METHODS),
                Route("/openai/{path:path}", self._prefixed("openai"), methods=_METHODS),
                Route("/v1/{path:path}", self._bare, methods=_METHODS)]

    def _prefixed(self, provider: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self._relay(request, provider, "/" + request.path_params["path"])

        return endpoint

    async def _bare(self, request: Request) -> Response:
        path = "/v1/" + request.path_params["path"]
        if path.startswith(_ANTHROPIC_BARE):
            return await self._relay(request, "anthropic", path)
        if path.startswith(_OPENAI_BARE):
            return await self._relay(request, "openai", path)
        return _error(404, f"no upstream for {path}: use /anthropic{path} or /openai{path}", "no_route")

    # --- one request ----------------------------------------------------------------------------------

    async def _relay(self, request: Request, provider: str, path: str) -> Response:
        self.counts.requests += 1
        base = self.upstreams.base(provider)
        if base is None:
            return _error(404, f"no {provider} upstream is configured", "no_upstream")
        url = base + path + (f"?{request.url.query}" if request.url.query else "")
        try:
            raw = await read_body(request, self._max, self._body_timeout_s)
        except BodyRefused as exc:
            self.counts.refused += 1
            return _error(exc.status, str(exc), exc.code)
        headers = request_headers(request.headers.items())
        upstream = self._http.build_request(request.method, url, content=raw, headers=headers)
        sending = asyncio.ensure_future(self._http.send(upstream, stream=True))
        wire = Wire.of_path(path) if request.method == "POST" else None
        watching: asyncio.Task[Watcher | None] | None = None
        if wire is not None and self._steps is not None:
            steps = self._steps
            watching = asyncio.ensure_future(self._begin(steps, wire, url, headers, raw))  # runs after the send starts
        try:
            response = await sending
        except httpx2.HTTPError as exc:
            self.counts.upstream_unreachable += 1  # no message: the step's guesses end with its next request
            return _error(502, f"cannot reach the {provider} upstream ({type(exc).__name__})", "upstream_unreachable")
        observer = None
        if watching is not None and response.status_code == 200:
            observer = self._observer(wire, watching, response)
        elif response.status_code >= 400:
            self.counts.upstream_errors += 1  # no message: the step's guesses end with its next request
        return _PassThrough(response, observer, self.counts)

    async def _begin(self, steps: StepSource, wire: Wire, url: str, headers: Sequence[tuple[str, str]],
                     raw: bytes) -> Watcher | None:
        try:
            return steps.step(wire, url, headers, raw)
        except Exception as exc:  # reading a conversation must never cost the request
            log.warning("forethought serve: could not read a request's conversation: %s", type(exc).__name__)
            return None

    def _observer(self, wire: Wire | None, watching: asyncio.Task[Watcher | None],
                  response: httpx2.Response) -> ResponseObserver | None:
        assert wire is not None
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        proxy = _LateWatcher(watching, self.counts)
        observer = ResponseObserver(wire, proxy, streamed=streamed,
                                    content_encoding=response.headers.get("content-encoding", ""), ready=watching)
        observer.start()
        self.counts.observed += 1
        return observer


class _LateWatcher:
    """Forwards to the step's watcher once it is known (the observer waits for it before reading)."""

    def __init__(self, watching: asyncio.Task[Watcher | None], counts: RelayCounts) -> None:
        self._watching = watching
        self._counts = counts

    def _target(self) -> Watcher | None:
        return self._watching.result() if self._watching.done() and not self._watching.cancelled() else None

    def event(self, event: Any) -> None:
        target = self._target()
        if target is not None:
            target.event(event)

    def unreadable(self, why: str) -> None:
        self._counts.unreadable += 1
        target = self._target()
        if target is not None:
            target.unreadable(why)

    def left(self, why: str) -> None:
        self._counts.left += 1
        target = self._target()
        if target is not None:
            target.left(why)


class _PassThrough(Response):
    """The upstream's response as it comes: status, headers, and the body chunk by chunk (raw bytes).

    A client that disconnects closes the upstream response at once; an upstream body that breaks off drops
    the client's connection without ending its body.
    """

    def __init__(self, upstream: httpx2.Response, observer: ResponseObserver | None, counts: RelayCounts) -> None:
        super().__init__(status_code=upstream.status_code)
        self.raw_headers = [(k.encode("latin-1"), v.encode("latin-1"))
                            for k, v in response_headers(upstream.headers.multi_items())]
        self._upstream = upstream
        self._observer = observer
        self._counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            await pump_until_disconnect(self._pump(send), receive)  # a cancelled pump told the observer
        finally:
            await self._upstream.aclose()

    async def _pump(self, send: Send) -> None:
        observer = self._observer
        complete = left = False
        try:
            async for chunk in _raw(self._upstream):
                if observer is not None:  # queued first: the observer reads at least what the client got
                    observer.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            complete = True
        except httpx2.HTTPError:
            self._counts.dropped += 1
        except asyncio.CancelledError:  # the client disconnected
            left = True
            raise
        finally:
            if observer is not None:
                observer.end(complete=complete, client_left=left)
        if complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # else: the upstream broke off, so does the client's connection (no end of body is sent)


async def _raw(response: httpx2.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_raw():
        if chunk:
            yield chunk
