"""The message pump between one MCP client and its upstream server.

Every JSON-RPC message goes through unchanged, ids included, in both directions: requests (the client's
and the server's own: sampling, elicitation, roots), responses, errors and notifications (progress,
cancellation, logging, list changes). The one exception is a client's ``tools/call``, which the
:class:`~forethought.mcp.speculation.SessionSpeculator` answers (from a speculation, or by sending the very
same request upstream); a session linked to ``forethought serve`` asks the daemon first
(:mod:`~forethought.mcp.daemon_hook`). The relay also watches ``tools/list`` answers (every page) so the
speculator knows
the tools, ``notifications/tools/list_changed`` so nothing stale is served, and the handshake, so the
speculator learns the upstream's name (:mod:`~forethought.mcp.naming`; the proxy sends a ``server/discover``
of its own before a client's first request when only that can tell it).

Progress notifications for a guess (whose request carries its own id as progress token) are kept with it;
when the guess serves a client's call that asked for progress, they are replayed to that call's own token,
in order, just before its answer. Progress of the client's own requests passes through as it comes.

When the upstream goes away the relay keeps serving the client: every request then gets one JSON-RPC error
that says the upstream server is gone (requests in flight included), and the relay ends when the client
disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, RequestId

from forethought.mcp.errors import UpstreamClosedError, upstream_gone_error
from forethought.mcp.seams import CallReport
from forethought.mcp.speculation import SessionSpeculator
from forethought.mcp.upstream import Answer, Kind, MessageSink, UpstreamLink
from forethought.mcp.warmup import Handoff

if TYPE_CHECKING:
    from forethought.mcp.daemon_hook import DaemonHook

log = logging.getLogger(__name__)

CANCELLED = "notifications/cancelled"
TOOLS_CHANGED = "notifications/tools/list_changed"
PROGRESS = "notifications/progress"
LOG_MESSAGE = "notifications/message"


class MessageSource(Protocol):
    """Where JSON-RPC messages come from: an ``mcp`` SDK transport's read stream."""

    def __aiter__(self) -> AsyncIterator[SessionMessage | Exception]: ...


CallObserver = Callable[[CallReport], None]


class Relay:
    """Relays one client session; :meth:`run` returns when the client disconnects."""

    def __init__(self, down_read: MessageSource, down_write: MessageSink, up_read: MessageSource,
                 link: UpstreamLink, speculator: SessionSpeculator,
                 on_call: CallObserver | None = None, exit_detail: Callable[[], str] | None = None,
                 daemon: DaemonHook | None = None) -> None:
        """``daemon``: the session's link to ``forethought serve`` (``--daemon``), asked first for every call."""
        self._down_read, self._down_write, self._up_read = down_read, down_write, up_read
        self.link = link
        self.speculator = speculator
        self.daemon = daemon
        self._on_call = on_call
        self._exit_detail = exit_detail or (lambda: "it closed its connection")
        self._forwarded: dict[RequestId, tuple[str, dict[str, Any] | None]] = {}
        self._calls: dict[RequestId, asyncio.Task[None]] = {}
        self._progress: dict[object, RequestId] = {}
        """Progress token -> the client request it belongs to (an HTTP transport streams it with that request)."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        upstream = asyncio.create_task(self._pump_upstream())
        try:
            await self._pump_downstream()
        finally:
            upstream.cancel()
            for task in [*self._calls.values(), *self._tasks]:
                task.cancel()
            await asyncio.gather(upstream, *self._calls.values(), *self._tasks, return_exceptions=True)
            if self.daemon is not None:
                await self.daemon.aclose()  # its early runs are withdrawn while the upstream can still hear it
            self.link.close("the client session ended")  # every request still tracked has ended for us
            self.speculator.name.give_up("the client session ended")
            await self.speculator.close()

    async def adopt(self, handoff: Handoff) -> None:
        """Take over a session whose first lines were relayed during warm-up (:mod:`~forethought.mcp.warmup`):
        learn from them what the relay learns as messages pass (the handshake, the tool list), watch the calls
        still waiting for their answers, and ask the upstream's name if only that can tell it."""
        probe: JSONRPCRequest | None = None
        for line in handoff.client_lines:
            message = _message(line)
            if not isinstance(message, JSONRPCRequest):
                continue
            probe = self.speculator.name.client_request(message, self.link.new_id) or probe
            if message.method == "tools/call":
                self.speculator.relayed_blind((message.params or {}).get("name"))
            # still waiting for its answer (unless one is below): if the upstream goes, it is answered then
            self._forwarded[message.id] = (message.method, message.params)
        for line in handoff.server_lines:
            answer = _message(line)
            if isinstance(answer, JSONRPCResponse | JSONRPCError):
                self.speculator.name.upstream_answered(answer)
                sent = self._forwarded.pop(answer.id, None) if answer.id is not None else None
                if sent is not None and sent[0] == "tools/list" and isinstance(answer, JSONRPCResponse):
                    await self.speculator.tools_page((sent[1] or {}).get("cursor"), answer.result)
        for request_id, write in handoff.open_writes.items():
            self.link.watch(request_id[1], write.end)
        if probe is not None:
            with contextlib.suppress(UpstreamClosedError):
                await self.link.begin(probe, Kind.PROBE)

    async def settled(self) -> None:
        """Wait until the work owed to the answers already sent (each answer's guesses, then its learning)
        is done: what a test or a benchmark awaits between calls to take the worker's speed out of a run."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))  # unlike gather, a cancelled wait leaves the tasks running

    # --- client -> server -----------------------------------------------------------------------------

    async def _pump_downstream(self) -> None:
        async for item in self._down_read:
            if isinstance(item, Exception):
                log.warning("unparsable message from the client: %s", item)
                continue
            message = item.message
            if isinstance(message, JSONRPCRequest):
                await self._client_request(message)
            elif isinstance(message, JSONRPCNotification):
                await self._client_notification(message)
            else:  # the client's answer to a server request
                await self._send_up(message)

    async def _client_request(self, message: JSONRPCRequest) -> None:
        meta = (message.params or {}).get("_meta")
        if isinstance(meta, dict) and isinstance(meta.get("progressToken"), str | int):
            self._progress[meta["progressToken"]] = message.id
        if self.link.gone is not None:
            if message.method == "tools/call":
                self.speculator.relayed_blind((message.params or {}).get("name"), sent=False)
            await self._send_down(Answer(error=upstream_gone_error(self.link.gone)).message(message.id))
            return
        probe = self.speculator.name.client_request(message, self.link.new_id)
        if probe is not None:  # only the upstream itself can tell its name: ask before relaying the request
            try:
                await self.link.begin(probe, Kind.PROBE)
            except UpstreamClosedError:
                self.speculator.name.give_up("the upstream is gone")
        if message.method == "tools/call" and message.id not in self._calls:
            task = asyncio.create_task(self._tool_call(message))
            self._calls[message.id] = task
            task.add_done_callback(self._forget_call(message.id))
        else:
            self._forwarded[message.id] = (message.method, message.params)
            if not await self._send_up(message):
                self._forwarded.pop(message.id, None)
                await self._send_down(Answer(error=upstream_gone_error(self.link.gone or "")).message(message.id))

    def _forget_call(self, request_id: RequestId) -> Callable[[asyncio.Task[None]], None]:
        def forget(_: asyncio.Task[None]) -> None:
            self._calls.pop(request_id, None)

        return forget

    async def _client_notification(self, message: JSONRPCNotification) -> None:
        if message.method == CANCELLED and message.params is not None:
            task = self._calls.get(message.params.get("requestId"))  # type: ignore[arg-type]
            if task is not None:
                task.cancel()  # a cancelled request gets no answer; upstream hears of it below
        await self._send_up(message)

    async def _tool_call(self, message: JSONRPCRequest) -> None:
        daemon = self.daemon
        report = await (daemon.call(message, self.speculator.call) if daemon is not None
                        else self.speculator.call(message))
        if report.kind == "hit" and report.answer.logs:
            related = ServerMessageMetadata(related_request_id=message.id)
            for params in report.answer.logs:
                await self._send_down(JSONRPCNotification(jsonrpc="2.0", method=LOG_MESSAGE, params=dict(params)),
                                      related)
        if report.kind == "hit" and report.answer.progress:
            await self._replay_progress(message, report.answer.progress)
        await self._send_down(report.answer.message(message.id))
        if self._on_call is not None:
            self._on_call(report)
        self._spawn(self.speculator.after_answer(message, report))

    async def _replay_progress(self, message: JSONRPCRequest, progress: tuple[Mapping[str, Any], ...]) -> None:
        """A guess's progress, to the token of the client call it serves (if that call asked for progress)."""
        meta = (message.params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        if not isinstance(token, str | int):
            return
        related = ServerMessageMetadata(related_request_id=message.id)
        for params in progress:
            await self._send_down(JSONRPCNotification(jsonrpc="2.0", method=PROGRESS,
                                                      params={**params, "progressToken": token}), related)

    def _spawn(self, job: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await job
            except Exception:  # a guess never hurts the session
                log.warning("speculation step failed", exc_info=True)

        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_up(self, message: JSONRPCMessage) -> bool:
        try:
            await self.link.send(message)
            return True
        except UpstreamClosedError:
            return False

    # --- server -> client -----------------------------------------------------------------------------

    async def _pump_upstream(self) -> None:
        try:
            async for item in self._up_read:
                if isinstance(item, Exception):
                    log.warning("unparsable message from the upstream server: %s", item)
                    continue
                await self._server_message(item.message)
        except Exception as exc:  # the transport broke
            log.warning("upstream connection failed: %s", exc)
        await self._upstream_gone(self._exit_detail())

    async def _server_message(self, message: JSONRPCMessage) -> None:
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.speculator.name.upstream_answered(message)
            if self.link.deliver(message):
                return
            sent = self._forwarded.pop(message.id, None) if message.id is not None else None
            if sent is not None and sent[0] == "tools/list" and isinstance(message, JSONRPCResponse):
                await self._send_down(message)
                cursor = (sent[1] or {}).get("cursor")
                await self.speculator.tools_page(cursor, message.result)
                return
        elif isinstance(message, JSONRPCNotification) and message.method == TOOLS_CHANGED:
            self.speculator.tools_changed()
            if self.daemon is not None:
                self.daemon.tools_changed()
        elif (isinstance(message, JSONRPCNotification) and message.method == LOG_MESSAGE and message.params
              and not self._forwarded and self.link.log(message.params)):
            return  # only a guess of the proxy's can have caused it: kept with it, or dropped
        elif isinstance(message, JSONRPCNotification) and message.method == PROGRESS and message.params:
            if self.link.progress(message.params):
                return  # a guess's progress: kept with it
            related = self._progress.get(message.params.get("progressToken"))
            if related is not None:
                await self._send_down(message, ServerMessageMetadata(related_request_id=related))
                return
        await self._send_down(message)

    async def _upstream_gone(self, detail: str) -> None:
        self.link.close(detail)
        waiting, self._forwarded = self._forwarded, {}
        for request_id in waiting:
            await self._send_down(Answer(error=upstream_gone_error(detail)).message(request_id))

    async def _send_down(self, message: JSONRPCMessage, metadata: ServerMessageMetadata | None = None) -> None:
        if isinstance(message, JSONRPCResponse | JSONRPCError) and self._progress:
            self._progress = {t: i for t, i in self._progress.items() if i != message.id}
        try:
            await self._down_write.send(SessionMessage(message, metadata))
        except Exception as exc:  # the client is gone; the downstream pump ends the relay
            log.debug("could not answer the client: %s", exc)


def _message(line: bytes) -> JSONRPCMessage | None:
    try:
        message: JSONRPCMessage = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return None
    return message
