"""An upstream's tool list as core :class:`~forethought._core.tools.Tool` values: the proxy as a thin edge.

Every tool of a ``tools/list`` answer becomes one core tool that receives its arguments as JSON
(``Receives.JSON``: the server parses them), with no schema the core would fill defaults from (``{"type":
"object"}``: a server may not apply its schema's defaults as the schema says). So the core's one key rule
decides which calls a guess may serve: key order is irrelevant, ``3`` and ``3.0`` are different calls, and
nothing else about the spelling is forgiven. The tool function gets the caller's own arguments (``**``) and
sends them upstream as they are.

The core's one policy resolution decides each tool's effect, trust, privacy, TTL, validator and
observability (:func:`~forethought._core.policy.resolve`, with the runtime's policy, from the server's name and
the tool's untrusted annotations), here for the proxy's own decisions and again when the runtime opens the
session on these tools. The one write clock decides freshness: every early-allowed tool reads the proxies'
shared clock (:mod:`~forethought.mcp.sharedclock`) and every other tool writes it. A tool whose named
validator is not an early-allowed read of the same server never runs early (:attr:`Decision.early`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import Receives, ToolCall
from forethought._core.policy import Policy, Resolved, Server, ValidatorSpec, resolve
from forethought._core.tools import Tool
from forethought._core.versions import Version

log = logging.getLogger(__name__)

PARAMETERS: Mapping[str, Any] = {"type": "object"}
"""The schema every proxy tool is keyed under: any JSON object, no defaults filled in."""

ToolFunction = Callable[..., Awaitable[Any]]
ValidatorFactory = Callable[[ValidatorSpec, Mapping[str, Any]], Callable[[ToolCall], Awaitable[Any]]]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the proxy does with one upstream tool: the core's resolution, and whether it may be guessed."""

    resolved: Resolved
    early: bool
    """Whether the proxy may guess it (the resolution allows an early run, and its validator is usable)."""
    reason: str

    @property
    def private(self) -> bool:
        """Never learnt, never stored: a private tool, a tool with private arguments, or an unmatched one."""
        return self.resolved.private or bool(self.resolved.private_arguments)


def schema_of(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``tools/list`` entry's input schema (an empty object schema when it has none)."""
    schema = entry.get("inputSchema")
    return schema if isinstance(schema, Mapping) else {"type": "object", "properties": {}}


def decide(listing: Mapping[str, Mapping[str, Any]], policy: Policy, server: Server) -> dict[str, Decision]:
    """Every listed tool's decision under ``policy`` (the runtime's) for ``server``."""
    resolved = {name: resolve(policy, name, server=server, hints=entry.get("annotations"))
                for name, entry in listing.items()}
    out: dict[str, Decision] = {}
    for name, r in resolved.items():
        early, reason = r.early, r.reason
        spec = r.validator
        if spec is not None:
            guard = resolved.get(spec.tool)
            if guard is None or not guard.early or guard.effect.writes:
                if early:
                    log.warning("%s: validator %s is not an early-allowed read of this server: %s never runs early",
                                name, spec.tool, name)
                early, reason = False, f"validator {spec.tool} unusable"
        out[name] = Decision(r, early, reason)
    return out


def build_tools(listing: Mapping[str, Mapping[str, Any]], decisions: Mapping[str, Decision], ttl_s: float,
                clock: Version, fn_for: Callable[[str], ToolFunction],
                validator_for: ValidatorFactory) -> list[Tool]:
    """The core tools of ``listing``: each reads the shared ``clock`` if it may be guessed, else writes it."""
    tools = []
    for name, entry in listing.items():
        decision = decisions[name]
        spec = decision.resolved.validator
        validator = None
        if spec is not None and decision.early:
            validator = validator_for(spec, schema_of(listing[spec.tool]))
        annotations = entry.get("annotations")
        tools.append(Tool(
            name=name, fn=fn_for(name), parameters=PARAMETERS, description=str(entry.get("description", "")),
            ttl_s=ttl_s, validator=validator, receives=Receives.JSON,
            annotations=annotations if isinstance(annotations, Mapping) else None,
            reads=(clock,) if decision.early else (), writes=() if decision.early else (clock,)))
    return tools
