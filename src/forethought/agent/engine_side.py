"""Engine-side mode's two ends: reading a response the gateway may serve, and what finished speculation it caches.

A response behind forethought's gateway (docs/gateway.md) can stop after the assistant message's calls
and carry their served results instead: :func:`until_served` reads one message up to there and leaves the
stream open for the continuation. :func:`postable` decides which finished speculations are posted to the
gateway's tool cache: only those whose result is certain to be what the authoritative call will get.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

from forethought._core.runtime import SettledSpeculation
from forethought._core.tools import Effect
from forethought.llm.dispatch import EarlyDispatch, render_output
from forethought.llm.events import LLMEvent, ToolResultServed
from forethought.llm.tool_cache import CachedOutput

POST_MARGIN_S = 1.0
"""A posted result's keep-alive ends this long before the speculation itself would expire."""


async def until_served(stream: AsyncIterator[LLMEvent], served: list[ToolResultServed],
                       state: EarlyDispatch) -> AsyncIterator[LLMEvent]:
    """Events of one assistant message: up to ``MessageDone``, or until every call of it was served.

    Served results are collected in ``served`` (not yielded); the stream itself is left open, so the
    next step can read the continuation.
    """
    while True:
        try:
            event = await anext(stream)
        except StopAsyncIteration:
            return
        if isinstance(event, ToolResultServed):
            served.append(event)
            if len(served) >= len(state.calls):
                return
            continue
        yield event


async def aclose_stream(stream: AsyncIterator[LLMEvent]) -> None:
    """Close ``stream`` if it can be closed (a plain async iterator cannot)."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def postable(result: SettledSpeculation, now: float) -> CachedOutput | None:
    """The cache entry for a finished speculation, or ``None`` when serving it could differ from serial.

    PURE and READ_ONLY results (no validator) are posted as they are; ISOLATED_WRITE results are posted
    ``exclusive``, so the gateway serves them only to a message that has just that call and the commit
    at the claim cannot meet another write. Failed, dropped or nearly expired results are not posted.
    ``now`` is the runtime's clock (the one ``expires_at`` is on).
    """
    tool = result.tool
    if not result.ok or tool.validator is not None:
        return None
    if tool.effect not in (Effect.PURE, Effect.READ_ONLY, Effect.ISOLATED_WRITE):
        return None
    remaining = result.expires_at - now
    keep_alive = None if math.isinf(remaining) else remaining - POST_MARGIN_S
    if keep_alive is not None and keep_alive <= 0:
        return None
    return CachedOutput(tool.name, render_output(result.value), params=dict(result.arguments),
                        keep_alive=keep_alive, exclusive=tool.effect is Effect.ISOLATED_WRITE)


__all__ = ["POST_MARGIN_S", "aclose_stream", "postable", "until_served"]
