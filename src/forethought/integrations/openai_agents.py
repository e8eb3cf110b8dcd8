"""OpenAI Agents SDK (``openai-agents``): forethought tools as ``FunctionTool``s, and a model that taps its stream.

::

    session = Runtime().session(tools=[lookup, note])          # @tool(effect=...) or the policy decide
    agent = agents.Agent(name="a", tools=agents_tools(session),
                         model=ForethoughtModel(OpenAIResponsesModel("gpt-x", client), session))
    result = await agents.Runner.run(agent, "What is the weather?")

Two extension points of the SDK, used as it documents them:

* :func:`agents_tools` builds each tool of the session with the SDK's own ``function_tool`` from a function
  with the tool function's own signature and docstring (:mod:`forethought.integrations.native`), whose call
  is ``session.execute`` (so a call claims its speculation, or runs). Everything else is the SDK's: the
  strict schema (``strict_mode=True``, its default), argument validation, how a return value is rendered
  for the model, and a failing tool answered with ``failure_error_function`` (by default the SDK's generic
  message; ``None`` makes the run raise the tool's own exception). Options are passed to ``function_tool``.
  A tool whose schema is not its signature's (``parameters=``, a state cell) becomes a ``FunctionTool`` of
  its JSON schema (strict when the SDK can make it so, as its MCP tools do), with the same error handling.
* :class:`ForethoughtModel` wraps any ``agents.Model`` (Responses or Chat Completions): its response is
  streamed through :func:`~forethought.integrations.tap.tap`, so each call starts as a speculation when its
  arguments close, while the model is still generating. ``get_response`` (used by ``Runner.run``) streams
  the inner model and returns the ``response.completed`` response; ``stream_response`` (``run_streamed``)
  yields the inner model's events unchanged. ``speculate=False`` is the serial arm: the same code, nothing
  started early. ``predict`` (on by default) also guesses each step's calls when the step starts, from the
  conversation the SDK sends (:mod:`forethought.integrations.foresight`: the pattern predictor learning
  online and saved, a speculator model if configured); the model's own calls claim the right guesses.
  With ``previous_response_id`` or a server-side conversation the SDK sends only the new items, so the
  guesses see only those.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    FunctionTool,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunContextWrapper,
    Usage,
    function_tool,
)
from agents.exceptions import ModelBehaviorError, UserError
from agents.items import TResponseStreamEvent
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.strict_schema import ensure_strict_json_schema
from agents.tool import Tool as AgentsTool
from agents.tool import ToolErrorFunction, default_tool_error_function
from openai.types.responses import ResponseCompletedEvent

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.errors import UpstreamError
from forethought.integrations.foresight import Foresight
from forethought.integrations.native import declared_description, execute_natively, native_function
from forethought.integrations.tap import tap
from forethought.integrations.transcripts import from_responses

_DEFAULT: Any = object()


def _schema_tool(session: Session, t: Tool, strict_mode: bool, failure_error_function: Any) -> FunctionTool:
    """A ``FunctionTool`` of ``t``'s JSON schema; a failure answered as ``function_tool``'s are."""
    handler: ToolErrorFunction | None = (default_tool_error_function if failure_error_function is _DEFAULT
                                         else failure_error_function)

    async def invoke(context: RunContextWrapper[Any], arguments: str) -> Any:
        try:
            try:
                parsed = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise ModelBehaviorError(f"Invalid JSON input for tool {t.name}: {arguments}") from exc
            if not isinstance(parsed, dict):
                raise ModelBehaviorError(f"Invalid JSON input for tool {t.name}: not an object")
            return await execute_natively(session, ToolCall(t.name, parsed))
        except Exception as exc:
            if handler is None:
                raise
            message = handler(context, exc)
            return await message if inspect.isawaitable(message) else message

    schema = dict(t.parameters)
    strict = strict_mode
    if strict:
        try:
            ensure_strict_json_schema(copy.deepcopy(schema))
        except UserError:
            strict = False  # as the SDK's own MCP tools do when their schema cannot be strict
    return FunctionTool(name=t.name, description=t.description, params_json_schema=schema, on_invoke_tool=invoke,
                        strict_json_schema=strict)


def agents_tools(session: Session, tools: list[Tool] | None = None, *, strict_mode: bool = True,
                 failure_error_function: ToolErrorFunction | None = _DEFAULT, **options: Any) -> list[AgentsTool]:
    """The session's tools (or ``tools``, which must be registered in it) as the SDK's ``function_tool``
    would build them from their functions, run through the session (see the module docstring)."""
    chosen = list(session.tools.values()) if tools is None else tools
    built: list[AgentsTool] = []
    for t in chosen:
        fn = native_function(session, t)
        if fn is None:
            built.append(_schema_tool(session, t, strict_mode, failure_error_function))
            continue
        extra = dict(options)
        if failure_error_function is not _DEFAULT:
            extra["failure_error_function"] = failure_error_function
        built.append(function_tool(fn, name_override=t.name, description_override=declared_description(t),
                                   strict_mode=strict_mode, **extra))
    return built


def _usage(response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return Usage(requests=1)
    return Usage(requests=1, input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                 total_tokens=usage.total_tokens or 0)


class ForethoughtModel(Model):
    """An ``agents.Model`` that streams ``inner`` through forethought's tap (see the module docstring)."""

    def __init__(self, inner: Model, session: Session, *, speculate: bool = True,
                 predict: bool | Foresight = True) -> None:
        self.inner = inner
        self.session = session
        self.speculate = speculate
        self.predict = predict

    async def close(self) -> None:
        await self.inner.close()

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: ModelTracing, *,
                           previous_response_id: str | None = None, conversation_id: str | None = None,
                           prompt: Any = None) -> ModelResponse:
        completed: Any = None
        if isinstance(model_settings, ModelSettings) and model_settings.include_usage is None:
            # A call that is not streamed gets its usage in the answer; the stream standing in for it asks for
            # it (the SDK asks only of api.openai.com), unless the caller said otherwise.
            model_settings = dataclasses.replace(model_settings, include_usage=True)
        async for event in self.stream_response(system_instructions, input, model_settings, tools, output_schema,
                                                handoffs, tracing, previous_response_id=previous_response_id,
                                                conversation_id=conversation_id, prompt=prompt):
            if isinstance(event, ResponseCompletedEvent):
                completed = event.response
        if completed is None:
            raise UpstreamError("the model's stream ended without response.completed")
        response_id = None if completed.id == FAKE_RESPONSES_ID else completed.id  # a Chat model's stand-in id
        return ModelResponse(output=list(completed.output), usage=_usage(completed), response_id=response_id)

    async def stream_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
                              output_schema: Any, handoffs: Any, tracing: ModelTracing, *,
                              previous_response_id: str | None = None, conversation_id: str | None = None,
                              prompt: Any = None) -> AsyncIterator[TResponseStreamEvent]:
        stream = self.inner.stream_response(system_instructions, input, model_settings, tools, output_schema,
                                            handoffs, tracing, previous_response_id=previous_response_id,
                                            conversation_id=conversation_id, prompt=prompt)
        messages = [{"role": "system", "content": system_instructions}] if system_instructions else []
        messages += from_responses(input)
        async for event in tap(stream, self.session, speculate=self.speculate, messages=messages,
                               predict=self.predict):
            yield event
