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
  ``FunctionToolset`` of the session's own tools (their JSON schemas).
* :class:`TappedModel` is a ``WrapperModel``: each ``request`` (what ``Agent.run`` uses) is streamed from
  the wrapped model, and the stream's tool-call parts (``PartStartEvent`` / ``PartDeltaEvent``) are
  decoded like any other stream, so each call starts as a speculation the moment its arguments close
  (the agent's dispatch rules, :class:`~forethought.llm.dispatch.EarlyDispatch` in speculating mode).
  ``speculate=False`` is the serial arm: the same code, nothing started early. The response returned is
  the stream's own; ``request_stream`` (``run_stream``) is the wrapped model's, unchanged.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, PartDeltaEvent, PartStartEvent, ToolCallPart
from pydantic_ai.messages import ToolCallPartDelta as _ToolCallPartDelta
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import Tool as PydanticTool
from pydantic_ai.toolsets import FunctionToolset, ToolsetTool, WrapperToolset

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.dispatch import EarlyDispatch
from forethought.llm.events import LLMEvent, ToolCallClosed, ToolCallStarted


def _function(session: Session, name: str) -> Any:
    async def run(**arguments: Any) -> Any:
        return await session.execute(ToolCall(name, arguments))

    return run


@dataclass
class ForethoughtToolset(WrapperToolset[Any]):
    """A ``WrapperToolset`` that runs the session's tools through the session (see the module docstring)."""

    session: Session | None = None

    @classmethod
    def of(cls, session: Session) -> ForethoughtToolset:
        """The session's tools, as a pydantic-ai toolset executed through the session."""
        tools = [PydanticTool.from_schema(_function(session, t.name), t.name, t.description or t.name,
                                          dict(t.parameters)) for t in session.tools.values()]
        return cls(wrapped=FunctionToolset(tools), session=session)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        session = self.session
        if session is None or name not in session.tools:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        return await session.execute(ToolCall(name, tool_args))


class _PartsDecoder:
    """pydantic-ai stream events -> call started / closed events (tool-call parts only)."""

    def __init__(self) -> None:
        self._assembler = ToolCallAssembler()
        self._calls: dict[int, int] = {}  # part index -> call index

    def feed(self, event: Any) -> list[LLMEvent]:
        if isinstance(event, PartStartEvent) and isinstance(event.part, ToolCallPart):
            index = self._calls[event.index] = len(self._calls)
            args = event.part.args if isinstance(event.part.args, str) else None
            return self._assembler.add_tool_delta(index, event.part.tool_call_id, event.part.tool_name, args)
        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, _ToolCallPartDelta):
            found = self._calls.get(event.index)
            if found is None or not isinstance(event.delta.args_delta, str):
                return []
            return self._assembler.add_tool_delta(found, None, None, event.delta.args_delta)
        return []

    def finish(self) -> list[LLMEvent]:
        return self._assembler.finish("tool_calls")


class TappedModel(WrapperModel):
    """A pydantic-ai ``WrapperModel`` that starts the streamed tool calls early (see the module docstring)."""

    def __init__(self, wrapped: Any, session: Session, *, speculate: bool = True) -> None:
        super().__init__(wrapped)
        self.session = session
        self.speculate = speculate

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        dispatch = EarlyDispatch(self.session, enabled=self.speculate, authoritative=False)
        decoder = _PartsDecoder()
        completed = False
        try:
            async with self.wrapped.request_stream(messages, model_settings, model_request_parameters) as streamed:
                async for event in streamed:
                    if _feed(dispatch, decoder.feed(event)):
                        await asyncio.sleep(0)  # let the new speculations start (see integrations.tap)
            _feed(dispatch, decoder.finish())
            completed = True
        finally:
            if not completed:
                await dispatch.abandon()
        return streamed.get()


def _feed(dispatch: EarlyDispatch, events: list[LLMEvent]) -> bool:
    """Give the call events to the dispatcher; whether a speculation was started."""
    before = dispatch.speculated
    for event in events:
        if isinstance(event, ToolCallStarted | ToolCallClosed):
            dispatch.feed(event)
    return dispatch.speculated != before


__all__ = ["ForethoughtToolset", "TappedModel"]
