"""The plugin's own chat endpoint: a response that continues inside vLLM's engine when a cached result matches.

``POST /forethought/engine/v1/chat/completions`` (streaming) serves a chat response as one streaming-input
request on vLLM's engine client (:mod:`.session` has the mechanism). Each segment of the response (one
assistant message) is prepared by vLLM's own pieces, taken from the running server
(``app.state.openai_serving_chat``): the request model (``ChatCompletionRequest``), the chat template and
tokenizer (``render_chat_request``), the sampling parameters (``to_sampling_params``), and the chunks, tool
parser included (``chat_completion_stream_generator``, fed with the segment's outputs). When the message
ends with ``finish_reason: "tool_calls"`` and forethought's cache (the plugin's gateway cache: the same
``POST /cache-tool-output/{response_id}``, tokens and limits) holds a result for every call, the response
sends one ``delta.forethought_tool_result`` chunk per call, as the gateway relay does, and the next segment
is appended to the SAME engine request: only the tokens past what the engine already holds are sent
(:func:`continuation_chunk`), with the last sampled token in front (vLLM drops it at a chunk's stop). No
client round trip, no re-prefill. When nothing matches, the response ends as vLLM's would.

A continuation stays inside the engine only when it is exact: the conversation the chat template renders
for the next segment must begin with every token the engine holds (prompt and generated), and neither
segment may carry a grammar (vLLM 0.32 keeps a request's first grammar for its whole life). Otherwise the
session ends and the segment runs as a new request (the prefix cache serves what it holds): what a client
would have sent, token for token. Either way the client sees the transcript of the plain loop.

A ``Pinner`` (the replay proxy's ``/replay/pin`` in the benchmark: :class:`ReplayPinner`) may rewrite each
segment's body before vLLM sees it and check the calls it produced; without one the client's body is used
as it is. ``vllm`` is imported when a request is served, so this module imports without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from forethought._core.calls import ToolCall
from forethought.errors import WorkloadError
from forethought.gateway.app import CACHE_ROUTE, Gateway
from forethought.gateway.cache import ResponseScope
from forethought.gateway.relay import chat_chunk, served_results
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.chat_chunks import CallSlots, call_text
from forethought.llm.events import ToolCallClosed
from forethought.llm.tool_cache import (
    CACHE_CLIENT_HEADER,
    CACHE_CLIENT_VALUE,
    CACHE_PATH_HEADER,
    RESPONSE_ID_HEADER,
    TOKEN_HEADER,
)
from forethought.serve.http import EventStream, StreamChunks

END_DRAIN_S = 5.0


class Pinner(Protocol):
    """Rewrites a segment's body before vLLM sees it, and checks the calls vLLM produced for it."""

    async def pin(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def check(self, body: dict[str, Any], calls: Sequence[tuple[str, str]]) -> str | None:
        """``None`` when the calls are right, else why not (a protocol: :class:`ReplayPinner` implements it)."""


class ReplayPinner:
    """The replay proxy's pinning over HTTP (``POST /replay/pin`` and ``/replay/check``)."""

    def __init__(self, proxy_url: str) -> None:
        self.url = proxy_url.rstrip("/")
        self._http = httpx2.AsyncClient(timeout=60.0)

    async def pin(self, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._http.post(self.url + "/replay/pin", json=body)
        if response.status_code != 200:
            raise WorkloadError(f"the replay proxy refused to pin: {response.text[:500]}")
        pinned: dict[str, Any] = response.json()["body"]
        return pinned

    async def aclose(self) -> None:
        await self._http.aclose()

    async def check(self, body: dict[str, Any], calls: Sequence[tuple[str, str]]) -> str | None:
        response = await self._http.post(self.url + "/replay/check", json={"body": body, "calls": list(calls)})
        response.raise_for_status()
        verdict = response.json()
        return None if verdict.get("ok") else str(verdict.get("message"))


@dataclass(slots=True)
class EngineChatStats:
    """What the endpoint did (additive): segments continued inside the engine and the tokens sent for them."""

    responses: int = 0
    segments: int = 0
    continued_in_engine: int = 0
    continued_fresh: int = 0
    appended_tokens: int = 0
    first_prompt_tokens: int = 0
    fresh_prompt_tokens: int = 0
    served_calls: int = 0
    tool_call_endings: int = 0
    errors: int = 0


def continuation_chunk(held: Sequence[int], prompt: Sequence[int]) -> list[int] | None:
    """The tokens to append to a session that holds ``held`` (its prompt and every token it sampled) so it
    holds ``prompt``: ``prompt`` past ``held``, headed by ``held``'s last token (the engine dropped it at
    the stop). ``None`` when ``prompt`` does not extend ``held`` (then only a new request is exact)."""
    if not held or len(prompt) <= len(held) or list(prompt[:len(held)]) != list(held):
        return None
    return list(prompt[len(held) - 1:])


class _Session:
    """One streaming-input request: chunks go in through a queue, outputs come out segment by segment."""

    def __init__(self, engine: Any, prompt_ids: Sequence[int], params: Any, request_id: str) -> None:
        from vllm.engine.protocol import StreamingInput

        self._input = StreamingInput
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.queue.put_nowait(StreamingInput(prompt={"prompt_token_ids": list(prompt_ids)}, sampling_params=params))
        self.held = list(prompt_ids)
        self.grammar = getattr(params, "structured_outputs", None) is not None
        self.stream = engine.generate(self._inputs(), params, request_id)
        self.ended = False

    async def _inputs(self) -> AsyncIterator[Any]:
        while (item := await self.queue.get()) is not None:
            yield item

    async def segment(self) -> AsyncIterator[Any]:
        """The outputs of the current chunk, up to and including the one with its finish reason."""
        async for out in self.stream:
            completion = out.outputs[0]
            self.held.extend(completion.token_ids)
            yield out
            if completion.finish_reason is not None:
                return

    def extend(self, prompt_ids: Sequence[int], params: Any) -> int | None:
        """Append the next segment (its whole rendered prompt given) if that is exact; the tokens sent."""
        if self.grammar or getattr(params, "structured_outputs", None) is not None:
            return None
        chunk = continuation_chunk(self.held, prompt_ids)
        if chunk is None:
            return None
        self.queue.put_nowait(self._input(prompt={"prompt_token_ids": chunk}, sampling_params=params))
        self.held = list(prompt_ids)
        return len(chunk)

    async def end(self) -> None:
        """Close the input (the engine finishes the parked request) and release the output stream."""
        if self.ended:
            return
        self.ended = True
        self.queue.put_nowait(None)
        try:
            async with asyncio.timeout(END_DRAIN_S):
                async for _ in self.stream:
                    pass
        except Exception:  # a session that fails to end cleanly is aborted below
            pass
        finally:  # also when the client went away mid-drain: closing the stream aborts the engine request
            with contextlib.suppress(Exception):
                await self.stream.aclose()


@dataclass(slots=True)
class _Segment:
    assembler: ToolCallAssembler
    closed: dict[int, ToolCallClosed]
    text: list[str]
    finish: str | None = None
    failed: bool = False
    slots: CallSlots = field(default_factory=CallSlots)
    """Which call a delta belongs to, read as the gateway, the tap and the daemon read it."""

    def note(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, ToolCallClosed):
                self.closed[event.index] = event


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


class EngineChat:
    """The endpoint's state (the plugin's gateway cache, the pinner, counters) and its route handler."""

    def __init__(self, gateway: Gateway, pinner: Pinner | None = None) -> None:
        self.gateway = gateway
        self.pinner = pinner
        self.engine: Any = None
        self.stats = EngineChatStats()

    async def completions(self, request: Request) -> Response:
        raw = await request.body()
        if len(raw) > self.gateway.config.max_request_bytes:
            return _error(413, "request body too large")
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "request body must be JSON")
        if not isinstance(body, dict) or not body.get("stream") or not isinstance(body.get("messages"), list):
            return _error(400, "this endpoint serves streaming chat completions (stream: true, messages)")
        serving = getattr(request.app.state, "openai_serving_chat", None)
        if serving is None or self.engine is None:
            return _error(503, "vLLM's chat serving is not ready", "upstream_error")
        scope = await self.gateway.cache.open(body.get("tools"), expects_posts=request.headers.get(
            CACHE_CLIENT_HEADER) == CACHE_CLIENT_VALUE)
        response = _Response(self, serving, body, scope)
        try:  # the first segment is prepared before the stream starts, so a request vLLM refuses is a 4xx
            response.first = await response.prepare()
        except (WorkloadError, ValueError, httpx2.HTTPError) as exc:
            await self.gateway.cache.close(scope)
            self.stats.errors += 1
            return _error(400, f"cannot prepare the response: {exc}")
        self.stats.responses += 1
        stream = EventStream(response.chunks())
        stream.headers[RESPONSE_ID_HEADER] = scope.response_id
        stream.headers[TOKEN_HEADER] = scope.token
        stream.headers[CACHE_PATH_HEADER] = CACHE_ROUTE.format(response_id=scope.response_id)
        return stream

    async def stats_route(self, request: Request) -> Response:
        return JSONResponse(asdict(self.stats))

    async def reset_route(self, request: Request) -> Response:
        for name in EngineChatStats.__dataclass_fields__:  # in place: responses in flight keep counting here
            setattr(self.stats, name, 0)
        return JSONResponse({"reset": True})


class _Response:
    """One streamed response: its segments, its engine session, its cache scope."""

    def __init__(self, owner: EngineChat, serving: Any, body: dict[str, Any], scope: ResponseScope) -> None:
        self.owner = owner
        self.stats = owner.stats
        self.serving = serving
        self.body = body
        self.scope = scope
        self.messages: list[Any] = list(body["messages"])
        self.usage: dict[str, int] = {}
        self.created = int(time.time())
        self.model = str(body.get("model") or "")
        self.session: _Session | None = None
        self.continued = 0
        self.first: tuple[Any, Any, list[int], Any] | None = None

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None,
               error: Any = None) -> bytes:
        return chat_chunk(self.scope.response_id, self.created, self.model, choices, usage, error)

    def _error(self, message: str, kind: str = "upstream_error") -> bytes:
        self.stats.errors += 1
        return self._chunk([], error={"message": message, "type": kind})

    async def chunks(self) -> StreamChunks:
        try:
            while True:
                segment_body = self._segment_body()
                try:
                    prepared, self.first = self.first or await self.prepare(), None
                except (WorkloadError, ValueError, httpx2.HTTPError) as exc:
                    yield self._error(f"cannot prepare the response: {exc}", "invalid_request_error")
                    return
                request, conversation, prompt_ids, params = prepared
                await self._schedule(prompt_ids, params)
                segment = _Segment(ToolCallAssembler(), {}, [])
                async for item in self._relay(segment, request, conversation):
                    yield item
                if segment.failed:
                    return
                if segment.finish is None:
                    yield self._error("the engine ended the segment without a finish reason")
                    return
                segment.note(segment.assembler.finish(segment.finish))
                ordered = [segment.closed[i] for i in sorted(segment.closed)]
                if self.owner.pinner is not None:
                    wrong = await self.owner.pinner.check(segment_body, [(c.name, c.raw) for c in ordered])
                    if wrong is not None:
                        yield self._error(f"replay mismatch: {wrong}", "replay_mismatch")
                        return
                outputs = await self._served(segment, ordered)
                if outputs is None:
                    yield self._chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": segment.finish}])
                    if self.usage:
                        yield self._chunk([], usage=self._usage_body())
                    yield b"data: [DONE]\n\n"
                    return
                for item in self._continue(segment, ordered, outputs, await self.owner.gateway.cache.advance(
                        self.scope)):
                    yield item
        finally:
            if self.session is not None:
                await self.session.end()
            await self.owner.gateway.cache.close(self.scope)

    def _segment_body(self) -> dict[str, Any]:
        return {**self.body, "messages": self.messages, "stream": True}

    async def prepare(self) -> tuple[Any, Any, list[int], Any]:
        """vLLM's request object, conversation, prompt tokens and sampling parameters for the next segment."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.serve.utils.api_utils import get_max_tokens

        body = self._segment_body()
        pinned = await self.owner.pinner.pin(body) if self.owner.pinner is not None else body
        try:
            request = ChatCompletionRequest.model_validate(pinned)
        except Exception as exc:  # pydantic's ValidationError: the body is not a request vLLM takes
            raise WorkloadError(f"vLLM refuses the request: {exc}") from None
        rendered = await self.serving.render_chat_request(request)
        if not isinstance(rendered, tuple):  # vLLM's ErrorResponse
            raise WorkloadError(f"vLLM refuses the request: {getattr(rendered, 'error', rendered)}")
        conversation, engine_inputs = rendered
        if len(engine_inputs) != 1:
            raise WorkloadError("one prompt per response")
        prompt_ids = list(self.serving._extract_prompt_components(engine_inputs[0]).token_ids)
        max_tokens = get_max_tokens(self.serving.model_config.max_model_len,
                                    request.max_completion_tokens if request.max_completion_tokens is not None
                                    else request.max_tokens, len(prompt_ids), self.serving.default_sampling_params,
                                    self.serving.override_max_tokens)
        params = request.to_sampling_params(max_tokens, self.serving.default_sampling_params)
        return request, conversation, prompt_ids, params

    async def _schedule(self, prompt_ids: list[int], params: Any) -> None:
        """Append the segment to the live session if that is exact, else start a new request."""
        self.stats.segments += 1
        if self.session is not None:
            sent = self.session.extend(prompt_ids, params)
            if sent is not None:
                self.stats.continued_in_engine += 1
                self.stats.appended_tokens += sent
                return
            self.stats.continued_fresh += 1
            self.stats.fresh_prompt_tokens += len(prompt_ids)
            await self.session.end()
            self.session = None
        else:
            self.stats.first_prompt_tokens += len(prompt_ids)
        self.session = _Session(self.owner.engine, prompt_ids, params,
                                f"{self.scope.response_id}-{self.stats.segments}")

    async def _relay(self, segment: _Segment, request: Any, conversation: Any) -> AsyncIterator[bytes]:
        """vLLM's chunks for the segment, the finish and usage held back (the response may go on)."""
        from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata

        assert self.session is not None
        serving = self.serving
        generator = serving.chat_completion_stream_generator(
            request, self.session.segment(), self.scope.response_id, serving.models.model_name(None),
            conversation, serving.renderer.tokenizer, RequestResponseMetadata(request_id=self.scope.response_id),
            chat_template_kwargs=serving._effective_chat_template_kwargs(request))
        async for text in generator:
            for line in text.splitlines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("error"):
                    segment.failed = True
                    self.stats.errors += 1
                    yield _sse(chunk)
                    return
                if isinstance(chunk.get("usage"), dict):
                    self._add_usage(chunk["usage"])
                self.model = str(chunk.get("model") or self.model)
                choices = [c for c in (self._choice(segment, c) for c in chunk.get("choices") or []) if c]
                if choices:
                    yield self._chunk(choices)

    @staticmethod
    def _choice(segment: _Segment, choice: dict[str, Any]) -> dict[str, Any] | None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            segment.text.append(delta["content"])
        for part in delta.get("tool_calls") or ():
            function = part.get("function") or {}
            call_id = call_text(part.get("id"))
            index = segment.slots.slot(part.get("index"), call_id)
            segment.note(segment.assembler.add_tool_delta(index, call_id, call_text(function.get("name")),
                                                          function.get("arguments")))
        out = {k: v for k, v in choice.items() if k not in ("token_ids", "stop_reason")}
        if choice.get("finish_reason") is not None:
            segment.finish = str(choice["finish_reason"])
            if not delta:
                return None
            out["finish_reason"] = None
        return out

    async def _served(self, segment: _Segment, ordered: list[ToolCallClosed]) -> list[str] | None:
        if segment.finish != "tool_calls" or not ordered:
            return None
        if self.continued >= self.owner.gateway.config.max_continuations:
            self.stats.tool_call_endings += 1
            return None
        calls = [ToolCall(c.name, c.arguments) if c.ok and c.arguments is not None else None for c in ordered]
        outputs = await self.owner.gateway.cache.take(self.scope, calls, self.owner.gateway.config.post_wait_s)
        if outputs is None:
            self.stats.tool_call_endings += 1
        return outputs

    def _continue(self, segment: _Segment, ordered: list[ToolCallClosed], outputs: list[str],
                  next_segment: int) -> list[bytes]:
        """Result chunks for the client; the conversation grows exactly as the client's would."""
        out = [self._chunk([choice]) for choice in
               served_results(self.messages, "".join(segment.text), ordered, outputs, next_segment)]
        self.continued += 1
        self.stats.served_calls += len(ordered)
        return out

    def _add_usage(self, usage: dict[str, Any]) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                self.usage[key] = self.usage.get(key, 0) + value

    def _usage_body(self) -> dict[str, Any]:
        return {k: self.usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": f"http_{status}"}}, status_code=status)


__all__ = ["EngineChat", "EngineChatStats", "Pinner", "ReplayPinner", "continuation_chunk"]
