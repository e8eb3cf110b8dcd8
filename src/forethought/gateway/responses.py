"""The gateway's Responses API relay: upstream events to the client, and server-side continuation on a hit.

The Responses counterpart of :mod:`.gateway_relay`, on the same cache and post protocol. One
:class:`ResponsesRelay` per streamed ``POST /v1/responses``. It forwards the upstream's events (each as
``event: <type>`` and its data, the data text unchanged in the first upstream response) and holds back
``response.completed``. When the completed response (status ``completed``: one cut at its token limit,
which vLLM sends as ``response.completed`` with status ``incomplete``, is never continued, as the chat relay
never continues a ``length`` finish) holds ``function_call`` items, the relay asks the
response's scope for outputs for *every* call (waiting up to ``post_wait_s`` for posts still on their
way). On a match it sends one ``response.forethought_tool_result`` event per call::

    {"type": "response.forethought_tool_result", "sequence_number": n, "output_index": i,
     "call_id": ..., "name": ..., "output": ..., "segment": s,
     "item": {"type": "function_call_output", "call_id": ..., "output": ...}}

(``item`` is what the client appends to its input, exactly as it would after running the tool itself),
then re-issues the request upstream with ``input`` grown as the client's would be — the original input
(a string becomes one user message), the response's output items, the ``function_call_output`` items —
and relays the continuation in the same stream: its ``response.created`` / ``response.in_progress`` are
dropped, its ``sequence_number`` and ``output_index`` continue the stream's, and the final
``response.completed`` carries the last upstream response with the output items of every step and the
summed usage. Otherwise the held ``response.completed`` is sent as it came.

``response.failed``, ``response.incomplete`` and ``error`` events are passed on and end the response; a
stream that ends without any of them drops the client connection; an unparsable event or a refused
continuation becomes an ``error`` event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from forethought._core.calls import ToolCall
from forethought.errors import StreamDroppedError, UpstreamError
from forethought.gateway.cache import ResponseScope, ToolOutputCache
from forethought.gateway.relay import Opener, RelayStats, UpstreamRefused
from forethought.llm.sse import DEFAULT_MAX_LINE_BYTES, aiter_json
from forethought.llm.tool_cache import CONTINUATION_METADATA
from forethought.serve.http import StreamChunks, StreamCut

RESULT_EVENT = "response.forethought_tool_result"
"""The event type that carries a served tool result on a Responses stream."""
_ENDINGS = frozenset({"response.failed", "response.incomplete", "error"})
_DROPPED_IN_CONTINUATIONS = frozenset({"response.created", "response.in_progress"})
_USAGE_FIELDS = ("input_tokens", "output_tokens", "total_tokens")


@dataclass(slots=True)
class _Step:
    """One upstream response of the stream."""

    completed: dict[str, Any] | None = None
    completed_data: str = ""
    """The data text of the held ``response.completed`` (sent as it came when nothing was served)."""
    items: list[dict[str, Any]] = field(default_factory=list)
    """The ``response.output_item.done`` items, in order (used when ``response.completed`` omits them)."""
    ended: bool = False
    """Passed on an ending event (failed, incomplete, error): the stream is over."""
    failed: bool = False


@dataclass(slots=True)
class _Totals:
    items: list[Any] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


class ResponsesRelay:
    """Relays one streamed Responses API response, continuing it server-side while the cache serves its calls."""

    def __init__(self, body: dict[str, Any], first: httpx2.Response, scope: ResponseScope, opener: Opener,
                 cache: ToolOutputCache, stats: RelayStats, *, post_wait_s: float, max_continuations: int,
                 mark_continuations: bool, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.body = body
        raw = body.get("input")
        self.input: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(
            raw if isinstance(raw, list) else [])
        self._continuable = raw is None or isinstance(raw, str | list)
        """An input of another shape is relayed, never continued (the upstream judges it)."""
        self.scope = scope
        self.stats = stats
        self._opener = opener
        self._cache = cache
        self._response = first
        self._post_wait_s = post_wait_s
        self._max_continuations = max_continuations
        self._mark = mark_continuations
        self._max_line_bytes = max_line_bytes
        self._continued = 0
        self._sequence = 0
        self._offset = 0
        """Output items sent by earlier steps: a continuation's ``output_index`` starts after them."""
        self._totals = _Totals()
        stats.responses += 1

    async def chunks(self) -> StreamChunks:
        """The SSE body for the client."""
        try:
            while True:
                step = _Step()
                async for item in self._relay(step):
                    yield item
                await self._response.aclose()
                if step.failed or step.ended:
                    return
                if step.completed is None:
                    self.stats.upstream_dropped += 1
                    yield StreamCut.DROP
                    return
                output = [i for i in step.completed.get("output") or step.items if isinstance(i, dict)]
                self._add_usage(step.completed.get("usage"))
                cut = step.completed.get("status") not in (None, "completed")  # vLLM: "incomplete" (max tokens)
                if any(client_runs_other_call(i) for i in output):
                    cut = True  # all or nothing: a call only the client can run (custom, shell, computer) is there
                calls = [] if cut else [i for i in output if i.get("type") == "function_call"]
                served = await self._served(calls)
                if served is None:
                    yield self._final(step, output)
                    return
                segment = await self._cache.advance(self.scope)
                results = [{"type": "function_call_output", "call_id": c.get("call_id"), "output": out}
                           for c, out in zip(calls, served, strict=True)]
                for call, result in zip(calls, results, strict=True):
                    yield self._event(RESULT_EVENT, output_index=self._offset + output.index(call),
                                      call_id=call.get("call_id"), name=call.get("name"), output=result["output"],
                                      segment=segment, item=result)
                self.input += [*output, *results]
                self._totals.items += output
                self._offset += len(output)
                self._continued += 1
                self.stats.continuations += 1
                self.stats.served_calls += len(calls)
                try:
                    self._response = await self._opener(self._continuation_body())
                except (UpstreamRefused, httpx2.HTTPError) as exc:
                    self.stats.upstream_errors += 1
                    yield self._error(f"the continuation was refused upstream: {exc}")
                    return
        finally:
            await self._response.aclose()
            await self._cache.close(self.scope)

    async def _relay(self, step: _Step) -> AsyncIterator[bytes]:
        """Forward one upstream response's events (``response.completed`` held back in ``step``)."""
        try:
            async for event, payload in aiter_json(self._response, max_line_bytes=self._max_line_bytes):
                kind = str(event.get("type") or "")
                if kind == "response.completed" and isinstance(event.get("response"), dict):
                    step.completed, step.completed_data = event["response"], payload
                    continue
                if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
                    step.items.append(event["item"])
                if self._continued and kind in _DROPPED_IN_CONTINUATIONS:
                    continue
                if kind in _ENDINGS:
                    step.ended = True
                    if kind == "error":
                        self.stats.upstream_errors += 1
                if self._continued:
                    yield self._event(kind, **self._shifted(event))
                else:
                    number = event.get("sequence_number")
                    self._sequence = number if isinstance(number, int) else self._sequence + 1
                    yield f"event: {kind}\n".encode() + b"data: " + payload.encode() + b"\n\n"
                if step.ended:
                    return
        except StreamDroppedError:
            return  # nothing completed: the caller drops the client connection
        except UpstreamError as exc:  # a stream that is not SSE of JSON objects (forethought.llm.sse)
            self.stats.upstream_errors += 1
            step.failed = True
            too_long = "(max_line_bytes)" in str(exc)  # forethought.llm.sse's line cap
            yield self._error(f"upstream stream: {exc}", "upstream_line_too_long" if too_long else "upstream_error")

    def _shifted(self, event: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in event.items() if k not in ("type", "sequence_number")}
        if isinstance(fields.get("output_index"), int):
            fields["output_index"] += self._offset
        return fields

    async def _served(self, calls: list[dict[str, Any]]) -> list[str] | None:
        """Outputs for every function call of the response, if the cache has them (waiting a bounded time)."""
        if not calls or not self._continuable:
            return None
        if self._continued >= self._max_continuations:
            self.stats.tool_call_endings += 1
            return None
        started = time.monotonic()
        outputs = await self._cache.take(self.scope, [_call(c) for c in calls], self._post_wait_s)
        self.stats.post_waits += 1
        self.stats.post_wait_s += time.monotonic() - started
        if outputs is None:
            self.stats.tool_call_endings += 1
        return outputs

    def _continuation_body(self) -> dict[str, Any]:
        body = {**self.body, "input": self.input, "stream": True}
        if self._mark:
            metadata = body.get("metadata")
            body["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), CONTINUATION_METADATA: "true"}
        return body

    def _add_usage(self, usage: Any) -> None:
        for key in _USAGE_FIELDS:
            value = usage.get(key) if isinstance(usage, dict) else None
            if isinstance(value, int):
                self._totals.usage[key] = self._totals.usage.get(key, 0) + value

    def _final(self, step: _Step, output: list[dict[str, Any]]) -> bytes:
        completed = step.completed or {}
        if not self._continued:
            return b"event: response.completed\ndata: " + step.completed_data.encode() + b"\n\n"
        response = {**completed, "output": [*self._totals.items, *output]}
        usage = completed.get("usage")
        if isinstance(usage, dict):
            response["usage"] = {**usage, **self._totals.usage}
        return self._event("response.completed", response=response)

    def _event(self, kind: str, **fields: Any) -> bytes:
        self._sequence += 1
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        return f"event: {kind}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"

    def _error(self, message: str, code: str = "upstream_error") -> bytes:
        return self._event("error", code=code, message=message,
                           error={"message": message, "type": "upstream_error", "code": code})



HOSTED_CALLS = frozenset({"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
                          "mcp_call", "mcp_list_tools", "mcp_approval_request"})
"""Output items of tools the provider runs itself: they need no output from the client."""


def client_runs_other_call(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is a call the client must run and the gateway cannot serve: any ``*_call`` item but a
    ``function_call`` and the provider's own (``custom_tool_call``, ``local_shell_call``, ``computer_call`` and
    any type not known here)."""
    kind = item.get("type")
    return isinstance(kind, str) and kind.endswith("_call") and kind != "function_call" and kind not in HOSTED_CALLS

def _call(item: dict[str, Any]) -> ToolCall | None:
    """The call of a ``function_call`` item; ``None`` when its arguments are not a JSON object."""
    name, arguments = item.get("name"), item.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    return ToolCall(name, parsed) if isinstance(parsed, dict) else None
