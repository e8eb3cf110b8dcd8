"""Tools: what can be called, what running it early may do, and how it is keyed.

A :class:`Tool` couples a callable with its JSON schema and its :class:`Effect`. The effect decides
whether the tool may run before the model asks for it: PURE and READ_ONLY tools may, ISOLATED_WRITE tools
may only against a snapshot of their state, DESTRUCTIVE tools never. A tool whose effect is not declared
is DESTRUCTIVE. The :func:`tool` decorator builds a Tool from a sync or async function, deriving the
schema from its signature and type hints.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from forethought._core.calls import (
    ArgumentSpec,
    CallKey,
    Receives,
    ToolCall,
    compile_arguments,
)
from forethought._core.signatures import own_defaults, schema_from_signature
from forethought._core.versions import StateVersion, versions_of
from forethought.errors import InvalidArgumentsError, ToolDefinitionError, UnknownToolError


class Effect(enum.Enum):
    """What running a tool does to the world, from the speculator's point of view."""

    PURE = "pure"
    """Depends only on its arguments; no state read or written."""
    READ_ONLY = "read_only"
    """Reads state but never changes it."""
    ISOLATED_WRITE = "isolated_write"
    """Changes state that a snapshot can capture; runs early only against a snapshot."""
    DESTRUCTIVE = "destructive"
    """Changes the world irreversibly (or unknown); runs only when the model asks for it."""

    __hash__ = object.__hash__  # identity hash: members are singletons (Enum's own hash is Python-level)

    @property
    def writes(self) -> bool:
        return self in _WRITING_EFFECTS


_WRITING_EFFECTS = frozenset({Effect.ISOLATED_WRITE, Effect.DESTRUCTIVE})


class _Unknown(enum.Enum):
    SERVER = "unknown server"


UNKNOWN_SERVER = _Unknown.SERVER
"""The server a tool belongs to when the edge could not learn its name (policy tables cannot be matched)."""
Server = str | _Unknown | None
"""What an edge knows of a tool's server: its name, :data:`UNKNOWN_SERVER`, or ``None`` (no server: a tool
the user's own code defines)."""


@runtime_checkable
class Snapshot(Protocol):
    """One snapshot of a stateful tool's state, taken at a base version."""

    @property
    def target(self) -> Any:
        """What the tool function runs against (a copy of the state)."""

    def commit(self) -> bool:
        """Make the snapshot's resulting state live if the live state still has the base version."""

    def discard(self) -> None:
        """Drop the snapshot; the live state is untouched."""


@runtime_checkable
class StateCell(Protocol):
    """The live state behind ISOLATED_WRITE tools, able to hand out snapshots.

    Authoritative calls run against :attr:`live` and then call :meth:`mark_changed`, which advances the
    version; a snapshot taken before or during that write therefore can no longer commit.
    """

    @property
    def live(self) -> Any:
        """What authoritative calls run against."""

    def snapshot(self) -> Snapshot:
        """Take a snapshot of the live state now."""

    def mark_changed(self) -> None:
        """Record that an authoritative call may have changed the live state."""


Validator = Callable[[ToolCall], Any]
"""Freshness validator: returns a version token (sync or awaitable); a changed token is a miss."""


@dataclass(frozen=True, slots=True)
class PartialRule:
    """How to serve a call from a cached result of a broader call of the same tool.

    ``covers(cached_arguments, requested_arguments)`` says whether the cached call's result contains the
    requested one's; ``narrow(requested_arguments, cached_result)`` derives the requested result.
    """

    covers: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    narrow: Callable[[Mapping[str, Any], Any], Any]


ToolFunction = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable tool with its schema, effect and speculation settings.

    For ISOLATED_WRITE tools with a ``state`` cell, ``fn`` receives the state target as its first
    positional argument (the live state for authoritative calls, a snapshot copy for speculations).
    """

    name: str
    fn: ToolFunction
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    effect: Effect = Effect.DESTRUCTIVE
    cost_units: float = 1.0
    ttl_s: float = 60.0
    validator: Validator | None = None
    partial: PartialRule | None = None
    state: StateCell | None = None
    threaded: bool = False
    parameter_order: tuple[str, ...] | None = None
    expected_s: float | None = None
    reads: tuple[object, ...] = ()
    writes: tuple[object, ...] = ()
    private: bool = False
    private_arguments: frozenset[str] = frozenset()
    prepare: Callable[[Mapping[str, Any]], Any] | None = None
    """A hook that warms what a call of this tool will need (a connection, a cache) and never changes
    state: run for a hint whose arguments are not all known, with the ones that are (sync or async)."""
    receives: Receives = Receives.PYTHON
    """What ``fn`` receives of a call: the caller's own Python values (the default) or JSON that a server
    parses (an MCP server's tool); it decides which differences between two calls key apart."""
    annotations: Mapping[str, Any] | None = None
    """What the tool says of itself where a server describes it (MCP annotations such as ``readOnlyHint``):
    untrusted, believed only where the policy trusts its server (:func:`~forethought._core.policy.resolve`)."""
    speculate: bool = True
    """Whether the policy lets it run early at all (set by policy resolution; its effect must allow it too)."""
    server: Server = None
    """The server the tool belongs to (an MCP server's name, :data:`UNKNOWN_SERVER`), or ``None`` for a tool of
    the user's own code: which of the policy's tables it resolves against (``Runtime.session`` may give one
    server for all the tools it opens with; a tool's own wins)."""
    arguments: ArgumentSpec = field(init=False, repr=False, compare=False)
    label: str = field(init=False, repr=False, compare=False)
    """The name telemetry and logs may show: ``"<private>"`` for a private tool."""
    states_read: tuple[object, ...] = field(init=False, repr=False, compare=False)
    """Every state this tool's result depends on: ``reads``, ``writes`` and its own ``state`` cell."""
    states_written: tuple[object, ...] = field(init=False, repr=False, compare=False)
    """Every state an authoritative run may change: ``writes`` and its own ``state`` cell."""
    read_versions: tuple[StateVersion, ...] = field(init=False, repr=False, compare=False)
    """Version counters a speculation must find unchanged: of ``reads`` and ``writes``, and of its own cell
    unless it runs on snapshots of it (ISOLATED_WRITE), whose own commit rule guards the cell."""
    write_versions: tuple[StateVersion, ...] = field(init=False, repr=False, compare=False)
    """Version counters an authoritative run of a writing tool moves (of :attr:`states_written`)."""
    cells_written: tuple[StateCell, ...] = field(init=False, repr=False, compare=False)
    """The :class:`StateCell` objects among :attr:`states_written`: each is marked changed after every
    authoritative run, so no snapshot of it taken before the write can commit over it."""
    hide_key: bool = field(init=False, repr=False, compare=False)
    """Whether telemetry must carry no key hash for calls of this tool (private tool or arguments)."""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ToolDefinitionError("a tool needs a non-empty string name")
        if not callable(self.fn):
            raise ToolDefinitionError(f"tool {self.name!r}: fn is not callable")
        if self.cost_units < 0 or self.ttl_s <= 0:
            raise ToolDefinitionError(f"tool {self.name!r}: cost_units must be >= 0 and ttl_s > 0")
        if self.expected_s is not None and not self.expected_s >= 0:
            raise ToolDefinitionError(f"tool {self.name!r}: expected_s must be >= 0")
        if self.prepare is not None and not callable(self.prepare):
            raise ToolDefinitionError(f"tool {self.name!r}: prepare is not callable")
        if not isinstance(self.effect, Effect):
            raise ToolDefinitionError(f"tool {self.name!r}: effect must be an Effect, got {self.effect!r}")
        reads, writes = tuple(self.reads), tuple(self.writes)
        object.__setattr__(self, "reads", reads)
        object.__setattr__(self, "writes", writes)
        own = (self.state,) if self.state is not None else ()
        object.__setattr__(self, "states_read", _unique((*own, *reads, *writes)))
        object.__setattr__(self, "states_written", _unique((*own, *writes)))
        guarded = _unique((*reads, *writes)) if self.effect is Effect.ISOLATED_WRITE else self.states_read
        object.__setattr__(self, "read_versions", versions_of(guarded))
        object.__setattr__(self, "write_versions",
                           versions_of(self.states_written) if self.effect.writes else ())
        object.__setattr__(self, "cells_written", tuple(
            state for state in self.states_written if callable(getattr(state, "mark_changed", None))))
        object.__setattr__(self, "private_arguments", frozenset(self.private_arguments))
        object.__setattr__(self, "label", PRIVATE_LABEL if self.private else self.name)
        object.__setattr__(self, "hide_key", self.private or bool(self.private_arguments))
        try:
            spec = compile_arguments(self.label, self.parameters, self.parameter_order, self.receives,
                                     self.private or bool(self.private_arguments),
                                     own_defaults(self.fn, self.parameters)
                                     if self.receives is Receives.PYTHON else frozenset())
        except InvalidArgumentsError as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: unusable parameters schema: {exc}") from None
        object.__setattr__(self, "arguments", spec)

    @property
    def speculable(self) -> bool:
        """Whether the effect allows any early run at all (ISOLATED_WRITE needs a state cell); the policy's
        own switch is :attr:`speculate`."""
        if self.effect in (Effect.PURE, Effect.READ_ONLY):
            return True
        return self.effect is Effect.ISOLATED_WRITE and self.state is not None

    def key(self, call: ToolCall) -> CallKey:
        return self.arguments.key(call)

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": dict(self.parameters)}}


PRIVATE_LABEL = "<private>"
"""What telemetry, metrics and logs show instead of a private tool's name."""


def _unique(states: tuple[object, ...]) -> tuple[object, ...]:
    out: list[object] = []
    for state in states:
        if not any(state is seen for seen in out):
            out.append(state)
    return tuple(out)


@typing.overload
def tool(fn: ToolFunction, *, name: str | None = None, effect: Effect = Effect.DESTRUCTIVE,
         description: str | None = None, cost_units: float = 1.0, ttl_s: float = 60.0,
         validator: Validator | None = None, partial: PartialRule | None = None,
         state: StateCell | None = None, threaded: bool | None = None,
         parameters: Mapping[str, Any] | None = None, expected_s: float | None = None,
         reads: Iterable[object] = (), writes: Iterable[object] = (),
         prepare: Callable[[Mapping[str, Any]], Any] | None = None) -> Tool:
    """Bare use: ``@tool``."""


@typing.overload
def tool(fn: None = None, *, name: str | None = None, effect: Effect = Effect.DESTRUCTIVE,
         description: str | None = None, cost_units: float = 1.0, ttl_s: float = 60.0,
         validator: Validator | None = None, partial: PartialRule | None = None,
         state: StateCell | None = None, threaded: bool | None = None,
         parameters: Mapping[str, Any] | None = None, expected_s: float | None = None,
         reads: Iterable[object] = (), writes: Iterable[object] = (),
         prepare: Callable[[Mapping[str, Any]], Any] | None = None) -> Callable[[ToolFunction], Tool]:
    """With options: ``@tool(effect=Effect.READ_ONLY)``."""


def tool(fn: ToolFunction | None = None, *, name: str | None = None, effect: Effect = Effect.DESTRUCTIVE,
         description: str | None = None, cost_units: float = 1.0, ttl_s: float = 60.0,
         validator: Validator | None = None, partial: PartialRule | None = None,
         state: StateCell | None = None, threaded: bool | None = None,
         parameters: Mapping[str, Any] | None = None, expected_s: float | None = None,
         reads: Iterable[object] = (), writes: Iterable[object] = (),
         prepare: Callable[[Mapping[str, Any]], Any] | None = None) -> Tool | Callable[[ToolFunction], Tool]:
    """Turn a sync or async function into a :class:`Tool`; usable bare or with keyword options.

    The effect defaults to DESTRUCTIVE: a tool is speculated only once its author says it is safe.
    Sync functions run in a worker thread unless ``threaded=False``. The schema comes from the signature
    (a ``functools.wraps`` forwarder is read through to the function it wraps) unless ``parameters`` gives
    it, which a ``*args, **kwargs`` function needs. ``expected_s`` declares how long a call usually takes
    (used until the runtime has measured it); ``reads`` and ``writes`` name the states the tool reads and
    changes (its own ``state`` cell counts as both), so a write to one from any session makes
    speculations that read it stale. ``prepare`` is a hook run for a hint of this tool whose arguments
    are incomplete (see :attr:`Tool.prepare`).
    """

    def build(func: ToolFunction) -> Tool:
        doc = inspect.getdoc(func) or ""
        fn_name = getattr(func, "__name__", None)
        if not (name or fn_name):
            raise ToolDefinitionError(f"{func!r} has no __name__: give the tool a name=")
        schema = schema_from_signature(func, state is not None) if parameters is None else dict(parameters)
        is_async = inspect.iscoroutinefunction(inspect.unwrap(func)) or inspect.iscoroutinefunction(func)
        return Tool(
            name=name or str(fn_name), fn=func, parameters=schema,
            description=description if description is not None else doc.split("\n\n")[0],
            effect=effect, cost_units=cost_units, ttl_s=ttl_s, validator=validator, partial=partial,
            state=state, threaded=(not is_async) if threaded is None else threaded, expected_s=expected_s,
            reads=tuple(reads), writes=tuple(writes), prepare=prepare,
        )

    return build(fn) if fn is not None else build


class ToolRegistry(Mapping[str, Tool]):
    """Tools by name; the lookup every call goes through."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._view = types.MappingProxyType(self._tools)
        for t in tools:
            self.add(t)

    def table(self) -> Mapping[str, Tool]:
        """A live read-only view of the tools by name (its ``get`` is the fastest lookup)."""
        return self._view

    def add(self, t: Tool) -> None:
        if not isinstance(t, Tool):
            raise ToolDefinitionError(f"{t!r} is not a Tool (wrap functions with forethought.tool)")
        self._tools[t.name] = t

    def get_tool(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise UnknownToolError(f"unknown tool {name!r}") from None

    def merged(self, extra: Iterable[Tool]) -> ToolRegistry:
        out = ToolRegistry(self._tools.values())
        for t in extra:
            out.add(t)
        return out

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def invoke_tool(t: Tool, target: Any, arguments: Mapping[str, Any]) -> Any:
    """Call ``t.fn`` with keyword ``arguments`` (the state target first when it has state).

    Returns what the function returns; for async tools that is an awaitable the caller awaits.
    """
    args = (target,) if t.state is not None else ()
    return t.fn(*args, **arguments)
