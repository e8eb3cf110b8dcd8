"""Requests to the upstream MCP server whose answers the proxy itself waits for.

An :class:`UpstreamLink` owns the write side of the upstream connection. The relay hands every response
coming back to :meth:`UpstreamLink.deliver`; a response to a request the link sent (a client's
``tools/call`` forwarded verbatim, or a speculation under an id of the proxy's own) resolves that request's
:class:`Answer`, anything else goes on to the client. When the upstream goes away every waiting request
fails with :class:`~forethought.mcp.errors.UpstreamClosedError`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCRequest, JSONRPCResponse, RequestId

from forethought.mcp.errors import UpstreamClosedError

OWN_ID_PREFIX = "forethought-spec-"
"""Ids of the proxy's own requests (a client's ids are relayed unchanged, so these must not look like them)."""


class MessageSink(Protocol):
    """Where JSON-RPC messages are written: an ``mcp`` SDK transport's write stream."""

    async def send(self, item: SessionMessage, /) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """What the upstream answered to one request: exactly one of ``result`` and ``error`` (JSON objects)."""

    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None

    @property
    def servable(self) -> bool:
        """Whether a speculation that got this answer may stand in for the client's own call: a final
        result that does not report a tool error (an error is never served from a guess)."""
        if self.result is None or not isinstance(self.result.get("content", []), list):
            return False  # an error, or not a tool result at all
        return not self.result.get("isError") and self.result.get("resultType", "complete") == "complete"

    def message(self, request_id: RequestId) -> JSONRPCMessage:
        """This answer as the JSON-RPC response to ``request_id``."""
        if self.result is not None:
            return JSONRPCResponse(jsonrpc="2.0", id=request_id, result=dict(self.result))
        return JSONRPCError.model_validate({"jsonrpc": "2.0", "id": request_id, "error": dict(self.error or {})})


def answer_of(message: JSONRPCResponse | JSONRPCError) -> Answer:
    if isinstance(message, JSONRPCResponse):
        return Answer(result=message.result)
    return Answer(error=message.error.model_dump(mode="json", exclude_unset=True))


class UpstreamLink:
    """Sends requests upstream and pairs each with its response."""

    def __init__(self, sink: MessageSink) -> None:
        self._sink = sink
        self._pending: dict[RequestId, asyncio.Future[Answer]] = {}
        self._ids = itertools.count(1)
        self.gone: str | None = None
        """Why the upstream is gone (``None`` while it is up)."""
        self.client_calls = 0
        """``tools/call`` requests of the client sent upstream."""
        self.speculative_calls = 0
        """``tools/call`` requests the proxy sent on a guess."""
        self.speculative_tools: list[str] = []
        """The tool of each of those requests, in order."""
        self.validator_calls = 0
        """``tools/call`` requests of validators the policy names (see :mod:`forethought.mcp.freshness`)."""

    def new_id(self) -> str:
        return f"{OWN_ID_PREFIX}{next(self._ids)}"

    async def send(self, message: JSONRPCMessage) -> None:
        """Relay one message upstream unchanged."""
        if self.gone is not None:
            raise UpstreamClosedError(self.gone)
        try:
            await self._sink.send(SessionMessage(message))
        except Exception as exc:  # the transport's stream is closed or broken
            raise UpstreamClosedError(f"{type(exc).__name__} while sending") from exc

    async def request(self, message: JSONRPCRequest, speculative: bool = False, validator: bool = False) -> Answer:
        """Send ``message`` and wait for its answer (cancelling the wait abandons the request)."""
        if self.gone is not None:
            raise UpstreamClosedError(self.gone)
        if message.id in self._pending:
            raise UpstreamClosedError(f"request id {message.id!r} is already waiting for an answer")
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = future
        try:
            if validator:
                self.validator_calls += 1
            elif speculative:
                self.speculative_calls += 1
                self.speculative_tools.append(str((message.params or {}).get("name")))
            else:
                self.client_calls += 1
            await self.send(message)
            return await future
        finally:
            if self._pending.get(message.id) is future:
                del self._pending[message.id]

    def deliver(self, message: JSONRPCResponse | JSONRPCError) -> bool:
        """Resolve the request ``message`` answers; ``False`` when the link did not send it (relay it on).

        A late answer to one of the proxy's own requests (abandoned meanwhile) is consumed, never relayed.
        """
        request_id = message.id
        future = self._pending.pop(request_id, None) if request_id is not None else None
        if future is None:
            return isinstance(request_id, str) and request_id.startswith(OWN_ID_PREFIX)
        if not future.done():
            future.set_result(answer_of(message))
        return True

    def close(self, detail: str) -> None:
        """The upstream is gone: fail every waiting request."""
        if self.gone is None:
            self.gone = detail
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(UpstreamClosedError(detail))
