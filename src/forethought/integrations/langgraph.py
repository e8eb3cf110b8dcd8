"""LangGraph: a ``ToolNode`` whose tool calls go through a forethought session.

::

    session = Runtime().session(tools=[lookup, note])
    graph.add_node("tools", ForethoughtToolNode(session))     # instead of ToolNode([...])

LangGraph's own extension point is used: :class:`ForethoughtToolNode` is a ``ToolNode`` with an
``awrap_tool_call`` interceptor. A call whose tool is registered in the session runs as
``session.execute`` (claiming a speculation, or running); any other call goes to the node's normal
execution. The node's tools default to LangChain ``StructuredTool`` views of the session's tools (their
JSON schemas, for ``bind_tools``); results become ``ToolMessage``s with the same text the forethought Agent
gives (``{"error": ...}`` for a failed call). Speculation comes from the model node: tap its stream with
:func:`~forethought.integrations.tap.tap` and every call starts when its arguments close. Use the graph's
async API (``ainvoke`` / ``astream``): the session is asynchronous.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.errors import ForethoughtError
from forethought.llm.dispatch import render_error, render_output


def langchain_tool(session: Session, t: Tool) -> StructuredTool:
    """A LangChain view of a session tool: its name, description and JSON schema; running it executes it."""

    async def run(**arguments: Any) -> str:
        return render_output(await session.execute(ToolCall(t.name, arguments)))

    return StructuredTool.from_function(coroutine=run, name=t.name, description=t.description or t.name,
                                        args_schema=dict(t.parameters))


class ForethoughtToolNode(ToolNode):
    """A LangGraph ``ToolNode`` that executes the session's tools through the session (see the module)."""

    def __init__(self, session: Session, tools: Sequence[BaseTool | Callable[..., Any]] | None = None,
                 **kwargs: Any) -> None:
        self.session = session
        chosen = list(tools) if tools is not None else [langchain_tool(session, t) for t in session.tools.values()]
        super().__init__(chosen, awrap_tool_call=self._through_session, **kwargs)

    async def _through_session(self, request: ToolCallRequest,
                               execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
                               ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        name = call["name"]
        if name not in self.session.tools:
            return await execute(request)
        try:
            output = render_output(await self.session.execute(ToolCall(name, dict(call.get("args") or {}))))
        except ForethoughtError as exc:
            return ToolMessage(content=render_error(exc), tool_call_id=call["id"], name=name, status="error")
        return ToolMessage(content=output, tool_call_id=call["id"], name=name)
