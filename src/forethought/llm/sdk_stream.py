"""One streamed request through a vendor SDK, decoded into forethought's events, errors mapped once.

The Responses and Anthropic Messages clients differ in how they build a request and decode its events,
not in how they run it: open the SDK's raw streaming response, map the SDK's errors to
:class:`~forethought.errors.UpstreamError`, feed each server-sent JSON event to a decoder until it says
the message is done, and raise :class:`~forethought.errors.StreamDroppedError` when the stream ends first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol, Self

from forethought.errors import StreamDroppedError, UpstreamError
from forethought.llm.events import LLMEvent
from forethought.llm.sse import aiter_json


class Decoder(Protocol):
    """Turns one server-sent JSON event into forethought events; ``done`` once the message has ended."""

    done: bool

    def feed(self, event: dict[str, Any]) -> Iterable[LLMEvent]:
        """The events ``event`` completes (possibly none)."""


async def stream_decoded(request: Any, sdk: Any, base_error: type[Exception], decoder: Decoder, base_url: str,
                         last_event: str) -> AsyncIterator[LLMEvent]:
    """Run ``request`` (an SDK ``with_streaming_response.create(...)`` context) through ``decoder``.

    ``sdk`` is the SDK module (its ``APIConnectionError`` and ``APIStatusError``), ``base_error`` its root
    error class, ``last_event`` the name of the event that ends a message (for the dropped-stream error).
    """
    try:
        response = await request.__aenter__()
    except sdk.APIConnectionError as exc:
        raise UpstreamError(f"cannot reach {base_url}: {exc.message}") from exc
    except sdk.APIStatusError as exc:
        raise UpstreamError(f"endpoint answered HTTP {exc.status_code}: {exc.message}") from exc
    except base_error as exc:
        raise UpstreamError(f"endpoint error: {exc}") from exc
    try:
        async for event, _ in aiter_json(response.http_response):
            for out in decoder.feed(event):
                yield out
            if decoder.done:
                break
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UpstreamError(f"unparsable stream event from {base_url}: {exc!r}") from exc
    finally:
        await request.__aexit__(None, None, None)
    if not decoder.done:
        raise StreamDroppedError(f"stream from {base_url} ended before {last_event}")


class SdkClientHolder:
    """Holds a vendor SDK client for a forethought client: an async context manager that closes the SDK
    client on :meth:`aclose` only when it created it (a caller's own client is left open)."""

    _client: Any
    _own: bool
    base_url: str

    def _hold(self, client: Any, own: bool) -> None:
        self._client = client
        self._own = own
        self.base_url = str(client.base_url)

    async def aclose(self) -> None:
        """Close the SDK client if this object created it."""
        if self._own:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
