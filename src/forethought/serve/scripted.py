"""A scripted model server: replays a script of model responses in three wire formats, with timing.

A script is a list of responses (text, tool calls, timing) read from a JSON file (:func:`load_script`)::

    {"ttft_s": 0.05, "chunk_s": 0.01, "fragment_chars": 8,
     "responses": [
       {"text": "Checking.", "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
       {"text": "It is sunny in Paris.", "ttft_s": 0.2}
     ]}

The response served for a request is chosen from the request itself, so any number of conversations can
run at once: response ``k`` answers a conversation that already holds ``k`` model turns (assistant
messages; in the Responses API a run of ``function_call`` / assistant items counts as one turn), so
``k`` wraps at the end of the script when ``loop`` is set, else a request past the end gets HTTP 400.

The same response is spoken on three endpoints, streamed (SSE) or whole:

* ``POST /v1/chat/completions`` — OpenAI Chat Completions (``stream_options.include_usage`` honoured);
* ``POST /v1/responses`` — OpenAI Responses API (``response.*`` events);
* ``POST /v1/messages`` — Anthropic Messages (``message_start`` ... ``message_stop``).

Timing: the first piece comes ``ttft_s`` after the request, each later piece ``chunk_s`` after the one
before (against absolute target times, so delays do not drift), times ``time_scale``. Text and argument
JSON are cut into pieces of ``fragment_chars`` characters. Token counts are approximate (4 characters per
token) and documented as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought.serve.http import EventStream, StreamChunks, serve_in_process
from forethought.serve.script import (
    CHARS_PER_TOKEN,
    Rejected,
    Script,
    ScriptedCall,
    ScriptedResponse,
    load_script,
    parse_script,
)

__all__ = ["Script", "ScriptedCall", "ScriptedResponse", "create_scripted_server", "load_script", "parse_script",
           "serve_scripted"]


# --- one response as pieces, independent of the wire format ----------------------------------------------


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _CallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class _Args:
    index: int
    text: str


_Piece = _Text | _CallStart | _Args


def _cut(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _pieces(response: ScriptedResponse, call_ids: Sequence[str]) -> list[_Piece]:
    pieces: list[_Piece] = [_Text(t) for t in _cut(response.text, response.fragment_chars)]
    for index, call in enumerate(response.calls):
        pieces.append(_CallStart(index, call_ids[index], call.name))
        pieces += [_Args(index, t) for t in _cut(_arguments(call), response.fragment_chars)]
    return pieces


def _arguments(call: ScriptedCall) -> str:
    return json.dumps(dict(call.arguments), ensure_ascii=False)


def _tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(slots=True)
class _Turn:
    """One request being answered: the response, its ids, and its approximate token counts."""

    response: ScriptedResponse
    model: str
    response_id: str
    call_ids: list[str]
    prompt_tokens: int
    completion_tokens: int = 0
    item_ids: list[str] = field(default_factory=list)


class ScriptedModelServer:
    """Serves a :class:`Script` on the Chat Completions, Responses and Anthropic Messages endpoints."""

    def __init__(self, script: Script, time_scale: float = 1.0) -> None:
        self.script = script
        self.time_scale = time_scale
        self.requests = 0
        self._next_id = 0

    def _id(self, prefix: str) -> str:
        self._next_id += 1
        return f"{prefix}_{self._next_id:06d}"

    def _turn(self, body: Mapping[str, Any], turns: int, prompt: Any) -> _Turn:
        response = self.script.at(turns)
        ids = [self._id("call") for _ in response.calls]
        completion = _tokens(response.text) + sum(_tokens(_arguments(c)) for c in response.calls)
        return _Turn(response, str(body.get("model") or "scripted"), self._id("resp"), ids,
                     _tokens(json.dumps(prompt, default=str)), completion)

    async def _paced(self, turn: _Turn) -> AsyncIterator[_Piece]:
        loop = asyncio.get_running_loop()
        target = loop.time() + turn.response.ttft_s * self.time_scale
        for piece in _pieces(turn.response, turn.call_ids):
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            yield piece
            target += turn.response.chunk_s * self.time_scale

    async def _handle(self, request: Request, count: Callable[[Mapping[str, Any]], int],
                      prompt: Callable[[Mapping[str, Any]], Any],
                      stream: Callable[[_Turn, Mapping[str, Any]], AsyncIterator[bytes]],
                      whole: Callable[[_Turn], dict[str, Any]]) -> Response:
        self.requests += 1
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise Rejected("the request body must be a JSON object")
            turn = self._turn(body, count(body), prompt(body))
        except (ValueError, Rejected) as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, status_code=400)
        if body.get("stream"):
            return EventStream(_bytes(stream(turn, body)))
        await asyncio.sleep((turn.response.ttft_s + turn.response.chunk_s * len(_pieces(turn.response, turn.call_ids)))
                            * self.time_scale)
        return JSONResponse(whole(turn))

    # --- Chat Completions ------------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        return await self._handle(request, lambda b: _assistant_turns(b.get("messages")),
                                  lambda b: [b.get("messages"), b.get("tools")], self._chat_stream, _chat_whole)

    async def _chat_stream(self, turn: _Turn, body: Mapping[str, Any]) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _data({"id": turn.response_id, "object": "chat.completion.chunk", "created": int(time.time()),
                          "model": turn.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        yield chunk({"role": "assistant", "content": ""})
        async for piece in self._paced(turn):
            if isinstance(piece, _Text):
                yield chunk({"content": piece.text})
            elif isinstance(piece, _CallStart):
                yield chunk({"tool_calls": [{"index": piece.index, "id": piece.id, "type": "function",
                                             "function": {"name": piece.name, "arguments": ""}}]})
            else:
                yield chunk({"tool_calls": [{"index": piece.index, "function": {"arguments": piece.text}}]})
        yield chunk({}, "tool_calls" if turn.response.calls else "stop")
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            yield _data({"id": turn.response_id, "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": turn.model, "choices": [], "usage": _chat_usage(turn)})
        yield b"data: [DONE]\n\n"

    # --- Responses API ---------------------------------------------------------------------------------

    async def _responses(self, request: Request) -> Response:
        return await self._handle(request, lambda b: _responses_turns(b.get("input")),
                                  lambda b: [b.get("instructions"), b.get("input"), b.get("tools")],
                                  self._responses_stream, self._responses_whole)

    def _responses_items(self, turn: _Turn) -> list[dict[str, Any]]:
        if not turn.item_ids:
            turn.item_ids = [self._id("msg")] + [self._id("fc") for _ in turn.response.calls]
        items: list[dict[str, Any]] = []
        if turn.response.text:
            items.append(_message_item(turn.item_ids[0], turn.response.text, "completed"))
        for index, call in enumerate(turn.response.calls):
            items.append(_call_item(turn.item_ids[index + 1], turn.call_ids[index], call.name, _arguments(call),
                                    "completed"))
        return items

    def _responses_whole(self, turn: _Turn, status: str = "completed") -> dict[str, Any]:
        return {"id": turn.response_id, "object": "response", "created_at": int(time.time()), "model": turn.model,
                "status": status, "output": self._responses_items(turn) if status == "completed" else [],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
                "incomplete_details": None, "instructions": None, "metadata": {}, "temperature": None,
                "top_p": None, "usage": _responses_usage(turn) if status == "completed" else None}

    async def _responses_stream(self, turn: _Turn, body: Mapping[str, Any]) -> AsyncIterator[bytes]:
        items = self._responses_items(turn)
        sequence = 0

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            sequence += 1
            return _data({"type": kind, "sequence_number": sequence, **fields}, kind)

        yield event("response.created", response=self._responses_whole(turn, "in_progress"))
        output_index = -1
        open_item: dict[str, Any] | None = None
        text_item = turn.item_ids[0]
        async for piece in self._paced(turn):
            if isinstance(piece, _Text):
                if open_item is None:
                    output_index += 1
                    open_item = _message_item(text_item, "", "in_progress")
                    yield event("response.output_item.added", output_index=output_index, item=open_item)
                    yield event("response.content_part.added", item_id=text_item, output_index=output_index,
                                content_index=0, part={"type": "output_text", "text": "", "annotations": []})
                yield event("response.output_text.delta", item_id=text_item, output_index=output_index,
                            content_index=0, delta=piece.text, logprobs=[])
            elif isinstance(piece, _CallStart):
                for chunk in self._close_item(open_item, items, output_index, turn, event):
                    yield chunk
                output_index += 1
                item_id = turn.item_ids[piece.index + 1]
                open_item = _call_item(item_id, piece.id, piece.name, "", "in_progress")
                yield event("response.output_item.added", output_index=output_index, item=open_item)
            else:
                yield event("response.function_call_arguments.delta", item_id=turn.item_ids[piece.index + 1],
                            output_index=output_index, delta=piece.text)
        for chunk in self._close_item(open_item, items, output_index, turn, event):
            yield chunk
        yield event("response.completed", response=self._responses_whole(turn))

    @staticmethod
    def _close_item(item: dict[str, Any] | None, items: Sequence[dict[str, Any]], output_index: int, turn: _Turn,
                    event: Callable[..., bytes]) -> list[bytes]:
        if item is None:
            return []
        done = next(i for i in items if i["id"] == item["id"])
        if item["type"] == "message":
            return [event("response.output_text.done", item_id=item["id"], output_index=output_index,
                          content_index=0, text=turn.response.text, logprobs=[]),
                    event("response.content_part.done", item_id=item["id"], output_index=output_index,
                          content_index=0, part=done["content"][0]),
                    event("response.output_item.done", output_index=output_index, item=done)]
        return [event("response.function_call_arguments.done", item_id=item["id"], output_index=output_index,
                      arguments=done["arguments"], name=done["name"]),
                event("response.output_item.done", output_index=output_index, item=done)]

    # --- Anthropic Messages ----------------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        return await self._handle(request, lambda b: _assistant_turns(b.get("messages")),
                                  lambda b: [b.get("system"), b.get("messages"), b.get("tools")],
                                  self._messages_stream, _messages_whole)

    async def _messages_stream(self, turn: _Turn, body: Mapping[str, Any]) -> AsyncIterator[bytes]:
        def event(kind: str, **fields: Any) -> bytes:
            return _data({"type": kind, **fields}, kind)

        message = {**_messages_whole(turn), "content": [], "stop_reason": None,
                   "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": 0}}
        yield event("message_start", message=message)
        block = -1
        kind = ""
        async for piece in self._paced(turn):
            if isinstance(piece, _Text):
                if kind != "text":
                    block += 1
                    kind = "text"
                    yield event("content_block_start", index=block, content_block={"type": "text", "text": ""})
                yield event("content_block_delta", index=block, delta={"type": "text_delta", "text": piece.text})
            elif isinstance(piece, _CallStart):
                if block >= 0:
                    yield event("content_block_stop", index=block)
                block += 1
                kind = "tool_use"
                yield event("content_block_start", index=block,
                            content_block={"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}})
            else:
                yield event("content_block_delta", index=block,
                            delta={"type": "input_json_delta", "partial_json": piece.text})
        if block >= 0:
            yield event("content_block_stop", index=block)
        yield event("message_delta", delta={"stop_reason": _stop_reason(turn), "stop_sequence": None},
                    usage={"output_tokens": turn.completion_tokens})
        yield event("message_stop")

    # --- the app ---------------------------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "responses": len(self.script.responses), "requests": self.requests})

    async def _models(self, request: Request) -> Response:
        model = {"id": "scripted", "object": "model", "owned_by": "forethought"}
        return JSONResponse({"object": "list", "data": [model]})

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/health", self._health, methods=["GET"]),
        ])


def create_scripted_server(script: Script, time_scale: float = 1.0) -> Starlette:
    """The ASGI app of a :class:`ScriptedModelServer` for ``script``."""
    return ScriptedModelServer(script, time_scale).app()


@contextlib.asynccontextmanager
async def serve_scripted(script: Script | Mapping[str, Any] | Sequence[Any] | str | Path,
                         time_scale: float = 1.0) -> AsyncIterator[str]:
    """Serve a scripted model on 127.0.0.1 (a free port) while the block runs; yield its base URL.

    ``script`` is a :class:`Script`, its JSON form (an object with ``responses``, or that list), or the
    path of a script file. The OpenAI SDKs take ``base_url=url + "/v1"``, the Anthropic SDK ``base_url=url``.
    """
    if isinstance(script, str | Path):
        loaded = load_script(script)
    elif isinstance(script, Script):
        loaded = script
    else:
        loaded = parse_script(script)
    async with serve_in_process(create_scripted_server(loaded, time_scale)) as url:
        yield url


async def _bytes(chunks: AsyncIterator[bytes]) -> StreamChunks:
    async for chunk in chunks:
        yield chunk


def _data(payload: Mapping[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def _assistant_turns(messages: Any) -> int:
    if not isinstance(messages, list):
        raise Rejected("'messages' must be a list")
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _responses_turns(items: Any) -> int:
    if isinstance(items, str) or items is None:
        return 0
    if not isinstance(items, list):
        raise Rejected("'input' must be a string or a list")
    turns, previous = 0, False
    for item in items:
        model = isinstance(item, dict) and (item.get("role") == "assistant"
                                            or item.get("type") in ("function_call", "reasoning"))
        turns += model and not previous
        previous = model
    return turns


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    content = [part] if status == "completed" else []
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def _stop_reason(turn: _Turn) -> str:
    return "tool_use" if turn.response.calls else "end_turn"


def _chat_usage(turn: _Turn) -> dict[str, Any]:
    return {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens}


def _responses_usage(turn: _Turn) -> dict[str, Any]:
    return {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}


def _chat_whole(turn: _Turn) -> dict[str, Any]:
    calls = [{"id": turn.call_ids[i], "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
             for i, c in enumerate(turn.response.calls)]
    message: dict[str, Any] = {"role": "assistant", "content": turn.response.text or None}
    if calls:
        message["tool_calls"] = calls
    return {"id": turn.response_id, "object": "chat.completion", "created": int(time.time()), "model": turn.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _chat_usage(turn)}


def _messages_whole(turn: _Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.response.text}] if turn.response.text else []
    content += [{"type": "tool_use", "id": turn.call_ids[i], "name": c.name, "input": dict(c.arguments)}
                for i, c in enumerate(turn.response.calls)]
    return {"id": turn.response_id, "type": "message", "role": "assistant", "model": turn.model, "content": content,
            "stop_reason": _stop_reason(turn), "stop_sequence": None,
            "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens}}
