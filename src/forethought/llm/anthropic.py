"""Streaming Anthropic Messages as forethought's small event stream.

:class:`AnthropicDecoder` turns Messages stream events (``message_start``, ``content_block_start`` of a
``tool_use`` block, ``content_block_delta`` with ``text_delta`` / ``input_json_delta``,
``content_block_stop``, ``message_delta``, ``message_stop``) into :data:`~forethought.llm.events.LLMEvent`
values: a call closes the moment its input JSON object closes (through the same assembler the Chat
Completions client uses), or at its block's stop (an empty input is ``{}``). It reads plain JSON objects
and the ``anthropic`` SDK's event objects alike; the SDK helper stream's extra events (``text``,
``input_json``, ...) repeat raw ones and are ignored.

:class:`AnthropicMessagesClient` is the :class:`~forethought.llm.chat.LLMClient` over ``POST /v1/messages``
through the ``anthropic`` SDK (an optional dependency: ``pip install 'forethought[integrations]'``): the
agent's Chat Completions-shaped transcript becomes ``system`` plus Messages content blocks
(:func:`to_anthropic_messages`), tool results travel as ``tool_result`` blocks in user turns. Stop reasons
map to the Chat Completions finish reasons the agent reports (``tool_use`` -> ``tool_calls``,
``end_turn`` -> ``stop``, ``max_tokens`` -> ``length``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from forethought.errors import UpstreamError
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.events import LLMEvent, MessageDone, Usage
from forethought.llm.responses import field
from forethought.llm.sdk_stream import SdkClientHolder, stream_decoded

DEFAULT_MAX_TOKENS = 4096
DEFAULT_TIMEOUT_S = 600.0
_STOP_REASONS = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop"}


class AnthropicDecoder:
    """Messages stream events of one message -> events (no I/O; dicts or SDK objects)."""

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler()
        self._calls: dict[int, int] = {}  # content block index -> call index
        self._open: int | None = None  # the call whose block is open
        self._stop_reason: str | None = None
        self._input_tokens = 0
        self._output_tokens = 0
        self._cached_tokens = 0
        self.response_id: str | None = None
        self.done = False

    def feed(self, event: Any) -> list[LLMEvent]:
        kind = field(event, "type")
        if kind == "content_block_delta":
            delta = field(event, "delta")
            delta_kind = field(delta, "type")
            if delta_kind == "text_delta":
                return self._assembler.add_text(str(field(delta, "text") or ""))
            if delta_kind == "input_json_delta":
                index = self._calls.get(field(event, "index"))
                if index is None:
                    return []
                return self._assembler.add_tool_delta(index, None, None, str(field(delta, "partial_json") or ""))
            return []
        if kind == "content_block_start":
            block = field(event, "content_block")
            if field(block, "type") != "tool_use":
                return []
            index = self._calls[field(event, "index")] = len(self._calls)
            self._open = index
            return self._assembler.add_tool_delta(index, field(block, "id"), field(block, "name"), None)
        if kind == "content_block_stop":
            if self._calls.get(field(event, "index")) is None:
                return []
            self._open = None
            return self._assembler.finish("tool_use")  # only this block can still be open: blocks are sequential
        if kind == "message_start":
            message = field(event, "message")
            self.response_id = field(message, "id")
            self._count(field(message, "usage"))
            return []
        if kind == "message_delta":
            self._stop_reason = field(field(event, "delta"), "stop_reason") or self._stop_reason
            self._count(field(event, "usage"))
            return []
        if kind == "message_stop":
            self.done = True
            reason = _STOP_REASONS.get(self._stop_reason or "", self._stop_reason or "stop")
            total = self._input_tokens + self._output_tokens
            usage = Usage(self._input_tokens, self._output_tokens, total, self._cached_tokens)
            return [*self._assembler.finish(reason), MessageDone(reason, usage, self.response_id)]
        if kind == "error":
            error = field(event, "error")
            raise UpstreamError(f"endpoint error mid-stream: {field(error, 'message') or error}")
        return []

    def _count(self, usage: Any) -> None:
        if usage is None:
            return
        self._input_tokens = int(field(usage, "input_tokens") or self._input_tokens)
        self._output_tokens = int(field(usage, "output_tokens") or self._output_tokens)
        self._cached_tokens = int(field(usage, "cache_read_input_tokens") or self._cached_tokens)


def to_anthropic_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat Completions messages as Anthropic ``system`` text and Messages turns (tool results in user turns)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # consecutive tool results (and text) join one user turn
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text(content))
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id")),
                          "content": _text(content)}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": _text(content)}] if content else []
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": str(call.get("id")), "name": str(function.get("name")),
                               "input": _input(function.get("arguments"))})
            add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": _text(content)}])
    return ("\n\n".join(system) if system else None), turns


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions function tools as Anthropic tools (``input_schema``)."""
    out = []
    for entry in tools:
        function = entry.get("function") or {}
        tool = {"name": function.get("name"), "input_schema": function.get("parameters") or {"type": "object"}}
        if function.get("description"):
            tool["description"] = function["description"]
        out.append(tool)
    return out


def _input(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {}  # a malformed call was answered with an error; its input does not matter any more
    return arguments if isinstance(arguments, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


class AnthropicMessagesClient(SdkClientHolder):
    """:class:`~forethought.llm.chat.LLMClient` over Anthropic Messages (streamed), on the ``anthropic`` SDK.

    Give ``base_url`` (without ``/v1``) or an existing ``anthropic.AsyncAnthropic`` as ``client`` (not
    closed by :meth:`aclose` then). ``max_tokens`` is sent unless ``extra`` sets it.
    """

    def __init__(self, base_url: str | None = None, api_key: str = "not-needed", timeout: float = DEFAULT_TIMEOUT_S,
                 *, client: Any = None, max_retries: int = 2, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise UpstreamError("the anthropic SDK is not installed: pip install 'forethought[integrations]'") from exc
        self._anthropic = anthropic
        if client is None:
            if base_url is None:
                raise ValueError("AnthropicMessagesClient needs base_url or client")
            client = anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key, timeout=timeout,
                                              max_retries=max_retries)
            own = True
        else:
            own = False
        self._hold(client, own)
        self.max_tokens = max_tokens

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        system, turns = to_anthropic_messages(messages)
        body: dict[str, Any] = {**({"tools": to_anthropic_tools(tools)} if tools else {}),
                                **({"system": system} if system else {}), **extra}
        max_tokens = body.pop("max_tokens", self.max_tokens)
        sdk = self._anthropic
        request = self._client.messages.with_streaming_response.create(
            model=model, max_tokens=max_tokens, messages=turns, stream=True, extra_body=body)
        async for event in stream_decoded(request, sdk, sdk.AnthropicError, AnthropicDecoder(), self.base_url,
                                          "message_stop"):
            yield event
