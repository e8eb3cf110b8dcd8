"""Recording both ends of the model path, so a run can check the client received what the upstream sent.

:class:`RecordingApp` wraps an upstream's ASGI app and keeps, per request, what the request said (path,
headers, body) and every body chunk the upstream sent. :class:`RecordingTransport` wraps a client's
``httpx2`` transport (give the SDK ``http_client=httpx2.AsyncClient(transport=RecordingTransport())``) and
keeps every response body chunk as the client received it. Equal concatenations, request by request, are
the "unchanged stream" check of the loop bench and of the daemon's tests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from forethought.serve.http import buffered_request

__all__ = ["Exchange", "ModelRouter", "RecordingApp", "RecordingTransport"]


@dataclass
class Exchange:
    """One request and the response body sent (or received), chunk by chunk."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""
    status: int = 0
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False

    @property
    def sent(self) -> bytes:
        return b"".join(self.chunks)


class RecordingApp:
    """An ASGI app that records every HTTP exchange of the app it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"),
                            {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        self.exchanges.append(exchange)
        body: list[bytes] = []

        async def recv() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
                exchange.body = b"".join(body)
            return message

        async def tee(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    exchange.chunks.append(message["body"])
                if not message.get("more_body", False):
                    exchange.complete = True
            await send(message)

        await self.app(scope, recv, tee)


class _Tee(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, into: list[bytes]) -> None:
        self._inner = inner
        self._into = into

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._into.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """A client transport that records every response body as received (raw bytes, before decoding)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx2.AsyncHTTPTransport()
        self.received: list[list[bytes]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        chunks: list[bytes] = []
        self.received.append(chunks)
        response.stream = _Tee(response.stream, chunks)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class ModelRouter:
    """An ASGI app that sends each request to the app of the model its JSON body names (else ``default``):
    one upstream URL serving a main model and a faster speculator model, as a provider does."""

    def __init__(self, default: ASGIApp, by_model: dict[str, ASGIApp]) -> None:
        self.default = default
        self.by_model = by_model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.default(scope, receive, send)
            return
        body, replay = await buffered_request(receive)
        try:
            model = json.loads(body).get("model")
        except (ValueError, AttributeError):
            model = None
        app = self.by_model.get(model, self.default) if isinstance(model, str) else self.default
        await app(scope, replay, send)
