"""Effects of an upstream server's tools: what may run before the client asks, decided by policy.

The MCP specification calls tool annotations untrusted, so a hint alone never makes a tool run early:
``readOnlyHint: true`` makes a tool READ_ONLY only on a server the policy marks ``trusted``. Idempotent or
non-destructive hints never make a tool read-only, and a tool with no hint (or an untrusted server's tool)
is DESTRUCTIVE, which never runs early. The policy can override any tool's effect, deny it speculation, and
set its TTL, cost units and privacy (a private tool's arguments and results are never learned), and name
a *validator*: a read-only tool of the same server whose result must be unchanged between the start of a
speculation and its claim for the speculated result to be served (``validator = "git_status"``: the
validator gets the call's arguments its schema names; or a table ``{tool = "git_status", arguments = {...},
copy = ["repo_path"]}``: fixed arguments plus the named ones copied from the call).

A policy file is TOML: forethought's runtime policy keys at the top level, an ``[mcp]`` table with the
proxy's own settings, and one ``[servers.NAME]`` table per upstream server (``"*"`` for any server)::

    [mcp]
    guesses = 1
    min_confidence = 0.2
    max_upstream_ratio = 1.5
    hedge_factor = 2.0

    [servers.sqlite]
    trusted = true
    [servers.sqlite.tools.read_query]
    ttl_s = 10
    [servers.git.tools.git_diff_unstaged]
    validator = "git_status"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from forethought._core.policy import Policy, ToolPolicy
from forethought._core.policy_file import policy_from_mapping
from forethought._core.tools import Effect
from forethought.errors import PolicyError
from forethought.mcp.errors import McpPolicyError

ANY_SERVER = "*"
DEFAULT_GUESSES = 1
DEFAULT_MIN_CONFIDENCE = 0.2
DEFAULT_TTL_S = 30.0
DEFAULT_MAX_UPSTREAM_RATIO = 1.5
DEFAULT_HEDGE_FACTOR = 2.0
DEFAULT_RESULTS_PER_TURN = 1


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
class ServerPolicy:
    """How far the proxy trusts one upstream server, and per-tool overrides."""

    trusted: bool = False
    """Whether the server's ``readOnlyHint`` annotations are believed."""
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)
    validators: Mapping[str, ValidatorSpec] = field(default_factory=dict)
    """Tool name -> the validator the policy names for it."""


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """The proxy's own knobs: how many guesses it runs after each result and how sure it must be."""

    guesses: int = DEFAULT_GUESSES
    """Speculations launched after each result (the most confident executable predictions)."""
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    """Predictions less confident than this are not run."""
    ttl_s: float = DEFAULT_TTL_S
    """How long a speculated result stays servable unless a tool's policy says otherwise."""
    max_upstream_ratio: float = DEFAULT_MAX_UPSTREAM_RATIO
    """The most upstream requests (guesses and validators included) per client call of a session."""
    hedge_factor: float = DEFAULT_HEDGE_FACTOR
    """A client's call that finds its guess still running sends its own request once the guess has run this
    many times the tool's measured runtime (0: at once; see :mod:`~forethought.mcp.race`)."""
    results_per_turn: int = DEFAULT_RESULTS_PER_TURN
    """Results one runtime turn spans. A turn's end discards its unclaimed guesses, so with 1 only the
    client's next call may claim a guess. With more, a later call of the same turn may claim it too, as
    long as its TTL, the writes and the write clock allow."""

    def __post_init__(self) -> None:
        if self.guesses < 0:
            raise McpPolicyError("mcp.guesses must be >= 0")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise McpPolicyError("mcp.min_confidence must be between 0 and 1")
        if not self.ttl_s > 0:
            raise McpPolicyError("mcp.ttl_s must be > 0")
        if not self.max_upstream_ratio >= 1.0:
            raise McpPolicyError("mcp.max_upstream_ratio must be >= 1")
        if not 0.0 <= self.hedge_factor < float("inf"):
            raise McpPolicyError("mcp.hedge_factor must be a number >= 0")
        if self.results_per_turn < 1:
            raise McpPolicyError("mcp.results_per_turn must be >= 1")


@dataclass(frozen=True, slots=True)
class McpPolicy:
    """Everything the proxy's policy file says: runtime limits, proxy settings, servers."""

    runtime: Policy = field(default_factory=Policy)
    settings: ProxySettings = field(default_factory=ProxySettings)
    servers: Mapping[str, ServerPolicy] = field(default_factory=dict)
    trust_all: bool = False
    """Trust every server's read-only hints (the ``--trust`` flag: the user vouches for the upstream)."""

    def server(self, name: str) -> ServerPolicy:
        """The policy of server ``name`` (its own table, else ``"*"``, else untrusted)."""
        found = self.servers.get(name) or self.servers.get(ANY_SERVER) or ServerPolicy()
        return replace(found, trusted=True) if self.trust_all else found

    def runtime_for(self, name: str) -> Policy:
        """The runtime policy for a proxy in front of server ``name`` (its tool overrides included)."""
        return replace(self.runtime, tools=dict(self.server(name).tools))

    def trusting(self) -> McpPolicy:
        """This policy with every server trusted (the ``--trust`` flag)."""
        return replace(self, trust_all=True)


@dataclass(frozen=True, slots=True)
class ToolEffect:
    """The decision for one tool: its effect, whether it may run early, and why."""

    effect: Effect
    speculate: bool
    ttl_s: float
    private: bool
    reason: str
    cost_units: float = 1.0

    @property
    def early(self) -> bool:
        """Whether the tool may ever run before the client asks for it."""
        return self.speculate and self.effect in (Effect.PURE, Effect.READ_ONLY)


def decide(tool: Mapping[str, Any], server: ServerPolicy, settings: ProxySettings) -> ToolEffect:
    """The effect of one upstream tool (a ``tools/list`` entry) under ``server``'s policy."""
    name = str(tool.get("name", ""))
    override = server.tools.get(name)
    ttl = override.ttl_s if override is not None and override.ttl_s is not None else settings.ttl_s
    private = override.private if override is not None else False
    speculate = override.speculate if override is not None else True
    cost = override.cost_units if override is not None and override.cost_units is not None else 1.0
    if override is not None and override.effect is not None:
        return ToolEffect(override.effect, speculate, ttl, private, "policy", cost)
    annotations = tool.get("annotations")
    read_only = isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
    if read_only and server.trusted:
        return ToolEffect(Effect.READ_ONLY, speculate, ttl, private, "readOnlyHint on a trusted server", cost)
    if read_only:
        return ToolEffect(Effect.DESTRUCTIVE, speculate, ttl, private, "readOnlyHint on an untrusted server", cost)
    return ToolEffect(Effect.DESTRUCTIVE, speculate, ttl, private, "no read-only hint", cost)


_SERVER_KEYS = {"trusted", "tools"}
_SETTING_KEYS = {"guesses": int, "min_confidence": float, "ttl_s": float, "max_upstream_ratio": float,
                 "hedge_factor": float, "results_per_turn": int}


def policy_from_data(data: Mapping[str, Any], origin: str = "policy") -> McpPolicy:
    """Build an :class:`McpPolicy` from parsed TOML, naming the offending key in any error."""
    rest = {k: v for k, v in data.items() if k not in ("mcp", "servers")}
    runtime = policy_from_mapping(rest, origin)
    settings = _settings(data.get("mcp", {}), origin)
    raw_servers = data.get("servers", {})
    if not isinstance(raw_servers, Mapping):
        raise McpPolicyError(f"{origin}: key 'servers': expected a table of servers")
    servers = {name: _server(name, spec, origin) for name, spec in raw_servers.items()}
    return McpPolicy(runtime, settings, servers)


def _settings(raw: Any, origin: str) -> ProxySettings:
    if not isinstance(raw, Mapping):
        raise McpPolicyError(f"{origin}: key 'mcp': expected a table")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        kind = _SETTING_KEYS.get(key)
        if kind is None:
            raise McpPolicyError(f"{origin}: unknown key 'mcp.{key}'")
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and
                                                                            not isinstance(value, int)):
            raise McpPolicyError(f"{origin}: key 'mcp.{key}': expected a number, got {value!r}")
        kwargs[key] = kind(value)
    return ProxySettings(**kwargs)


def _server(name: str, spec: Any, origin: str) -> ServerPolicy:
    where = f"{origin}: key 'servers.{name}"
    if not isinstance(spec, Mapping):
        raise McpPolicyError(f"{where}': expected a table")
    unknown = set(spec) - _SERVER_KEYS
    if unknown:
        raise McpPolicyError(f"{where}.{sorted(unknown)[0]}': unknown key")
    trusted = spec.get("trusted", False)
    if not isinstance(trusted, bool):
        raise McpPolicyError(f"{where}.trusted': expected true or false, got {trusted!r}")
    raw_tools = spec.get("tools", {})
    if not isinstance(raw_tools, Mapping):
        raise McpPolicyError(f"{where}.tools': expected a table of tools")
    validators: dict[str, ValidatorSpec] = {}
    plain: dict[str, Any] = {}
    for tool, table in raw_tools.items():
        if isinstance(table, Mapping) and "validator" in table:
            validators[tool] = _validator(table["validator"], f"{where}.tools.{tool}.validator'")
            table = {k: v for k, v in table.items() if k != "validator"}
        plain[tool] = table
    try:
        tools = policy_from_mapping({"tools": plain}, f"{origin} (servers.{name})").tools
    except PolicyError as exc:
        raise McpPolicyError(str(exc)) from None
    return ServerPolicy(trusted, dict(tools), validators)


_VALIDATOR_KEYS = {"tool", "arguments", "copy"}


def _validator(raw: Any, where: str) -> ValidatorSpec:
    if isinstance(raw, str) and raw:
        return ValidatorSpec(raw)
    if not isinstance(raw, Mapping):
        raise McpPolicyError(f"{where}: expected a tool name or a table with 'tool'")
    unknown = set(raw) - _VALIDATOR_KEYS
    if unknown:
        raise McpPolicyError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    tool, arguments, copy = raw.get("tool"), raw.get("arguments", {}), raw.get("copy")
    if not isinstance(tool, str) or not tool:
        raise McpPolicyError(f"{where}: 'tool' must name a tool of the same server")
    if not isinstance(arguments, Mapping):
        raise McpPolicyError(f"{where}: 'arguments' must be a table")
    if copy is not None and (not isinstance(copy, list) or not all(isinstance(c, str) for c in copy)):
        raise McpPolicyError(f"{where}: 'copy' must be a list of argument names")
    return ValidatorSpec(tool, dict(arguments), tuple(copy) if copy is not None else None)


def load_mcp_policy(path: str | Path | None) -> McpPolicy:
    """Read an MCP proxy policy file (``None``: the defaults, which trust no server)."""
    if path is None:
        return McpPolicy()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpPolicyError(f"cannot read policy file {p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise McpPolicyError(f"{p}: {exc}") from None
    return policy_from_data(data, origin=str(p))
