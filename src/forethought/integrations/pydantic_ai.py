"""pydantic-ai: a toolset wrapper whose calls go through a forethought session, and a model that starts them early.

::

    session = Runtime().session(tools=[lookup, note])
    agent = pydantic_ai.Agent(TappedModel(OpenAIChatModel("m", provider=...), session),
                              toolsets=[ForethoughtToolset.of(session)])
    result = await agent.run("What is the weather?")

pydantic-ai's own extension points are used:

* :class:`ForethoughtToolset` is a ``WrapperToolset`` ("changing tool execution" in pydantic-ai's docs):
  a call of a tool registered in the session runs as ``session.execute`` (claiming a speculation, or
  running); any other call goes to the wrapped toolset. :meth:`ForethoughtToolset.of` wraps a
  ``FunctionToolset`` of the session's tools built as pydantic-ai's ``Tool`` builds them from their
  functions (:mod:`forethought.integrations.native`: the same name, description and schema), so argument
  validation, retries and return values are pydantic-ai's own, and a tool that raises raises its own
  exception (a ``ModelRetry`` asks the model to retry, anything else ends the run) exactly as without
  forethought. A tool whose schema is not its signature's is built with ``Tool.from_schema``.
* :class:`TappedModel` is a ``WrapperModel``: each ``request`` (what ``Agent.run`` uses) is streamed from
  the wrapped model, and the stream's tool-call parts (``PartStartEvent`` / ``PartDeltaEvent``) are
  decoded like any other stream, so each call starts as a speculation the moment its arguments close
  (the agent's dispatch rules, :class:`~forethought.llm.dispatch.EarlyDispatch` in speculating mode).
  ``speculate=False`` is the serial arm: the same code, nothing started early. The response returned is
  the stream's own; ``request_stream`` (``run_stream``) is the wrapped model's, unchanged. ``predict`` (on
  by default) also guesses each step's calls when the request starts, from the message history
  (:mod:`forethought.integrations.foresight`: the pattern predictor learning online and saved, a
  speculator model if configured); the model's own calls claim the right guesses.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ToolCallPartDelta as _ToolCallPartDelta
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import Tool as PydanticTool
from pydantic_ai.toolsets import FunctionToolset, ToolsetTool, WrapperToolset

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.integrations.foresight import Foresight, foresight_for
from forethought.integrations.native import declared_description, execute_natively, native_function
from forethought.integrations.transcripts import text_of
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.dispatch import EarlyDispatch
from forethought.llm.events import LLMEvent, ToolCallClosed, ToolCallStarted


def _schema_function(session: Session, name: str) -> Any:
    async def run(**arguments: Any) -> Any:
        return await execute_natively(session, ToolCall(name, arguments))

    return run


def pydantic_tool(session: Session, t: Tool) -> PydanticTool[Any]:
    """A session tool as pydantic-ai's ``Tool`` builds one from its function, running through the session."""
    fn = native_function(session, t)
    if fn is None:
        return PydanticTool.from_schema(_schema_function(session, t.name), t.name, t.description or t.name,
                                        dict(t.parameters))
    return PydanticTool(fn, name=t.name, description=declared_description(t))


@dataclass
class ForethoughtToolset(WrapperToolset[Any]):
    """A ``WrapperToolset`` that runs the session's tools through the session (see the module docstring)."""

    session: Session | None = None

    @classmethod
    def of(cls, session: Session) -> ForethoughtToolset:
        """The session's tools, as a pydantic-ai toolset executed through the session."""
        return cls(wrapped=FunctionToolset([pydantic_tool(session, t) for t in session.tools.values()]),
                   session=session)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        session = self.session
        if session is None or name not in session.tools:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        return await execute_natively(session, ToolCall(name, tool_args))


class _PartsDecoder:
    """pydantic-ai stream events -> call started / closed events (tool-call parts only)."""

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler(join_names=True)  # pydantic-ai joins a name's pieces itself
        self._calls: dict[int, int] = {}  # part index -> call index

    def feed(self, event: Any) -> list[LLMEvent]:
        if isinstance(event, PartStartEvent) and isinstance(event.part, ToolCallPart):
            index = self._calls[event.index] = len(self._calls)
            return self._assembler.add_tool_delta(index, event.part.tool_call_id, event.part.tool_name,
                                                  _argument_text(event.part.args))
        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, _ToolCallPartDelta):
            found = self._calls.get(event.index)
            if found is None:
                return []
            delta = event.delta
            return self._assembler.add_tool_delta(found, None, getattr(delta, "tool_name_delta", None),
                                                  _argument_text(delta.args_delta))
        return []

    def finish(self) -> list[LLMEvent]:
        return self._assembler.finish("tool_calls")


def _argument_text(args: Any) -> str | None:
    """A part's arguments as text: a string fragment as it is, arguments given whole (a dict) as JSON."""
    if args is None or isinstance(args, str):
        return args or None
    return json.dumps(args, ensure_ascii=False, default=str)


class TappedModel(WrapperModel):
    """A pydantic-ai ``WrapperModel`` that starts the streamed tool calls early (see the module docstring)."""

    def __init__(self, wrapped: Any, session: Session, *, speculate: bool = True,
                 predict: bool | Foresight = True) -> None:
        super().__init__(wrapped)
        self.session = session
        self.speculate = speculate
        self.foresight = foresight_for(predict, speculate)
        """Who guesses each step's calls at its start (``None``: only the stream's own calls start early)."""

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        dispatch = EarlyDispatch(self.session, enabled=self.speculate, authoritative=False)
        decoder = _PartsDecoder()
        completed = False
        if self.foresight is not None:
            self.foresight.begin(self.session, chat_messages(messages))
        try:
            async with self.wrapped.request_stream(messages, model_settings, model_request_parameters) as streamed:
                async for event in streamed:
                    if _feed(dispatch, decoder.feed(event)):
                        await asyncio.sleep(0)  # let the new speculations start (see integrations.tap)
            _feed(dispatch, decoder.finish())
            completed = True
        finally:
            if self.foresight is not None:
                self.foresight.end(self.session)
            if not completed:
                await dispatch.abandon()
        return streamed.get()


def chat_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """pydantic-ai's message history as Chat Completions messages, tool results as pydantic-ai shows them
    to the model (``model_response_str`` / a retry prompt's ``model_response``)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [{"id": p.tool_call_id, "type": "function",
                      "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
                     for p in message.parts if isinstance(p, ToolCallPart)]
            out.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                out.append({"role": "user", "content": text_of(part.content)})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()})
            elif isinstance(part, RetryPromptPart):
                if part.tool_name is None:
                    out.append({"role": "user", "content": part.model_response()})
                else:
                    out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()})
    return out


def _feed(dispatch: EarlyDispatch, events: list[LLMEvent]) -> bool:
    """Give the call events to the dispatcher; whether a speculation was started."""
    before = dispatch.speculated
    for event in events:
        if isinstance(event, ToolCallStarted | ToolCallClosed):
            dispatch.feed(event)
    return dispatch.speculated != before


__all__ = ["ForethoughtToolset", "TappedModel", "pydantic_tool"]
