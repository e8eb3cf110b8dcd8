"""A session's tool as a framework sees a plain function: same signature, same errors, run through the session.

The adapters hand each framework a tool built by the framework's own constructor (``function_tool``,
LangChain's ``StructuredTool.from_function``, pydantic-ai's ``Tool``), so schemas, argument validation,
output rendering and error handling are the framework's own. Only the innermost call changes:
:func:`native_function` gives a coroutine function with the tool function's own signature, name, docstring
and annotations (``functools.update_wrapper``: frameworks read them through ``__wrapped__``) whose call is
``session.execute`` (claiming a speculation, or running), and :func:`execute_natively` raises what the tool
itself raised, not the core's :class:`~forethought.errors.ToolExecutionError` around it, so the framework
handles a failure exactly as it would without forethought.

A tool whose function cannot be described by its signature alone (a state cell as first argument, an
explicit ``parameters=`` schema, ``*args``) has no native function; the adapters then build the framework's
tool from its JSON schema.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.runtime import Session
from forethought._core.signatures import schema_from_signature
from forethought._core.tools import Tool
from forethought.errors import ToolDefinitionError, ToolExecutionError

NativeFunction = Callable[..., Awaitable[Any]]


async def execute_natively(session: Session, call: ToolCall) -> Any:
    """``session.execute(call)``; a tool that raised raises its own exception here (the framework's to handle)."""
    try:
        return await session.execute(call)
    except ToolExecutionError as exc:
        cause = exc.__cause__
        if not isinstance(cause, Exception):
            raise
    raise cause  # outside the handler: the tool's exception keeps its own context


def native_function(session: Session, t: Tool) -> NativeFunction | None:
    """A coroutine function that looks like ``t.fn`` to a framework and runs ``t`` through ``session``
    (``None`` when ``t``'s schema does not come from its signature)."""
    fn = t.fn
    if t.state is not None:
        return None
    try:
        signature = inspect.signature(fn)
        if schema_from_signature(fn) != dict(t.parameters):
            return None
    except (ToolDefinitionError, TypeError, ValueError):
        return None

    async def through_session(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(*args, **kwargs).arguments
        return await execute_natively(session, ToolCall(t.name, dict(arguments)))

    functools.update_wrapper(through_session, fn)
    through_session.__name__ = t.name
    return through_session


def declared_description(t: Tool) -> str | None:
    """``t``'s description when it was given explicitly (not taken from its docstring's first paragraph):
    a framework reading the docstring itself would not know it."""
    doc = inspect.getdoc(t.fn) or ""
    return None if t.description == doc.split("\n\n")[0] and doc else (t.description or t.name)
