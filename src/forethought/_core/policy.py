"""Policy: what may be speculated, how much, and when to stop — and the ONE place a tool's policy is resolved.

A :class:`Policy` is a frozen value handed to the :class:`~forethought._core.runtime.Runtime`. It holds global
limits (concurrency, per-turn budgets, breaker thresholds, confidence threshold), per-tool overrides
(effect, allow/deny, cost, TTL, expected latency, privacy, a validator, observable reads) and per-server
tables for tools that belong to a server (an MCP server's): whether its self-descriptions (``readOnlyHint``)
are believed, and its own tool overrides. :func:`load_policy` reads one from a TOML file and fails fast with
a message that names the offending key.

:func:`resolve` decides, once and for every way in, what one tool may do: from the policy plus what the edge
knows of the tool (its server's name, the effect its author declared, the hints it gives of itself). Hints
are untrusted unless the policy trusts the server. **Resolution fails closed**: where the policy names server
tables and the edge cannot say which server a tool belongs to, none of those tables can be matched, so nothing
of that tool runs early and it is private (its arguments are never learnt or stored); the resolution says so
(:attr:`Resolved.unmatched`), and the runtime reports it at start-up and in telemetry.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from forethought._core.tools import UNKNOWN_SERVER, Effect, Server, Tool
from forethought.errors import PolicyError

__all__ = ["ANY_SERVER", "BACKOFF_ENV", "UNKNOWN_SERVER", "BreakerPolicy", "Policy", "Resolved", "Server",
           "ServerPolicy", "ToolPolicy", "ValidatorSpec", "resolve"]


class _Overriding(Protocol):
    @property
    def cost_units(self) -> float | None: ...
    @property
    def ttl_s(self) -> float | None: ...
    @property
    def expected_s(self) -> float | None: ...
    @property
    def private(self) -> bool: ...
    @property
    def private_arguments(self) -> frozenset[str]: ...


def _overrides(policy: _Overriding, t: Tool) -> dict[str, Any]:
    """The changes to ``t`` that a tool's policy and a resolution both make: costs and timings where given,
    privacy only ever added."""
    changes: dict[str, Any] = {}
    if policy.cost_units is not None:
        changes["cost_units"] = policy.cost_units
    if policy.ttl_s is not None:
        changes["ttl_s"] = policy.ttl_s
    if policy.expected_s is not None:
        changes["expected_s"] = policy.expected_s
    if policy.private and not t.private:
        changes["private"] = True
    if not policy.private_arguments <= t.private_arguments:
        changes["private_arguments"] = t.private_arguments | policy.private_arguments
    return changes


@dataclass(frozen=True, slots=True)
class ValidatorSpec:
    """A read-only call of the same server whose result must not change for a speculation to be served."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """Fixed arguments of the validator call."""
    copy: tuple[str, ...] | None = None
    """Arguments copied from the speculated call (``None``: every one the validator's schema names)."""

    def arguments_for(self, call_arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
        """The validator call's arguments for a speculated call with ``call_arguments``."""
        names = self.copy
        if names is None:
            properties = schema.get("properties")
            names = tuple(properties) if isinstance(properties, Mapping) else ()
        copied = {k: call_arguments[k] for k in names if k in call_arguments}
        return {**copied, **self.arguments}


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Overrides for one tool; ``None`` keeps the tool's own setting.

    ``observable``: the tool's reads change what its server answers later (it logs, numbers, rate-limits
    or bills them), so a wrong guess would show; such a tool is speculated only where the policy accepts
    that (``accept_observable_reads``). ``None``: as its server says.
    """

    effect: Effect | None = None
    speculate: bool = True
    cost_units: float | None = None
    ttl_s: float | None = None
    private: bool = False
    private_arguments: frozenset[str] = frozenset()
    expected_s: float | None = None
    validator: ValidatorSpec | None = None
    observable: bool | None = None

    def apply(self, t: Tool) -> Tool:
        """The tool with this policy's overrides applied (privacy only ever added, never removed)."""
        changes = _overrides(self, t)
        if self.effect is not None:
            changes["effect"] = self.effect
        return replace(t, **changes) if changes else t


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When the circuit breaker turns speculation off, and for how long.

    Top-k speculation wastes k-1 of every k guesses even when the predictor is right, so the default
    opens only when almost nothing a scope speculates is used (fewer than 3 in 100 over the last 50).
    """

    window: int = 50
    min_samples: int = 20
    max_waste_rate: float = 0.97
    max_error_rate: float = 0.5
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_samples < 1:
            raise PolicyError("breaker.window and breaker.min_samples must be >= 1")
        if not (0.0 <= self.max_waste_rate <= 1.0 and 0.0 <= self.max_error_rate <= 1.0):
            raise PolicyError("breaker rates must be between 0 and 1")
        if not self.cooldown_s >= 0:
            raise PolicyError("breaker.cooldown_s must be >= 0")


@dataclass(frozen=True, slots=True)
class Policy:
    """Global speculation limits plus per-tool overrides.

    Caps (``max_concurrent`` slots in all, ``max_concurrent_per_session`` per session, ``max_calls_per_turn``
    and ``max_cost_per_turn`` per turn) bound speculative work; their defaults are sized so the independent
    calls of one code action (or one message's parallel calls) are never serialised behind a cap. What a
    guess may cost is decided by its price, not by the caps.

    Worth (see :mod:`forethought._core.pricing`): a guess is admitted only when its expected seconds saved minus
    its expected cost reach ``min_value_s``; ``waste_weight`` is what one wasted tool second (times the
    tool's cost units) costs against one saved second. Back-off: with ``backoff`` on, event-loop lag and
    the load average per core between the ``low`` and ``high`` of ``backoff_lag_ms`` and
    ``backoff_load_per_core`` raise the price of waste up to ``backoff_factor`` times, and above ``high``
    only certain guesses (P(hit) of at least 0.99) run. The load average is watched only when
    ``backoff_load_per_core`` is set (a machine busy with other work need not slow tools that run
    elsewhere); the event-loop lag, which is what delays this process's authoritative work, always is.
    ``backoff`` defaults to on unless the environment variable ``FORETHOUGHT_BACKOFF`` is ``off`` (or 0,
    false, no): a switch for test runs and measurements that must not depend on the machine's load.
    ``combine_evidence``: when a sampling predictor (a speculator model) guesses beside cheaper ones, its
    samples and their guesses are weighed together (:class:`~forethought.agent.feed.GuessFeed`): a sample's
    call the others did not propose is discounted by their coverage, and their running guesses that no
    sample proposed are re-priced and withdrawn once no longer worth their tool time (or held back until
    the samples end, when they are worth more then than at once); and as the model's
    own call streams, the step's guesses that still fit it gain their conditional chance and may run then
    (:mod:`forethought.agent.narrowing`).
    """

    max_concurrent: int = 64
    max_concurrent_per_session: int = 32
    max_calls_per_turn: int = 64
    max_cost_per_turn: float = 256.0
    min_confidence: float = 0.0
    speculation_timeout_s: float = 30.0
    claim_wait_floor_s: float = 0.5
    claim_wait_factor: float = 3.0
    waste_weight: float = 0.1
    min_value_s: float = 0.0
    backoff: bool = field(default_factory=lambda: _backoff_default())
    backoff_lag_ms: tuple[float, float] = (10.0, 60.0)
    backoff_load_per_core: tuple[float, float] | None = None
    backoff_factor: float = 10.0
    combine_evidence: bool = True
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)
    servers: Mapping[str, ServerPolicy] = field(default_factory=dict)
    """Tables of tools that belong to a server, by the server's name (``"*"``: any server)."""
    trust_servers: bool = False
    """Believe every server's hints (the MCP proxy's ``--trust``: the user vouches for the upstream)."""
    accept_observable_reads: bool = False
    """Speculate tools whose reads are observable (see :class:`ToolPolicy`); off by default."""

    def __post_init__(self) -> None:
        for name in ("max_concurrent", "max_concurrent_per_session", "max_calls_per_turn"):
            if getattr(self, name) < 0:
                raise PolicyError(f"{name} must be >= 0")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise PolicyError("min_confidence must be between 0 and 1")
        if not self.speculation_timeout_s > 0:
            raise PolicyError("speculation_timeout_s must be > 0")
        for name in ("max_cost_per_turn", "claim_wait_floor_s", "claim_wait_factor", "waste_weight",
                     "backoff_factor"):
            if not getattr(self, name) >= 0:
                raise PolicyError(f"{name} must be >= 0")
        if math.isnan(self.min_value_s):
            raise PolicyError("min_value_s must be a number")
        for name in ("backoff_lag_ms", "backoff_load_per_core"):
            pair = getattr(self, name)
            if pair is None and name == "backoff_load_per_core":
                continue
            if len(pair) != 2 or not 0 <= pair[0] <= pair[1]:
                raise PolicyError(f"{name} must be [low, high] with 0 <= low <= high")

    def for_tool(self, name: str) -> ToolPolicy:
        return self.tools.get(name, _DEFAULT_TOOL_POLICY)

    def server(self, name: str) -> ServerPolicy:
        """The table of server ``name``: its own, else ``"*"``, else the default (untrusted); trusted under
        ``trust_servers``."""
        found = self.servers.get(name) or self.servers.get(ANY_SERVER) or _DEFAULT_SERVER_POLICY
        return replace(found, trusted=True) if self.trust_servers and not found.trusted else found

    def named_servers(self) -> tuple[str, ...]:
        """The servers this policy has a table for by name (``"*"`` left out)."""
        return tuple(sorted(name for name in self.servers if name != ANY_SERVER))


@dataclass(frozen=True, slots=True)
class ServerPolicy:
    """How far to trust one server's tools, and per-tool overrides for them.

    ``trusted``: its tools' ``readOnlyHint`` annotations are believed (hints are untrusted otherwise).
    ``observable_reads``: its reads change what it answers later (see :class:`ToolPolicy`).
    ``validators``: tool name -> the validator the policy names for it.
    """

    trusted: bool = False
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)
    validators: Mapping[str, ValidatorSpec] = field(default_factory=dict)
    observable_reads: bool = False


ANY_SERVER = "*"
_DEFAULT_TOOL_POLICY = ToolPolicy()
_DEFAULT_SERVER_POLICY = ServerPolicy()




@dataclass(frozen=True, slots=True)
class Resolved:
    """What the policy decides for one tool: its effect, whether it may run early at all, its overrides.

    ``reason`` says where the effect came from; ``unmatched`` is non-empty when resolution failed closed
    (a policy table could not be matched) and says why.
    """

    effect: Effect
    speculate: bool
    reason: str
    cost_units: float | None = None
    ttl_s: float | None = None
    expected_s: float | None = None
    private: bool = False
    private_arguments: frozenset[str] = frozenset()
    validator: ValidatorSpec | None = None
    observable: bool = False
    unmatched: str = ""

    @property
    def early(self) -> bool:
        """Whether the tool may ever run before its call (a snapshot state permitting, for ISOLATED_WRITE)."""
        return self.speculate and self.effect in (Effect.PURE, Effect.READ_ONLY, Effect.ISOLATED_WRITE)

    def apply(self, t: Tool) -> Tool:
        """``t`` with these decisions applied (privacy only ever added and speculation only ever turned off, so
        resolving an already resolved tool again never grants it more)."""
        changes = _overrides(self, t)
        if self.effect is not t.effect:
            changes["effect"] = self.effect
        if not self.speculate and t.speculate:  # like privacy, only ever taken away (never fails open)
            changes["speculate"] = False
        return replace(t, **changes) if changes else t


def resolve(policy: Policy, name: str, *, server: Server = None, declared: Effect = Effect.DESTRUCTIVE,
            hints: Any = None) -> Resolved:
    """What ``policy`` decides for tool ``name`` (the one resolution every way in uses).

    ``server``: the server the tool belongs to (``None`` for a tool of the user's own code, whose
    ``declared`` effect its author chose; a server's tools declare nothing, their ``hints`` — MCP
    annotations — count only where the server is trusted). The tool's table is its server's
    ``[servers.S.tools.NAME]``, else the top-level ``[tools.NAME]``.
    """
    if server is UNKNOWN_SERVER and policy.named_servers():
        named = ", ".join(policy.named_servers())
        return Resolved(Effect.DESTRUCTIVE, False, "policy unmatched", private=True,
                        unmatched=f"the policy has tables for servers {named}, but this tool's server did not "
                                  "say its name: nothing of it runs early and it stays private")
    if server is None:
        override = policy.tools.get(name)
        base, reason = declared, "declared by the tool"
        table: ServerPolicy | None = None
    else:
        table = policy.server(server if isinstance(server, str) else ANY_SERVER)
        override = table.tools.get(name) or policy.tools.get(name)
        read_only = isinstance(hints, Mapping) and hints.get("readOnlyHint") is True
        if read_only and table.trusted:
            base, reason = Effect.READ_ONLY, "readOnlyHint on a trusted server"
        elif read_only:
            base, reason = Effect.DESTRUCTIVE, "readOnlyHint on an untrusted server"
        else:
            base, reason = Effect.DESTRUCTIVE, "no read-only hint"
    if override is None:
        override = _DEFAULT_TOOL_POLICY
    effect = base
    if override.effect is not None:
        effect, reason = override.effect, "policy"
    speculate = override.speculate
    observable = override.observable if override.observable is not None else (
        table.observable_reads if table is not None else False)
    if observable and not policy.accept_observable_reads and speculate:
        speculate, reason = False, reason + "; reads are observable and the policy does not accept that"
    validator = override.validator or (table.validators.get(name) if table is not None else None)
    return Resolved(effect, speculate, reason, override.cost_units, override.ttl_s, override.expected_s,
                    override.private, override.private_arguments, validator, observable)
BACKOFF_ENV = "FORETHOUGHT_BACKOFF"


def _backoff_default() -> bool:
    return os.environ.get(BACKOFF_ENV, "").strip().lower() not in ("0", "off", "false", "no")
