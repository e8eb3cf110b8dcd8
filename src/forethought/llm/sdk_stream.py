"""One streamed request through a vendor SDK, decoded into forethought's events, errors mapped once.

The Responses and Anthropic Messages clients differ in how they build a request and decode its events,
not in how they run it: open the SDK's raw streaming response, map the SDK's errors to
:class:`~forethought.errors.UpstreamError`, feed each server-sent JSON event to a decoder until it says
the message is done, and raise :class:`~forethought.errors.StreamDroppedError` when the stream ends first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

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
