"""Requests to the upstream MCP server whose answers the proxy itself waits for, tracked until they really end.

An :class:`UpstreamLink` owns the write side of the upstream connection. The relay hands every response
coming back to :meth:`UpstreamLink.deliver`; a response to a request the link sent (a client's ``tools/call``
forwarded verbatim, or a request of the proxy's own: a guess, a validator, a probe of the server's name)
resolves that request's :class:`Answer`, anything else goes on to the client.

A request stays tracked until it has *really* ended: the upstream answered it, or the link closed. When
the side waiting for a client's request gives up (the client cancelled its call), :meth:`UpstreamLink.abandon`
leaves it tracked for at most ``abandoned_s`` more: a server is asked not to answer a cancelled request, so
after that the request counts as ended. What a write clock needs to know — when did this write end? — is
therefore :meth:`Pending.ended`, never when its caller stopped waiting. A request of the proxy's own that is
given up (a discarded guess, a validator nobody waits for) is a read: the upstream is told to stop
(``notifications/cancelled``) and it ends at once, so it never holds a slot of the server for nothing.

The proxy's own request ids carry a random part of each link's own (``forethought-spec-<nonce>-N``), so no
id a client picks can be taken for one (a client's ids are relayed unchanged), and a late answer to one of
them is recognised and consumed, never relayed to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import secrets
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, RequestId

from forethought.mcp.concurrency import Concurrency
from forethought.mcp.errors import UpstreamClosedError
from forethought.mcp.routing import RouteHeaders

OWN_ID_PREFIX = "forethought-spec-"
"""How the ids of the proxy's own requests begin (then the link's nonce, then a counter)."""
CANCELLED = "notifications/cancelled"
MAX_KEPT_LOGS = 256
"""Log notifications kept with one guess at most (the rest are dropped)."""
ABANDONED_S = 30.0
"""How long a request whose waiter gave up stays tracked without an answer before it counts as ended."""


class MessageSink(Protocol):
    """Where JSON-RPC messages are written: an ``mcp`` SDK transport's write stream."""

    async def send(self, item: SessionMessage, /) -> None: ...


class Kind(enum.Enum):
    """Whose request it is: counted apart (the upstream bound counts every ``tools/call`` sent)."""

    CLIENT = "client"
    """A client's ``tools/call``, forwarded verbatim (its own id)."""
    GUESS = "guess"
    """A speculation of the proxy's own."""
    VALIDATOR = "validator"
    """A validator call the policy names (:mod:`~forethought.mcp.freshness`)."""
    PROBE = "probe"
    """Anything else the proxy asks on its own (the server's name): not a ``tools/call``."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the upstream answered to one request: exactly one of ``result`` and ``error`` (JSON objects).

    ``progress``: the progress notifications the upstream sent for the request, in order (kept for a
    guess, whose progress a client sees only if the guess serves it); ``logs``: the log notifications only
    that guess can have caused (see :meth:`UpstreamLink.log`), kept the same way."""

    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    progress: tuple[Mapping[str, Any], ...] = ()
    logs: tuple[Mapping[str, Any], ...] = ()

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


class Pending:
    """One request sent upstream: its answer (a future) and whether it has ended."""

    __slots__ = ("_counted", "_timer", "answer", "kind", "logs", "progress", "request_id")

    def __init__(self, request_id: RequestId, kind: Kind, answer: asyncio.Future[Answer]) -> None:
        self.request_id = request_id
        self.kind = kind
        self.answer = answer
        self.progress: list[Mapping[str, Any]] = []
        """Progress notifications for it (a request of the proxy's own uses its id as its progress token)."""
        self.logs: list[Mapping[str, Any]] = []
        """Log notifications only it can have caused (a guess's; see :meth:`UpstreamLink.log`)."""
        self._timer: asyncio.TimerHandle | None = None
        self._counted = True
        """Whether it still counts as in flight (until the link has noted its end, once)."""

    @property
    def ended(self) -> bool:
        """Whether the request has really ended: answered, the link closed, or abandoned long enough."""
        return self.answer.done()

    async def wait_ended(self) -> None:
        """Return once the request has ended (never raises; cancelling the wait leaves the request alone)."""
        if not self.answer.done():
            await asyncio.wait([self.answer])


class UpstreamLink:
    """Sends requests upstream and pairs each with its response."""

    def __init__(self, sink: MessageSink, abandoned_s: float = ABANDONED_S,
                 watch: Concurrency | None = None) -> None:
        self._sink = sink
        self._abandoned_s = abandoned_s
        self._watch = watch
        """Told of every ``tools/call`` sent and how it ended (whether the server handles calls at once)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[RequestId, Pending] = {}
        self._ids = itertools.count(1)
        self._own = f"{OWN_ID_PREFIX}{secrets.token_hex(8)}-"
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
        self.in_flight: dict[Kind, int] = dict.fromkeys(Kind, 0)
        """Requests of each kind sent and not yet ended."""
        self._watched: dict[RequestId, Callable[[], None]] = {}
        """Requests the link did not send whose end matters (relayed during warm-up): id -> called once."""
        self.by_tool: Counter[str] = Counter()
        """``tools/call`` requests sent, by the tool they were for (a validator's: the tool it guards)."""
        self.routes = RouteHeaders()
        """The HTTP headers each request of the newest revision carries (:mod:`~forethought.mcp.routing`)."""

    def new_id(self) -> str:
        """A fresh id for a request of the proxy's own."""
        return f"{self._own}{next(self._ids)}"

    def is_own(self, request_id: object) -> bool:
        """Whether ``request_id`` is an id this link made (no client id can be one)."""
        return isinstance(request_id, str) and request_id.startswith(self._own)

    async def send(self, message: JSONRPCMessage) -> None:
        """Relay one message upstream unchanged."""
        if self.gone is not None:
            raise UpstreamClosedError(self.gone)
        try:
            await self._sink.send(SessionMessage(message, metadata=self.routes.metadata(message)))
        except Exception as exc:  # the transport's stream is closed or broken
            raise UpstreamClosedError(f"{type(exc).__name__} while sending") from exc

    async def begin(self, message: JSONRPCRequest, kind: Kind = Kind.CLIENT, tool: str | None = None) -> Pending:
        """Send ``message`` and track it until it ends; its answer is :attr:`Pending.answer`. ``tool``: the
        tool it is counted for (default: the one it calls)."""
        if self.gone is not None:
            raise UpstreamClosedError(self.gone)
        if message.id in self._pending:
            raise UpstreamClosedError(f"request id {message.id!r} is already waiting for an answer")
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        pending = Pending(message.id, kind, future)
        self._pending[message.id] = pending
        self.in_flight[kind] += 1
        future.add_done_callback(lambda _: self._ended(pending))  # (a resolution here also notes it at once)
        if kind is not Kind.PROBE:
            called = str((message.params or {}).get("name"))
            self.by_tool[tool if tool is not None else called] += 1
            if self._watch is not None:
                self._watch.sent(id(self), message.id, called, asyncio.get_running_loop().time())
        if kind is Kind.GUESS:
            self.speculative_calls += 1
            self.speculative_tools.append(str((message.params or {}).get("name")))
        elif kind is Kind.VALIDATOR:
            self.validator_calls += 1
        elif kind is Kind.CLIENT:
            self.client_calls += 1
        try:
            await self.send(message)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc if isinstance(exc, UpstreamClosedError)
                                     else UpstreamClosedError("the request could not be sent"))
                future.exception()  # retrieved: nobody else waits for a request that never went out
                self._ended(pending)
            raise
        return pending

    async def request(self, message: JSONRPCRequest, kind: Kind = Kind.CLIENT, tool: str | None = None) -> Answer:
        """Send ``message`` and wait for its answer. Cancelling the wait abandons the request: it stays
        tracked (its late answer consumed) until it ends (:meth:`abandon`)."""
        pending = await self.begin(message, kind, tool)
        return await self.answer(pending)

    async def answer(self, pending: Pending) -> Answer:
        """Wait for ``pending``'s answer; a cancelled wait abandons the request (see :meth:`abandon`)."""
        try:
            return await asyncio.shield(pending.answer)
        except asyncio.CancelledError:
            self.abandon(pending)
            raise

    def abandon(self, pending: Pending) -> None:
        """Nobody waits for ``pending`` any more. A client's request ends when answered, or ``abandoned_s``
        from now; one of the proxy's own is cancelled upstream and ends now."""
        if pending.ended or pending._timer is not None:
            return
        if pending.kind is not Kind.CLIENT:
            self._give_up(pending)
            self._ended(pending)
            if self.gone is None:
                task = asyncio.get_running_loop().create_task(self._cancel_upstream(pending.request_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        pending._timer = asyncio.get_running_loop().call_later(self._abandoned_s, self._give_up, pending)

    @staticmethod
    def _give_up(pending: Pending) -> None:
        if not pending.answer.done():
            pending.answer.set_exception(UpstreamClosedError("abandoned without an answer"))
            pending.answer.exception()

    async def _cancel_upstream(self, request_id: RequestId) -> None:
        with contextlib.suppress(UpstreamClosedError):
            await self.send(JSONRPCNotification(jsonrpc="2.0", method=CANCELLED, params={
                "requestId": request_id, "reason": "forethought: the speculation was discarded"}))

    def _ended(self, pending: Pending) -> None:
        """Note that ``pending`` ended (once; at once where the link ends it, else from its future's callback)."""
        if not pending._counted:
            return
        pending._counted = False
        self.in_flight[pending.kind] -= 1
        if self._watch is not None and pending.kind is not Kind.PROBE:
            answered = not pending.answer.cancelled() and pending.answer.exception() is None
            self._watch.ended(id(self), pending.request_id, asyncio.get_running_loop().time(), answered)
        if pending._timer is not None:
            pending._timer.cancel()
        if self._pending.get(pending.request_id) is pending:
            del self._pending[pending.request_id]

    def watch(self, request_id: RequestId, ended: Callable[[], None]) -> None:
        """Call ``ended`` when the answer to ``request_id`` (a request the link did not send) passes, or the link
        closes."""
        self._watched[request_id] = ended

    def deliver(self, message: JSONRPCResponse | JSONRPCError) -> bool:
        """Resolve the request ``message`` answers; ``False`` when the link did not send it (relay it on).

        A late answer to one of the proxy's own requests is consumed, never relayed."""
        request_id = message.id
        if self._watched and request_id is not None:
            ended = self._watched.pop(request_id, None)
            if ended is not None:
                ended()
        pending = self._pending.get(request_id) if request_id is not None else None
        if pending is None:
            return self.is_own(request_id)
        if not pending.answer.done():
            answer = answer_of(message)
            if pending.progress or pending.logs:
                answer = replace(answer, progress=tuple(pending.progress), logs=tuple(pending.logs))
            pending.answer.set_result(answer)
            self._ended(pending)
        return True

    def progress(self, params: Mapping[str, Any]) -> bool:
        """A progress notification: kept with the request of the proxy's own whose token it names (``True``:
        consumed, never relayed), else ``False`` (relay it on)."""
        token = params.get("progressToken")
        if not self.is_own(token):
            return False
        pending = self._pending.get(token)  # type: ignore[arg-type]
        if pending is not None and not pending.ended:
            pending.progress.append(dict(params))
        return True

    def log(self, params: Mapping[str, Any]) -> bool:
        """A log notification (``notifications/message``), which names no request: ``False`` (relay it on)
        unless only requests of the proxy's own are in flight, so none of the client's can have caused it.
        Then it is kept with the one guess in flight (the client sees it if that guess serves a call, before
        the answer), or dropped where several of the proxy's requests could have caused it (``True``).
        The caller checks that no other request of the client (one the link did not send) is waiting."""
        if self.in_flight[Kind.CLIENT] or self._watched:
            return False
        own = [p for p in self._pending.values() if not p.ended]
        if not own:
            return False
        if len(own) == 1 and own[0].kind is Kind.GUESS and len(own[0].logs) < MAX_KEPT_LOGS:
            own[0].logs.append(dict(params))
        return True

    def close(self, detail: str) -> None:
        """The upstream is gone: every tracked request ends, failing with :class:`UpstreamClosedError`."""
        if self.gone is None:
            self.gone = detail
        for pending in list(self._pending.values()):
            if not pending.answer.done():
                pending.answer.set_exception(UpstreamClosedError(detail))
                pending.answer.exception()  # retrieved here: an abandoned request has no one to raise it to
            self._ended(pending)
        self._pending.clear()
        watched, self._watched = self._watched, {}
        for ended in watched.values():
            ended()
