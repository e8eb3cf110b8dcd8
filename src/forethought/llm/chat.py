"""Streaming chat completions from any OpenAI-compatible endpoint, as forethought's small event stream.

:class:`LLMClient` is the seam the agent and the model speculator talk to. :class:`OpenAIChatClient` is the
real implementation on the ``openai`` SDK (``AsyncOpenAI``, ``stream=True``): it reassembles streamed
tool calls per ``index`` (parallel calls included) and emits :class:`~forethought.llm.events.ToolCallClosed`
the moment a call's arguments object closes mid-stream, not at message end.

Errors are mapped here, at the SDK boundary, to :mod:`forethought.errors`:

* a stream that ends without a finish reason, or whose connection breaks mid-stream, raises
  :class:`~forethought.errors.StreamDroppedError`;
* an error status, an API error, a failure to connect, or an unparsable chunk raises
  :class:`~forethought.errors.UpstreamError`;
* malformed or cut-off argument JSON is not an exception: that call's ``ToolCallClosed`` carries
  ``error`` (with ``arguments=None``), so the agent can report it to the model as serial execution would.

Behind forethought's gateway (docs/gateway.md) a response may hold several assistant messages: a chunk
whose delta carries ``forethought_tool_result`` becomes a
:class:`~forethought.llm.events.ToolResultServed`, and tool calls after it start a new message. With
``response_events=True`` the client also emits :class:`~forethought.llm.events.ResponseStarted` first,
carrying the response headers (the gateway's response id and token).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
import openai

from forethought.errors import MalformedArgumentsJSONError, StreamDroppedError, UpstreamError
from forethought.llm.closing import ArgumentStream
from forethought.llm.events import (
    NAME_IN_PIECES,
    ClientItem,
    LLMEvent,
    MessageDone,
    ResponseStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
    ToolResultServed,
    Usage,
)
from forethought.llm.sse import aiter_json
from forethought.llm.tool_cache import CACHE_CLIENT_HEADER, CACHE_CLIENT_VALUE, RESPONSE_ID_HEADER, RESULT_FIELD

DEFAULT_TIMEOUT_S = 600.0


class LLMClient(Protocol):
    """Streams one chat completion as :data:`~forethought.llm.events.LLMEvent` values."""

    def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               **extra: Any) -> AsyncIterator[LLMEvent]:
        """Start a completion; ``extra`` fields go into the request body (e.g. ``metadata``, ``seed``).

        A consumer that stops before ``MessageDone`` should close the iterator (``contextlib.aclosing``) or
        cancel its task, so the connection is released at once.
        """


@dataclass(slots=True)
class _CallState:
    """What is known so far of one streamed tool call."""

    index: int
    id: str = ""
    name: str = ""
    started: bool = False
    done: bool = False
    arguments: ArgumentStream | None = None
    invented_id: bool = False
    """The id was made up at the start (``call_<index>``): a real one that comes later replaces it."""
    closed_id: str = ""
    """The id the call closed with (a close is sent again at message end if the real id came after)."""
    closed_name: str = ""
    """The name the call closed with (a close is sent again at message end if more of the name came after)."""
    doubted: bool = False
    """Its name came in pieces (:data:`~forethought.llm.events.NAME_IN_PIECES` was sent)."""

    def stream(self) -> ArgumentStream:
        if self.arguments is None:
            self.arguments = ArgumentStream(self.name)
        return self.arguments


class ToolCallAssembler:
    """Turns the chunk-level deltas of one message into events (provider independent, no I/O).

    ``add_text`` / ``add_tool_delta`` return the events a delta produced; ``finish`` returns the closing
    events for calls still open at message end (their arguments never closed: an error).

    A call closes the moment its arguments object does, so that it can start early. What the stream says of
    it afterwards is taken at message end, where ``finish`` closes it again (consumers keep the latest close
    of an index): with an error when text other than whitespace followed the object (the argument text is
    then not one JSON object: ``{"a": 1}, "b": 2}``), with the real id when it came after a made-up one. A
    call whose arguments close before its name comes waits for the name (or the message's end) to start.

    A name that comes in pieces is joined, as the Python SDK joins it, and, since other client libraries keep
    one piece instead, the call is in doubt: a :class:`~forethought.llm.events.ClientItem` of kind
    :data:`~forethought.llm.events.NAME_IN_PIECES` says so (not with ``join_names``, for a caller known to join).
    A piece equal to the whole name so far is a server sending the name again (several do, in every chunk):
    taken once, and not in doubt (the Python SDK would double it into a name no caller's tool has, as a rule).
    The name a call starts with may still grow: its close carries the name as known then, and a name that grew
    after the close is closed again at message end (:class:`~forethought.llm.dispatch.EarlyDispatch` then
    treats whatever it started early for the call, and after it, as not the model's).
    """

    def __init__(self, join_names: bool = False) -> None:
        """``join_names``: the caller is known to join a name's pieces (pydantic-ai): they are joined, and no
        doubt is raised."""
        self._calls: dict[int, _CallState] = {}
        self._join_names = join_names

    def add_text(self, text: str) -> list[LLMEvent]:
        return [TextDelta(text)] if text else []

    def add_tool_delta(self, index: int, call_id: str | None, name: str | None,
                       fragment: str | None) -> list[LLMEvent]:
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _CallState(index)
        if call_id and (not call.id or call.invented_id):
            call.id, call.invented_id = call_id, False
        events: list[LLMEvent] = []
        if name:
            if call.name and name == call.name and not self._join_names:
                pass  # the whole name sent again (MiniMax, Fireworks and others send it in every chunk): once
            elif call.name:
                call.name += name  # joined, as the Python SDK joins the pieces
                if not self._join_names and not call.doubted:
                    call.doubted = True  # other client libraries keep one piece instead: say so once
                    events.append(ClientItem(NAME_IN_PIECES))
            else:
                call.name = name
        if not call.started and call.name:
            events.append(self._start(call))
            if call.arguments is not None and call.arguments.raw:
                events.append(ToolCallArgumentsDelta(index, call.arguments.raw))
            if call.arguments is not None and call.arguments.closed and not call.done:
                events.append(self._close(call, None))  # its arguments closed before its name came
        if fragment:
            if call.done or (call.arguments is not None and call.arguments.closed):
                call.stream().feed(fragment)  # after the object: kept as trailing text, judged at the end
                return events
            if call.started:
                events.append(ToolCallArgumentsDelta(index, fragment))
            if call.stream().feed(fragment) and call.started:
                events.append(self._close(call, None))
        return events

    def finish(self, finish_reason: str) -> list[LLMEvent]:
        events: list[LLMEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.done:
                trailing = call.stream().trailing
                if trailing.strip():
                    events.append(ToolCallClosed(call.index, call.id, call.name, None, call.stream().raw + trailing,
                                                 f"{call.name}: arguments are not a single JSON object "
                                                 f"(text after its closing brace: {len(trailing)} characters)"))
                elif call.id != call.closed_id or call.name != call.closed_name:
                    events.append(self._close(call, None))  # again, with the id or name that came after the close
                continue
            if not call.started:
                events.append(self._start(call))
            events.append(self._close(call, finish_reason))
        return events

    def _start(self, call: _CallState) -> ToolCallStarted:
        call.started = True
        if not call.id:
            call.id, call.invented_id = f"call_{call.index}", True
        if call.arguments is not None:
            call.arguments.tool = call.name
        return ToolCallStarted(call.index, call.id, call.name)

    def _close(self, call: _CallState, finish_reason: str | None) -> ToolCallClosed:
        """Close ``call``: mid-stream when ``finish_reason`` is ``None``, else at message end."""
        call.done = True
        call.closed_id, call.closed_name = call.id, call.name
        stream = call.stream()
        stream.tool = call.name
        try:
            arguments = stream.parse() if finish_reason is None else stream.finish(finish_reason)
        except MalformedArgumentsJSONError as exc:
            return ToolCallClosed(call.index, call.id, call.name, None, stream.raw, str(exc))
        return ToolCallClosed(call.index, call.id, call.name, arguments, stream.raw, None)


def chat_usage(usage: Any) -> Usage | None:
    """A Chat Completions ``usage`` object as :class:`~forethought.llm.events.Usage` (``None`` unless a dict)."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                 int(usage.get("total_tokens") or 0), int(cached or 0))


def _upstream(exc: openai.APIError) -> UpstreamError:
    body = exc.body
    detail = body.get("message") if isinstance(body, dict) else None
    message = detail if isinstance(detail, str) and detail else exc.message
    if isinstance(exc, openai.APIStatusError):
        return UpstreamError(f"endpoint answered HTTP {exc.status_code}: {message}")
    return UpstreamError(f"endpoint error: {message}")


class OpenAIChatClient:
    """:class:`LLMClient` over an OpenAI-compatible ``/v1/chat/completions`` endpoint (streaming).

    ``base_url`` includes the ``/v1`` suffix, e.g. ``http://127.0.0.1:8000/v1``. ``include_usage`` asks for
    a final usage chunk (``stream_options``); turn it off for servers that reject the option.
    ``max_retries`` is the SDK's retry count for failures before the stream starts. ``response_events``
    makes every stream start with a :class:`~forethought.llm.events.ResponseStarted` (headers, URL).

    The request, its retries and its HTTP errors go through ``AsyncOpenAI``; the server-sent events are
    decoded here as plain JSON: the SDK's per-chunk model objects cost more than everything else in a
    streamed request (a 40-chunk message on loopback, measured: 12 ms per request with them, 4 ms without).
    """

    def __init__(self, base_url: str, api_key: str = "not-needed", timeout: float = DEFAULT_TIMEOUT_S, *,
                 include_usage: bool = True, max_retries: int = 2, response_events: bool = False,
                 headers: Mapping[str, str] | None = None, client: openai.AsyncOpenAI | None = None) -> None:
        self.base_url = base_url
        self.include_usage = include_usage
        self.response_events = response_events
        self._own = client is None
        self._client = client or openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout,
                                                    max_retries=max_retries,
                                                    default_headers=dict(headers or {}) or None)

    @classmethod
    def from_client(cls, client: openai.AsyncOpenAI, **kwargs: Any) -> OpenAIChatClient:
        """A client that sends through an ``AsyncOpenAI`` you already have (its URL, key, headers, retries);
        :meth:`aclose` leaves it open."""
        return cls(str(client.base_url), client=client, **kwargs)

    @classmethod
    def for_gateway(cls, base_url: str, **kwargs: Any) -> OpenAIChatClient:
        """A client for an engine-side agent behind forethought's gateway: response headers surfaced as
        :class:`~forethought.llm.events.ResponseStarted`, and the gateway told that results will be posted."""
        headers = {**dict(kwargs.pop("headers", None) or {}), CACHE_CLIENT_HEADER: CACHE_CLIENT_VALUE}
        return cls(base_url, response_events=True, headers=headers, **kwargs)

    async def aclose(self) -> None:
        """Close the underlying HTTP connections (not those of a client given to :meth:`from_client`)."""
        if self._own:
            await self._client.close()

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        """Stream one completion; every field of ``extra`` is sent in the request body as given."""
        # The conversation and tools travel in ``extra_body``: they are plain JSON already, and the SDK's
        # recursive TypedDict transform of ``messages`` cost ~7 ms of event-loop time per request here
        # (profiled), which a speculator's parallel samples multiply. The body sent is the same.
        body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {}), **extra}
        request = self._client.chat.completions.with_streaming_response.create(
            model=model, messages=[], stream=True,
            stream_options={"include_usage": True} if self.include_usage else openai.omit,
            extra_body=body)
        try:
            response = await request.__aenter__()
        except openai.APIConnectionError as exc:
            raise UpstreamError(f"cannot reach {self.base_url}: {exc.message}") from exc
        except openai.APIError as exc:
            raise _upstream(exc) from exc
        except openai.OpenAIError as exc:
            raise UpstreamError(f"endpoint error: {exc}") from exc
        assembler = ToolCallAssembler()
        finish_reason: str | None = None
        usage: Usage | None = None
        response_id: str | None = None
        try:
            if self.response_events:
                http = response.http_response
                headers = {k.lower(): v for k, v in http.headers.items()}
                yield ResponseStarted(headers.get(RESPONSE_ID_HEADER), headers, str(http.request.url))
            async for chunk in _chunks(response.http_response):
                response_id = response_id or chunk.get("id")
                if chunk.get("usage") is not None:
                    usage = chat_usage(chunk["usage"])
                for choice in chunk.get("choices") or ():
                    if choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta") or {}
                    served = delta.get(RESULT_FIELD)
                    if served is not None:
                        for event in assembler.finish("tool_calls"):
                            yield event
                        yield _served(served)
                        assembler = ToolCallAssembler()  # what follows is the next message of the response
                    if delta.get("content"):
                        for event in assembler.add_text(delta["content"]):
                            yield event
                    for tool_delta in delta.get("tool_calls") or ():
                        function = tool_delta.get("function") or {}
                        events = assembler.add_tool_delta(int(tool_delta["index"]), tool_delta.get("id"),
                                                          function.get("name"), function.get("arguments"))
                        for event in events:
                            yield event
                    if choice.get("finish_reason") is not None:
                        finish_reason = str(choice["finish_reason"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(f"unparsable stream chunk from {self.base_url}: {exc!r}") from exc
        finally:
            await request.__aexit__(None, None, None)
        if finish_reason is None:
            raise StreamDroppedError(f"stream from {self.base_url} ended without a finish reason")
        for event in assembler.finish(finish_reason):
            yield event
        yield MessageDone(finish_reason, usage, response_id)


def _served(payload: Any) -> ToolResultServed:
    """A ``forethought_tool_result`` delta as an event; a malformed one is an unparsable chunk."""
    if not isinstance(payload, dict):
        raise ValueError(f"{RESULT_FIELD} must be an object, got {type(payload).__name__}")
    index, call_id, output = payload.get("index", 0), payload.get("tool_call_id"), payload.get("output")
    name, segment = payload.get("name", ""), payload.get("segment", 0)
    if (not isinstance(index, int) or not isinstance(call_id, str) or not isinstance(output, str)
            or not isinstance(name, str) or not isinstance(segment, int)):
        raise ValueError(f"{RESULT_FIELD} needs index (int), tool_call_id, name, output (strings), segment (int)")
    return ToolResultServed(index, call_id, name, output, segment)


async def _chunks(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE body up to ``[DONE]`` (:mod:`forethought.llm.sse`); an ``error`` chunk raises."""
    async for chunk, _ in aiter_json(response):
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise UpstreamError(f"endpoint error mid-stream: {message}")
        yield chunk
