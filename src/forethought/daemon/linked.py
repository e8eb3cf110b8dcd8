"""A linked server's tools as core tools: resolved by the core's policy with the server's name, run by the shim.

Each tool a shim registered becomes a :class:`~forethought._core.tools.Tool` whose function runs the call
through that shim, keyed by the core's one rule on the tool's own input schema (``Receives.JSON``: the
server parses JSON, so only differences of the JSON key apart). A schema the core cannot compile keys the
call on its exact JSON text instead (one ``payload`` argument, key-sorted), so such a tool still works.

The function has two paths, told apart by :data:`CLAIM` (set only while a shim's claim is being answered):

* **early** (a speculation): :meth:`Shim.run` sends the call to the shim as a job; an answer that is not a
  final, error-free tool result raises, so the core never serves it;
* **authoritative** (a claim that no speculation served): the shim itself sends the client's own request
  upstream; the function returns when the shim reports the answer, so a write counts as in progress until
  it has really ended (:class:`ClaimRun`).

Two ways to build them: :func:`conversation_tool` names the tool as the client names it to the model
(``mcp__git__git_status``) and resolves its policy here, with the core's :func:`~forethought._core.policy.resolve`
and the server's name; a tool that may not run early is declared DESTRUCTIVE, so the runtime's own
resolution of a tool without a server (``runtime.session(tools=...)``) cannot turn it on again.
:func:`server_tool` keeps the tool's own name and leaves the resolution to ``runtime.session(..., server=...)``
(a shim's session for calls no conversation claims).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import Receives, ToolCall
from forethought._core.policy import UNKNOWN_SERVER, Policy, resolve
from forethought._core.tools import Effect, Tool
from forethought._core.versions import Write
from forethought.daemon.shims import LinkedTool, Shim
from forethought.errors import ForethoughtError, ToolDefinitionError
from forethought.mcp.daemon_link import LinkAnswer

__all__ = ["CLAIM", "DEFAULT_TTL_S", "ClaimRun", "LinkedCall", "UnservableAnswer", "conversation_tool",
           "early_reason", "server_tool"]

PAYLOAD = "payload"
DEFAULT_TTL_S = 30.0
"""How long an early result stays servable unless the policy says otherwise (as the MCP proxy's default)."""
_EXACT_PARAMETERS = {"type": "object", "properties": {PAYLOAD: {"type": "string"}}, "required": [PAYLOAD]}
_EARLY = (Effect.PURE, Effect.READ_ONLY)


class UnservableAnswer(ForethoughtError):
    """An early run got an error or a result that is not final: it is never served."""


@dataclass(eq=False)
class ClaimRun:
    """A client's call that no speculation served: the shim runs it and reports when it has ended.

    ``go`` is set when the tool's authoritative run begins (the claim answers ``run``); ``done`` receives
    the shim's report. ``write``: an effect the core could not attribute to a tool (a call of a tool it does
    not know), held until the report.
    """

    go: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Future[LinkAnswer] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task[Any] | None = None
    write: Write | None = None

    async def here(self) -> LinkAnswer:
        """The authoritative run: let the shim send the client's request, wait until it reports the end."""
        if not self.go.done():
            self.go.set_result(None)
        return await asyncio.shield(self.done)


CLAIM: contextvars.ContextVar[ClaimRun | None] = contextvars.ContextVar("forethought_daemon_claim", default=None)
"""The claim an authoritative run serves; unset in speculations (their tasks start without it)."""


@dataclass(frozen=True, slots=True)
class LinkedCall:
    """How calls of one linked tool are made: its core tool, and whether it is keyed on exact JSON text."""

    tool: Tool
    exact: bool = False

    def call(self, arguments: Mapping[str, Any]) -> ToolCall:
        """The core call for ``arguments`` as the client (or the model) gave them."""
        if self.exact:
            text = json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            return ToolCall(self.tool.name, {PAYLOAD: text})
        return ToolCall(self.tool.name, dict(arguments))


def _runner(shim: Shim, tool: str, exact: bool) -> Any:
    async def run(**arguments: Any) -> LinkAnswer:
        if exact:
            arguments = json.loads(arguments[PAYLOAD])
        claim = CLAIM.get()
        if claim is not None:
            return await claim.here()
        answer = await shim.run(tool, arguments)
        if not answer.servable:
            raise UnservableAnswer("the early run got an error or a result that is not final")
        return answer

    return run


def _validator(shim: Shim, spec_tool: str, arguments_for: Any, exact: bool) -> Any:
    async def validate(call: ToolCall) -> str:
        given = json.loads(call.arguments[PAYLOAD]) if exact else dict(call.arguments)
        answer = await shim.run(spec_tool, arguments_for(given))
        if not answer.servable:
            raise UnservableAnswer("the validator got an error")
        return json.dumps(answer.to_json(), sort_keys=True)

    return validate


def _build(name: str, shim: Shim, linked: LinkedTool, validators: tuple[Any, Any] = (None, None),
           **options: Any) -> LinkedCall:
    """The tool keyed on ``linked``'s own schema; on its exact JSON text when the core cannot compile it."""
    try:
        return LinkedCall(Tool(name=name, fn=_runner(shim, linked.name, exact=False), parameters=linked.schema,
                               receives=Receives.JSON, validator=validators[0], **options))
    except ToolDefinitionError:
        return LinkedCall(Tool(name=name, fn=_runner(shim, linked.name, exact=True), parameters=_EXACT_PARAMETERS,
                               receives=Receives.JSON, validator=validators[1], **options), exact=True)


def early_reason(shim: Shim, linked: LinkedTool, policy: Policy) -> tuple[bool, str]:
    """Whether ``linked`` may run early under ``policy`` (what ``doctor`` shows), and why."""
    server = shim.policy_name if shim.policy_name is not None else UNKNOWN_SERVER
    decided = resolve(policy, linked.name, server=server, hints=linked.annotations)
    if decided.unmatched:
        return False, decided.unmatched
    if not decided.speculate:
        return False, decided.reason if "observable" in decided.reason else "the policy turns it off"
    if decided.effect not in _EARLY:
        return False, f"{decided.effect.value}: {decided.reason}"
    tool = conversation_tool(linked.name, shim, linked, policy).tool
    if tool.effect not in _EARLY:
        return False, "its validator is not a read-only tool of the server"
    return True, decided.reason


def conversation_tool(model_name: str, shim: Shim, linked: LinkedTool, policy: Policy) -> LinkedCall:
    """``linked`` as the client names it to the model, its policy resolved with its server's name."""
    server = shim.policy_name if shim.policy_name is not None else UNKNOWN_SERVER
    decided = resolve(policy, linked.name, server=server, hints=linked.annotations)
    early = decided.early and decided.effect in _EARLY
    options: dict[str, Any] = {
        "description": linked.description,
        "effect": decided.effect if early else Effect.DESTRUCTIVE,
        "ttl_s": decided.ttl_s if decided.ttl_s is not None else DEFAULT_TTL_S,
        "private": decided.private, "private_arguments": decided.private_arguments}
    if decided.cost_units is not None:
        options["cost_units"] = decided.cost_units
    if decided.expected_s is not None:
        options["expected_s"] = decided.expected_s
    spec = decided.validator
    validators: tuple[Any, Any] = (None, None)
    if early and spec is not None:
        guard = shim.tools.get(spec.tool)
        guard_decided = resolve(policy, spec.tool, server=server, hints=guard.annotations) if guard else None
        if guard is None or guard_decided is None or not guard_decided.early or guard_decided.effect not in _EARLY:
            options["effect"] = Effect.DESTRUCTIVE  # a validator that cannot run makes the tool never early
        else:
            def arguments_for(given: Mapping[str, Any], spec: Any = spec, schema: Any = guard.schema) -> Any:
                return spec.arguments_for(given, schema)

            validators = (_validator(shim, spec.tool, arguments_for, exact=False),
                          _validator(shim, spec.tool, arguments_for, exact=True))
    return _build(model_name, shim, linked, validators, **options)


def server_tool(shim: Shim, linked: LinkedTool) -> LinkedCall:
    """``linked`` under its own name, declared nothing: ``runtime.session(tools=..., server=...)`` resolves it."""
    return _build(linked.name, shim, linked, description=linked.description, annotations=linked.annotations,
                  ttl_s=DEFAULT_TTL_S)
