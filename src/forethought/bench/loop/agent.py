"""The client of the loop bench: a coding agent's loop on the real SDKs, calling MCP tools through its shims.

:func:`run_loop` is what Claude Code, Codex or an Agents-SDK app does, reduced to its loop: send the
conversation to the model (``anthropic`` SDK for Messages, ``openai`` SDK for Responses and Chat
Completions, always streamed), read the streamed message, run its calls in order through a
:class:`ToolRouter` (the client's MCP connections), append the calls and their results, and ask again until
the model answers without a call. Every stream event as the SDK parsed it and every tool answer are kept
(:class:`LoopRun`), so arms can be compared event for event and answer for answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import openai

from forethought.bench.loop.shim import answer_text
from forethought.daemon.wire import Wire
from forethought.mcp.daemon_link import LinkAnswer

__all__ = ["LoopRun", "ToolRouter", "result_text", "run_loop"]

MAX_STEPS = 64


class ToolRouter(Protocol):
    """The client's MCP side: runs a call by the name the model used."""

    async def call(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer: ...


@dataclass
class LoopRun:
    """What one run of the loop saw: every event, every answer, the wall time of the loop."""

    events: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    final_text: str = ""


def result_text(answer: LinkAnswer) -> tuple[str, bool]:
    """What the model is shown of an answer: the text blocks of a result (its JSON if none), or the error's
    message; and whether it is an error."""
    if answer.result is None:
        return str((answer.error or {}).get("message", "error")), True
    content = answer.result.get("content")
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"] \
        if isinstance(content, list) else []
    text = "\n".join(t for t in texts if isinstance(t, str)) or json.dumps(answer.result, sort_keys=True)
    return text, bool(answer.result.get("isError"))


async def _run_call(router: ToolRouter, run: LoopRun, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
    """Run one of the model's calls, as every API's loop does: recorded in ``run``; what the model is shown."""
    answer = await router.call(name, arguments)
    run.calls.append(name)
    run.answers.append(answer_text(answer))
    return result_text(answer)


def _dump(event: Any) -> str:
    return json.dumps(event.model_dump(mode="json"), sort_keys=True)


async def _messages_step(client: Any, model: str, messages: list[dict[str, Any]],
                         tools: Sequence[Mapping[str, Any]], run: LoopRun
                         ) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    stream = await client.messages.create(model=model, max_tokens=1024, messages=messages,
                                          tools=[{"name": t["name"], "description": t.get("description", ""),
                                                  "input_schema": t["parameters"]} for t in tools], stream=True)
    text: list[str] = []
    calls: dict[int, list[Any]] = {}
    async for event in stream:
        run.events.append(_dump(event))
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            calls[event.index] = [event.content_block.id, event.content_block.name, ""]
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            calls[event.index][2] += event.delta.partial_json
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            text.append(event.delta.text)
    return "".join(text), [(c[0], c[1], json.loads(c[2] or "{}")) for _, c in sorted(calls.items())]


async def _responses_step(client: Any, model: str, items: list[dict[str, Any]],
                          tools: Sequence[Mapping[str, Any]], run: LoopRun
                          ) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    stream = await client.responses.create(model=model, input=items, stream=True,
                                           tools=[{"type": "function", "name": t["name"],
                                                   "description": t.get("description", ""),
                                                   "parameters": t["parameters"]} for t in tools])
    text: list[str] = []
    calls: list[tuple[str, str, dict[str, Any]]] = []
    async for event in stream:
        run.events.append(_dump(event))
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        elif event.type == "response.output_item.done" and event.item.type == "function_call":
            calls.append((event.item.call_id, event.item.name, json.loads(event.item.arguments or "{}")))
    return "".join(text), calls


async def _chat_step(client: Any, model: str, messages: list[dict[str, Any]],
                     tools: Sequence[Mapping[str, Any]], run: LoopRun
                     ) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    stream = await client.chat.completions.create(model=model, messages=messages, stream=True,
                                                  tools=[{"type": "function", "function": dict(t)} for t in tools])
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    async for chunk in stream:
        run.events.append(_dump(chunk))
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            for tool in choice.delta.tool_calls or ():
                entry = calls.setdefault(tool.index, ["", "", ""])
                if tool.id:
                    entry[0] = tool.id
                if tool.function is not None and tool.function.name:
                    entry[1] = tool.function.name
                if tool.function is not None and tool.function.arguments:
                    entry[2] += tool.function.arguments
    return "".join(text), [(c[0], c[1], json.loads(c[2] or "{}")) for _, c in sorted(calls.items())]


async def run_loop(wire: Wire, base_url: str, model: str, user_text: str, tools: Sequence[Mapping[str, Any]],
                   router: ToolRouter, *, api_key: str = "sk-bench", system: str = "You are a coding agent.",
                   http_client: Any = None) -> LoopRun:
    """Run the loop until the model answers without a call (at most :data:`MAX_STEPS` steps).

    ``base_url``: the server's root (the Anthropic SDK appends ``/v1/messages``; ``/v1`` is added for the
    OpenAI SDK). ``tools``: ``{"name", "description", "parameters"}`` as the client offers them.
    ``http_client``: the SDK's ``httpx2.AsyncClient`` (a recording one, say); closed with the SDK client.
    """
    run = LoopRun()
    started = time.monotonic()
    if wire is Wire.MESSAGES:
        a_client: Any = anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key, max_retries=0,
                                                 http_client=http_client)
        messages: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
        try:
            for _ in range(MAX_STEPS):
                run.steps += 1
                text, calls = await _messages_step(a_client, model, messages, tools, run)
                blocks: list[dict[str, Any]] = ([{"type": "text", "text": text}] if text else [])
                blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
                messages.append({"role": "assistant", "content": blocks})
                if not calls:
                    run.final_text = text
                    break
                results = []
                for call_id, name, arguments in calls:
                    shown, error = await _run_call(router, run, name, arguments)
                    results.append({"type": "tool_result", "tool_use_id": call_id, "content": shown,
                                    **({"is_error": True} if error else {})})
                messages.append({"role": "user", "content": results})
        finally:
            await a_client.close()
    else:
        o_client: Any = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0,
                                           http_client=http_client)
        conversation: list[dict[str, Any]] = (
            [{"role": "user", "content": user_text}] if wire is Wire.RESPONSES
            else [{"role": "system", "content": system}, {"role": "user", "content": user_text}])
        try:
            for _ in range(MAX_STEPS):
                run.steps += 1
                if wire is Wire.RESPONSES:
                    text, calls = await _responses_step(o_client, model, conversation, tools, run)
                    conversation += [{"type": "function_call", "call_id": i, "name": n, "arguments": json.dumps(a)}
                                     for i, n, a in calls]
                else:
                    text, calls = await _chat_step(o_client, model, conversation, tools, run)
                    conversation.append({"role": "assistant", "content": text or None, **(
                        {"tool_calls": [{"id": i, "type": "function",
                                         "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls]}
                        if calls else {})})
                if not calls:
                    run.final_text = text
                    break
                for call_id, name, arguments in calls:
                    shown, _ = await _run_call(router, run, name, arguments)
                    conversation.append({"type": "function_call_output", "call_id": call_id, "output": shown}
                                        if wire is Wire.RESPONSES else
                                        {"role": "tool", "tool_call_id": call_id, "content": shown})
        finally:
            await o_client.close()
    run.seconds = time.monotonic() - started
    return run
