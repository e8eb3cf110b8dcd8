"""The gateway's stream relay: upstream chunks to the client, and server-side continuation on a cache hit.

One :class:`Relay` per streamed response. It forwards the upstream's chunks (unchanged ones byte for byte,
so their ids are the upstream's; chunks it writes carry the gateway's response id) while reassembling
the tool calls (:class:`~forethought.llm.chat.ToolCallAssembler`, the same code the
client uses, so both sides agree on each call's id, name and argument text). The upstream's finish chunk
and usage are held back. When the message ends with ``finish_reason: "tool_calls"`` the relay asks the
response's scope for outputs for *every* call of the message, waiting up to ``post_wait_s`` for posts
that are still on their way. On a match it sends one ``delta.forethought_tool_result`` chunk per call,
appends the assistant message and the tool messages to the conversation exactly as the client would, and
re-issues the request upstream at once (``metadata.continuation = "true"``), relaying the continuation in
the same response. Otherwise it sends the finish chunk, the summed usage (when upstream sent any) and
``[DONE]``.

Failures stay inside the response: a dropped upstream drops the client connection (the client sees a
broken stream); an unparsable chunk or a refused continuation becomes an ``error`` chunk, which clients map
to an upstream error for that turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from forethought._core.calls import ToolCall
from forethought.errors import StreamDroppedError, UpstreamError
from forethought.gateway.cache import ResponseScope, ToolOutputCache
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.chat_chunks import CallSlots, call_text
from forethought.llm.events import ToolCallClosed
from forethought.llm.sse import DEFAULT_MAX_LINE_BYTES, aiter_json
from forethought.llm.tool_cache import CONTINUATION_METADATA, RESULT_FIELD
from forethought.serve.http import StreamChunks, StreamCut

Opener = Callable[[dict[str, Any]], Awaitable[httpx2.Response]]
"""Opens a streamed upstream request for a body; raises :class:`UpstreamRefused` on an error status."""


class UpstreamRefused(Exception):
    """The upstream answered an error status; ``status`` and ``body`` are passed on to the client."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"upstream answered HTTP {status}")
        self.status = status
        self.body = body



def chat_chunk(response_id: str, created: int, model: str, choices: list[dict[str, Any]],
               usage: dict[str, Any] | None = None, error: Any = None) -> bytes:
    """One Chat Completions stream chunk of the response ``response_id``, as a server-sent event."""
    data: dict[str, Any] = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                            "model": model, "choices": choices}
    if usage is not None:
        data["usage"] = usage
    if error is not None:
        data["error"] = error
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def served_results(messages: list[dict[str, Any]], text: str, ordered: Sequence[ToolCallClosed],
                   outputs: Sequence[str], next_segment: int) -> list[dict[str, Any]]:
    """Grow ``messages`` exactly as the client's conversation grows when it is served ``outputs`` for the
    calls of an assistant message (its ``text`` and ``ordered`` calls), and give the chunk choice that tells
    the client about each served result (one per call, in order)."""
    messages.append({"role": "assistant", "content": text or None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in ordered]})
    choices = []
    for call, output in zip(ordered, outputs, strict=True):
        messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        served = {"index": call.index, "tool_call_id": call.id, "name": call.name, "output": output,
                  "segment": next_segment}
        choices.append({"index": 0, "delta": {RESULT_FIELD: served}, "logprobs": None, "finish_reason": None})
    return choices

@dataclass(slots=True)
class RelayStats:
    """What the relays of one gateway did (all additive)."""

    responses: int = 0
    continuations: int = 0
    served_calls: int = 0
    tool_call_endings: int = 0
    post_waits: int = 0
    post_wait_s: float = 0.0
    upstream_dropped: int = 0
    upstream_errors: int = 0


@dataclass(slots=True)
class _Segment:
    """One assistant message of the response as it streams from upstream."""

    assembler: ToolCallAssembler = field(default_factory=ToolCallAssembler)
    slots: CallSlots = field(default_factory=CallSlots)
    """Which call a delta belongs to, read as the tap and the daemon read it (servers that number every
    call 0 give each new id a call of its own)."""
    text: list[str] = field(default_factory=list)
    closed: dict[int, ToolCallClosed] = field(default_factory=dict)
    finish: str | None = None
    failed: bool = False

    def note(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, ToolCallClosed):
                self.closed[event.index] = event


class Relay:
    """Relays one streamed response, continuing it server-side while the cache can serve its tool calls."""

    def __init__(self, body: dict[str, Any], first: httpx2.Response, scope: ResponseScope, opener: Opener,
                 cache: ToolOutputCache, stats: RelayStats, *, post_wait_s: float,
                 max_continuations: int, mark_continuations: bool,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.body = body
        self._max_line_bytes = max_line_bytes
        self.messages: list[Any] = list(body.get("messages") or [])
        self.scope = scope
        self.stats = stats
        self._opener = opener
        self._cache = cache
        self._response = first
        self._post_wait_s = post_wait_s
        self._max_continuations = max_continuations
        self._mark = mark_continuations
        self._created = int(time.time())
        self._model = str(body.get("model") or "")
        self._usage: dict[str, int] = {}
        self._continued = 0
        stats.responses += 1

    async def chunks(self) -> StreamChunks:
        """The SSE body for the client."""
        try:
            while True:
                segment = _Segment()
                async for item in self._relay(segment):
                    yield item
                await self._response.aclose()
                if segment.failed:
                    return
                if segment.finish is None:
                    self.stats.upstream_dropped += 1
                    yield StreamCut.DROP
                    return
                segment.note(segment.assembler.finish(segment.finish))
                outputs = await self._served(segment)
                if outputs is None:
                    yield self._chunk([{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": segment.finish}])
                    if self._usage:
                        yield self._chunk([], usage=self._usage_body())
                    yield b"data: [DONE]\n\n"
                    return
                for item in self._continue(segment, outputs, await self._cache.advance(self.scope)):
                    yield item
                try:
                    self._response = await self._opener(self._continuation_body())
                except (UpstreamRefused, httpx2.HTTPError) as exc:
                    self.stats.upstream_errors += 1
                    yield self._error(f"the continuation was refused upstream: {exc}")
                    return
        finally:
            await self._response.aclose()
            await self._cache.close(self.scope)

    async def _relay(self, segment: _Segment) -> AsyncIterator[bytes]:
        """Forward one upstream message (finish and usage held back); ``segment`` records what it held."""
        try:
            async for chunk, payload in aiter_json(self._response, max_line_bytes=self._max_line_bytes):
                if chunk.get("error"):
                    self.stats.upstream_errors += 1
                    segment.failed = True
                    yield self._chunk([], error=chunk["error"])
                    return
                held = isinstance(chunk.get("usage"), dict)
                if held:
                    self._add_usage(chunk["usage"])
                self._model = str(chunk.get("model") or self._model)
                original = chunk.get("choices") or []
                choices = [c for c in (self._choice(segment, c) for c in original) if c]
                if not held and choices == original:
                    yield b"data: " + payload.encode() + b"\n\n"  # unchanged: forwarded as it came
                elif choices:
                    yield self._chunk(choices)
        except StreamDroppedError:
            return  # no finish reason: the caller drops the client connection
        except UpstreamError as exc:  # a stream that is not SSE of JSON objects (forethought.llm.sse)
            self.stats.upstream_errors += 1
            segment.failed = True
            yield self._error(f"upstream stream: {exc}")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.stats.upstream_errors += 1
            segment.failed = True
            yield self._error(f"unparsable upstream chunk: {exc!r}")

    @staticmethod
    def _choice(segment: _Segment, choice: dict[str, Any]) -> dict[str, Any] | None:
        if choice.get("index", 0) != 0:
            return choice
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            segment.text.append(delta["content"])
        for part in delta.get("tool_calls") or ():
            function = part.get("function") or {}
            call_id = call_text(part.get("id"))
            index = segment.slots.slot(part.get("index"), call_id)
            segment.note(segment.assembler.add_tool_delta(index, call_id, call_text(function.get("name")),
                                                          function.get("arguments")))
        if choice.get("finish_reason") is not None:
            segment.finish = str(choice["finish_reason"])
            if not delta:
                return None
            return {**choice, "finish_reason": None}
        return choice

    async def _served(self, segment: _Segment) -> list[str] | None:
        """Outputs for every call of the message, if the cache has them (waiting a bounded time)."""
        if segment.finish != "tool_calls" or not segment.closed:
            return None
        if self._continued >= self._max_continuations:
            self.stats.tool_call_endings += 1
            return None
        ordered = [segment.closed[i] for i in sorted(segment.closed)]
        calls = [ToolCall(c.name, c.arguments) if c.ok and c.arguments is not None else None for c in ordered]
        started = time.monotonic()
        outputs = await self._cache.take(self.scope, calls, self._post_wait_s)
        self.stats.post_waits += 1
        self.stats.post_wait_s += time.monotonic() - started
        if outputs is None:
            self.stats.tool_call_endings += 1
        return outputs

    def _continue(self, segment: _Segment, outputs: list[str], next_segment: int) -> list[bytes]:
        """Result chunks for the client; the conversation grows exactly as the client's would."""
        ordered = [segment.closed[i] for i in sorted(segment.closed)]
        out = [self._chunk([choice]) for choice in
               served_results(self.messages, "".join(segment.text), ordered, outputs, next_segment)]
        self._continued += 1
        self.stats.continuations += 1
        self.stats.served_calls += len(ordered)
        return out

    def _continuation_body(self) -> dict[str, Any]:
        body = {**self.body, "messages": self.messages, "stream": True}
        if self._mark:
            metadata = body.get("metadata")
            body["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), CONTINUATION_METADATA: "true"}
        return body

    def _add_usage(self, usage: dict[str, Any]) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                self._usage[key] = self._usage.get(key, 0) + value
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int):
            self._usage["cached_tokens"] = self._usage.get("cached_tokens", 0) + cached

    def _usage_body(self) -> dict[str, Any]:
        usage: dict[str, Any] = {k: self._usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens",
                                                                    "total_tokens")}
        if "cached_tokens" in self._usage:
            usage["prompt_tokens_details"] = {"cached_tokens": self._usage["cached_tokens"]}
        return usage

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None,
               error: Any = None) -> bytes:
        return chat_chunk(self.scope.response_id, self._created, self._model, choices, usage, error)

    def _error(self, message: str) -> bytes:
        return self._chunk([], error={"message": message, "type": "upstream_error"})
