"""OpenAI Agents SDK (``openai-agents``): forethought tools as ``FunctionTool``s, and a model that taps its stream.

::

    session = Runtime().session(tools=[lookup, note])          # @tool(effect=...) or the policy decide
    agent = agents.Agent(name="a", tools=agents_tools(session),
                         model=ForethoughtModel(OpenAIResponsesModel("gpt-x", client), session))
    result = await agents.Runner.run(agent, "What is the weather?")

Two extension points of the SDK, used as it documents them:

* :func:`agents_tools` turns each tool of the session into a ``FunctionTool`` whose ``on_invoke_tool``
  runs ``session.execute`` (so a call claims its speculation, or runs); a failing tool answers the model
  with the same ``{"error": ...}`` text the forethought Agent gives.
* :class:`ForethoughtModel` wraps any ``agents.Model`` (Responses or Chat Completions): its response is
  streamed through :func:`~forethought.integrations.tap.tap`, so each call starts as a speculation when its
  arguments close, while the model is still generating. ``get_response`` (used by ``Runner.run``) streams
  the inner model and returns the ``response.completed`` response; ``stream_response`` (``run_streamed``)
  yields the inner model's events unchanged. ``speculate=False`` is the serial arm: the same code, nothing
  started early.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import FunctionTool, Model, ModelResponse, ModelTracing, RunContextWrapper, Usage
from agents.items import TResponseStreamEvent
from agents.tool import Tool as AgentsTool
from openai.types.responses import ResponseCompletedEvent

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.errors import ForethoughtError, UpstreamError
from forethought.integrations.tap import tap
from forethought.llm.dispatch import render_error, render_output


def _invoker(session: Session, name: str) -> Any:
    async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return render_error(f"{name}: arguments are not JSON: {exc}")
        if not isinstance(parsed, dict):
            return render_error(f"{name}: arguments must be a JSON object")
        try:
            return render_output(await session.execute(ToolCall(name, parsed)))
        except ForethoughtError as exc:
            return render_error(exc)

    return invoke


def agents_tools(session: Session, tools: list[Tool] | None = None) -> list[AgentsTool]:
    """The session's tools (or ``tools``, which must be registered in it) as Agents SDK ``FunctionTool``s."""
    chosen = list(session.tools.values()) if tools is None else tools
    return [FunctionTool(name=t.name, description=t.description, params_json_schema=dict(t.parameters),
                         on_invoke_tool=_invoker(session, t.name), strict_json_schema=False) for t in chosen]


def _usage(response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return Usage(requests=1)
    return Usage(requests=1, input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                 total_tokens=usage.total_tokens or 0)


class ForethoughtModel(Model):
    """An ``agents.Model`` that streams ``inner`` through forethought's tap (see the module docstring)."""

    def __init__(self, inner: Model, session: Session, *, speculate: bool = True) -> None:
        self.inner = inner
        self.session = session
        self.speculate = speculate

    async def close(self) -> None:
        await self.inner.close()

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: ModelTracing, *,
                           previous_response_id: str | None = None, conversation_id: str | None = None,
                           prompt: Any = None) -> ModelResponse:
        completed: Any = None
        async for event in self.stream_response(system_instructions, input, model_settings, tools, output_schema,
                                                handoffs, tracing, previous_response_id=previous_response_id,
                                                conversation_id=conversation_id, prompt=prompt):
            if isinstance(event, ResponseCompletedEvent):
                completed = event.response
        if completed is None:
            raise UpstreamError("the model's stream ended without response.completed")
        return ModelResponse(output=list(completed.output), usage=_usage(completed), response_id=completed.id)

    async def stream_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
                              output_schema: Any, handoffs: Any, tracing: ModelTracing, *,
                              previous_response_id: str | None = None, conversation_id: str | None = None,
                              prompt: Any = None) -> AsyncIterator[TResponseStreamEvent]:
        stream = self.inner.stream_response(system_instructions, input, model_settings, tools, output_schema,
                                            handoffs, tracing, previous_response_id=previous_response_id,
                                            conversation_id=conversation_id, prompt=prompt)
        async for event in tap(stream, self.session, speculate=self.speculate):
            yield event
