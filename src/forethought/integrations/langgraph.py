"""LangGraph: a ``ToolNode`` whose tools run through a forethought session, and nothing else changed.

::

    session = Runtime().session(tools=[lookup, note])
    graph.add_node("tools", ForethoughtToolNode(session))     # instead of ToolNode([...])

:class:`ForethoughtToolNode` is LangGraph's own ``ToolNode`` over LangChain tools whose innermost call is
``session.execute`` (claiming a speculation, or running). Each session tool is built as LangChain's ``@tool``
would build it from its function (:func:`langchain_tool`: the same name, description and argument
schema; :mod:`forethought.integrations.native`), so the node behaves exactly as the native ``ToolNode``
does: arguments are validated by LangChain, results become ``ToolMessage``s with the model's call ids and
LangChain's rendering, calls of one message run concurrently, and a tool that raises raises its own
exception through ``handle_tool_errors`` (by default the node raises it; only invalid arguments are
answered with a message). Tools you pass yourself (``tools=[...]``) whose name is a session tool run
through the session with their own argument schema; any other tool runs as it is.

Speculation comes from the model node: tap its stream with :func:`~forethought.integrations.tap.tap`
and every call starts when its arguments close. Use the graph's async API (``ainvoke`` / ``astream``): the
session is asynchronous.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as create_tool
from langgraph.prebuilt import ToolNode

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.tools import Tool
from forethought.integrations.native import declared_description, execute_natively, native_function
from forethought.llm.dispatch import caller_runs


def _runner(session: Session, name: str) -> Callable[..., Any]:
    async def run(**arguments: Any) -> Any:
        return await execute_natively(session, ToolCall(name, arguments))

    return run


def langchain_tool(session: Session, t: Tool) -> StructuredTool:
    """A session tool as LangChain's ``@tool`` builds one from its function, running through the session
    (a tool whose schema is not its signature's gets that JSON schema as its ``args_schema``)."""
    fn = native_function(session, t)
    if fn is not None:
        return StructuredTool.from_function(coroutine=fn, name=t.name, description=declared_description(t))
    return StructuredTool.from_function(coroutine=_runner(session, t.name), name=t.name,
                                        description=t.description or t.name, args_schema=dict(t.parameters))


def _through_session(session: Session, given: BaseTool) -> BaseTool:
    """``given`` with its call made through the session, when the session has a tool of its name whose
    parameters cover ``given``'s (a tool with injected arguments runs as it is: :func:`_injects`)."""
    t = session.tools.get(given.name)
    if t is None or isinstance(given, _SessionTool):
        return given
    properties: Mapping[str, Any] = t.parameters.get("properties") or {}
    if given.args_schema is None or not set(given.args) <= set(properties) or _injects(given):
        return given
    return _SessionTool(name=given.name, description=given.description, args_schema=given.args_schema,
                        coroutine=_runner(session, t.name), return_direct=given.return_direct,
                        response_format=given.response_format, handle_tool_error=given.handle_tool_error,
                        handle_validation_error=given.handle_validation_error)


def _injects(given: BaseTool) -> bool:
    """Whether LangGraph fills some of ``given``'s arguments itself (a call id, the graph's state or store):
    those are not the model's, and the session's tool would be handed them, so it runs as it is."""
    try:
        schema: Any = given.get_input_schema()
        full = schema.model_json_schema().get("properties") or {}
    except Exception:  # a schema LangChain cannot describe: leave the tool alone
        return True
    return bool(set(full) - set(given.args))


class _SessionTool(StructuredTool):
    """A tool you gave the node, its call made through the session (its schema and settings kept)."""


class ForethoughtToolNode(ToolNode):
    """LangGraph's ``ToolNode`` over the session's tools, run through the session (see the module docstring)."""

    def __init__(self, session: Session, tools: Sequence[BaseTool | Callable[..., Any]] | None = None,
                 **kwargs: Any) -> None:
        self.session = session
        if tools is None:
            chosen: list[BaseTool | Callable[..., Any]] = [langchain_tool(session, t) for t in session.tools.values()]
        else:
            chosen = [_through_session(session, x if isinstance(x, BaseTool) else create_tool(x)) for x in tools]
            # A given tool left as it is under a session tool's name: its calls are the caller's, not the session's.
            caller_runs(session, [x.name for x in chosen if isinstance(x, BaseTool)
                                  and not isinstance(x, _SessionTool) and x.name in session.tools])
        super().__init__(chosen, **kwargs)
