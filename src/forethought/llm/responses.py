"""Streaming the OpenAI Responses API as forethought's small event stream.

:class:`ResponsesDecoder` turns Responses stream events (``response.output_text.delta``,
``response.output_item.added`` for a ``function_call``, ``response.function_call_arguments.delta``,
``response.completed`` ...) into :data:`~forethought.llm.events.LLMEvent` values: a call is closed the
moment its arguments object closes, through the same assembler the Chat Completions client uses. It reads
plain JSON objects and the ``openai`` SDK's event objects alike (the stream tap feeds it those).

:class:`OpenAIResponsesClient` is the :class:`~forethought.llm.chat.LLMClient` over ``POST /v1/responses``:
the agent's Chat Completions-shaped transcript and tools are translated to Responses ``input`` items
(:func:`to_responses_input`) and function tools, and the SSE body is decoded here. Errors map as in
:mod:`forethought.llm.chat`: a status or connection error is :class:`~forethought.errors.UpstreamError`,
a stream that ends before ``response.completed`` is :class:`~forethought.errors.StreamDroppedError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import openai

from forethought.errors import UpstreamError
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.events import ClientItem, LLMEvent, MessageDone, Usage
from forethought.llm.sdk_stream import SdkClientHolder, stream_decoded

DEFAULT_TIMEOUT_S = 600.0
HOSTED_CALLS = frozenset({"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call"})
"""Output items the API runs itself (its hosted tools) with no effect on what the caller's tools read. Any other
``*_call`` item (``custom_tool_call``, ``computer_call``, ``local_shell_call``, ``shell_call``,
``apply_patch_call``, a kind not known yet) is run by the caller, and a hosted ``mcp_call`` reaches a remote MCP
server that may write: each is an effect no session tool stands for, :class:`~forethought.llm.events.ClientItem`."""


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` for a mapping, ``obj.name`` for an SDK object; ``None`` when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


class ResponsesDecoder:
    """Responses API stream events of one response -> events (no I/O; dicts or SDK objects).

    ``feed`` returns the events one stream event produced; ``done`` is set by the terminal event
    (``response.completed`` / ``response.incomplete``), whose events end with ``MessageDone``.
    """

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler()
        self._calls: dict[int, int] = {}  # output_index -> call index within the message
        self._by_item: dict[str, int] = {}  # item id -> call index
        self.done = False
        self.response_id: str | None = None

    def _call_index(self, event: Any) -> int | None:
        item_id = field(event, "item_id")
        if isinstance(item_id, str) and item_id in self._by_item:
            return self._by_item[item_id]
        return self._calls.get(field(event, "output_index"))

    def feed(self, event: Any) -> list[LLMEvent]:
        kind = field(event, "type")
        if kind == "response.output_text.delta":
            return self._assembler.add_text(str(field(event, "delta") or ""))
        if kind == "response.output_item.added":
            item = field(event, "item")
            item_type = field(item, "type")
            if item_type != "function_call":
                if isinstance(item_type, str) and item_type.endswith("_call") and item_type not in HOSTED_CALLS:
                    return [ClientItem(item_type)]  # an effect the session cannot see (fail closed: any unknown kind)
                return []
            index = len(self._calls)
            self._calls[field(event, "output_index")] = index
            item_id = field(item, "id")
            if isinstance(item_id, str):
                self._by_item[item_id] = index
            return self._assembler.add_tool_delta(index, field(item, "call_id") or item_id, field(item, "name"),
                                                  field(item, "arguments") or None)
        if kind == "response.function_call_arguments.delta":
            found = self._call_index(event)
            if found is None:
                return []
            return self._assembler.add_tool_delta(found, None, None, str(field(event, "delta") or ""))
        if kind == "response.created":
            self.response_id = field(field(event, "response"), "id")
            return []
        if kind in ("response.completed", "response.incomplete"):
            response = field(event, "response")
            self.done = True
            # vLLM 0.32 ends a cut-off response with ``response.completed`` whose status is ``incomplete``
            # (OpenAI sends ``response.incomplete``): the status decides, not the event's name.
            cut = kind == "response.incomplete" or field(response, "status") == "incomplete"
            reason = "length" if cut else ("tool_calls" if self._calls else "stop")
            return [*self._assembler.finish(reason),
                    MessageDone(reason, _usage(field(response, "usage")), field(response, "id") or self.response_id)]
        if kind == "response.failed":
            error = field(field(event, "response"), "error")
            raise UpstreamError(f"the response failed: {field(error, 'message') or error}")
        if kind == "error":
            raise UpstreamError(f"endpoint error mid-stream: {field(event, 'message')}")
        return []


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    details = field(usage, "input_tokens_details")
    prompt, completion = int(field(usage, "input_tokens") or 0), int(field(usage, "output_tokens") or 0)
    return Usage(prompt, completion, int(field(usage, "total_tokens") or prompt + completion),
                 int(field(details, "cached_tokens") or 0) if details is not None else 0)


def to_responses_input(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat Completions messages as Responses ``instructions`` (the system text) and ``input`` items."""
    system: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text(content))
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": str(message.get("tool_call_id")),
                          "output": _text(content)})
        elif role == "assistant":
            if content:
                items.append({"role": "assistant", "content": _text(content)})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append({"type": "function_call", "call_id": str(call.get("id")),
                              "name": str(function.get("name")), "arguments": str(function.get("arguments") or "{}")})
        else:
            items.append({"role": str(role or "user"), "content": _text(content)})
    return ("\n\n".join(system) if system else None), items


def to_responses_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions function tools as Responses function tools."""
    out = []
    for entry in tools:
        function = entry.get("function") or {}
        tool = {"type": "function", "name": function.get("name"), "parameters": function.get("parameters") or {}}
        if function.get("description"):
            tool["description"] = function["description"]
        if "strict" in function:  # a Responses function tool carries `strict` at its top level
            tool["strict"] = bool(function["strict"])
        out.append(tool)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


class OpenAIResponsesClient(SdkClientHolder):
    """:class:`~forethought.llm.chat.LLMClient` over the OpenAI Responses API (``POST /v1/responses``, streamed).

    Give ``base_url`` (with ``/v1``) or an existing ``openai.AsyncOpenAI`` as ``client`` (it is not closed
    by :meth:`aclose` then). Every ``extra`` field of :meth:`stream` goes into the request body as given.
    """

    def __init__(self, base_url: str | None = None, api_key: str = "not-needed", timeout: float = DEFAULT_TIMEOUT_S,
                 *, client: openai.AsyncOpenAI | None = None, max_retries: int = 2) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("OpenAIResponsesClient needs base_url or client")
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout,
                                        max_retries=max_retries)
            own = True
        else:
            own = False
        self._hold(client, own)

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        instructions, items = to_responses_input(messages)
        body: dict[str, Any] = {"input": items, **({"tools": to_responses_tools(tools)} if tools else {}),
                                **({"instructions": instructions} if instructions else {}), **extra}
        request = self._client.responses.with_streaming_response.create(model=model, stream=True, extra_body=body)
        async for event in stream_decoded(request, openai, openai.OpenAIError, ResponsesDecoder(), self.base_url,
                                          "response.completed"):
            yield event
