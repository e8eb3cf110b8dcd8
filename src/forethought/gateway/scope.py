"""One relayed response as the gateway knows it: its id and token, the tools its request offered, its segment.

A :class:`ResponseScope` keys every call of the response the way the core keys calls
(:func:`~forethought._core.calls.compile_arguments` over the request's own tool schemas), so an entry
posted for a call and the model's call match only when no difference between them can reach the tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ArgumentSpec, CallKey, ToolCall, compile_arguments
from forethought.errors import InvalidArgumentsError

__all__ = ["ResponseScope", "tool_parameters"]


def tool_parameters(tools: Any) -> dict[str, Mapping[str, Any] | None]:
    """Tool name -> parameters schema of the function tools a request offers (others are skipped).

    Both wire forms: Chat Completions (``{"type": "function", "function": {"name", "parameters"}}``) and
    the Responses API (``{"type": "function", "name", "parameters"}``).
    """
    out: dict[str, Mapping[str, Any] | None] = {}
    for entry in tools if isinstance(tools, list) else ():
        if not isinstance(entry, Mapping):
            continue
        function = entry.get("function")
        if not isinstance(function, Mapping) and entry.get("type") == "function":
            function = entry  # the Responses API's flat form
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            out[function["name"]] = parameters if isinstance(parameters, Mapping) else None
    return out


@dataclass(slots=True, eq=False)
class ResponseScope:
    """One relayed response as a replica knows it: id, token, tool specs, segment and post counter.

    The replica that relays the response holds the scope it opened (with the token it sent to the
    client); a scope found for a post on another replica carries no token (``""``).
    """

    response_id: str
    token: str
    tools: Any
    created: float
    segment: int = 0
    posts: int = 0
    """Accepted posts over the whole response (as last seen by this replica)."""
    expects_posts: bool = False
    """The client announced it will post (``x-forethought-cache: post``)."""
    posted: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a post for this response is accepted on this replica."""
    _parameters: dict[str, Mapping[str, Any] | None] | None = None
    _specs: dict[str, ArgumentSpec | None] = field(default_factory=dict)

    def offers(self, name: str) -> bool:
        """Whether the request offered a tool of this name."""
        if self._parameters is None:
            self._parameters = tool_parameters(self.tools)
        return name in self._parameters

    def spec(self, name: str) -> ArgumentSpec | None:
        """The argument spec of an offered tool (compiled on first use); ``None`` if absent or unusable."""
        if name not in self._specs:
            spec = None
            if self.offers(name):
                assert self._parameters is not None
                try:
                    spec = compile_arguments(name, self._parameters[name])
                except Exception:  # a schema the canonicaliser cannot compile: the tool is never served
                    spec = None
            self._specs[name] = spec
        return self._specs[name]

    def key(self, call: ToolCall) -> CallKey | None:
        """The canonical key of ``call`` under this response's schemas; ``None`` if it has none."""
        spec = self.spec(call.name)
        if spec is None:
            return None
        try:
            return spec.key(call)
        except InvalidArgumentsError:
            return None
