"""The proxy's policy: the core's one policy resolution, plus the knobs only a proxy has.

What an upstream tool may do is decided by the core (:func:`~forethought._core.policy.resolve`), from the
policy, the server's name and the tool's annotations: the MCP specification calls annotations untrusted, so
``readOnlyHint: true`` makes a tool READ_ONLY only on a server the policy trusts (``--trust``, or ``trusted
= true`` in its ``[servers.NAME]`` table); no hint, or an untrusted server, means DESTRUCTIVE, which never
runs early. The policy can override any tool's effect, deny it speculation, set its TTL, cost and privacy,
name a validator, and say that a tool's or a server's reads are observable (such tools run early only where
the policy accepts that). Where the proxy could not learn the upstream's name and the policy has tables for
named servers, resolution fails closed (nothing runs early, everything is private) and says so.

This module holds what is the proxy's own: :class:`ProxySettings` (the ``[mcp]`` table of a policy file)
and :class:`McpPolicy`, the value the proxy is configured with (a core :class:`~forethought._core.policy.Policy`
and the settings). A policy file is TOML: the runtime's keys (``[servers.*]`` and ``[tools.*]`` tables
included) as :func:`~forethought._core.policy_file.policy_from_mapping` reads them, and an ``[mcp]`` table
(a ``[daemon]`` table is ``forethought serve``'s, and ignored here)::

    accept_observable_reads = false

    [mcp]
    guesses = 1
    min_confidence = 0.2
    max_upstream_ratio = 1.15

    [servers.sqlite]
    trusted = true
    [servers.sqlite.tools.read_query]
    effect = "read_only"
    [servers.mcp-git.tools.git_diff_unstaged]
    validator = "git_status"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from forethought._core.policy import Policy, Resolved, Server, resolve
from forethought._core.policy_file import policy_from_mapping, read_policy_file
from forethought.errors import PolicyError
from forethought.mcp.errors import McpPolicyError

DEFAULT_GUESSES = 1
DEFAULT_MIN_CONFIDENCE = 0.2
DEFAULT_TTL_S = 30.0
DEFAULT_MAX_UPSTREAM_RATIO = 1.15
DEFAULT_UPSTREAM_SLACK = 0
DEFAULT_HEDGE_FACTOR = 2.0
DEFAULT_RESULTS_PER_TURN = 1
DEFAULT_ABANDONED_S = 30.0
DEFAULT_NAME_WAIT_S = 10.0
DEFAULT_GUESS_OVERHEAD_MS = 2.0


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
    """The most upstream requests (guesses and validators included) per client call of a session ..."""
    upstream_slack: int = DEFAULT_UPSTREAM_SLACK
    """... plus this many: a session's calls find at most ``ratio * calls + slack`` requests sent upstream, plus
    what earlier sessions of the tool set left unspent (at most two requests; see ``SessionSpeculator.
    within_bound``), so a short session can guess once sessions before it have earned it."""
    hedge_factor: float = DEFAULT_HEDGE_FACTOR
    """A client's call that finds its guess still running sends its own request once the guess has run this
    many times the tool's measured runtime (0: at once; see :mod:`~forethought.mcp.race`)."""
    results_per_turn: int = DEFAULT_RESULTS_PER_TURN
    """Results one runtime turn spans. A turn's end discards its unclaimed guesses, so with 1 only the
    client's next call may claim a guess. With more, a later call of the same turn may claim it too, as
    long as its TTL and the write clock allow."""
    abandoned_s: float = DEFAULT_ABANDONED_S
    """How long a request the client cancelled still counts as running (a write in progress) when the
    upstream never answers it: a server is asked not to answer a cancelled request, and this bounds how
    long it may hold every guess unservable."""
    name_wait_s: float = DEFAULT_NAME_WAIT_S
    """How long the proxy waits to learn the upstream's name before it resolves the policy without it
    (failing closed where the policy has tables for named servers)."""
    guess_overhead_ms: float = DEFAULT_GUESS_OVERHEAD_MS
    """What one guess costs beyond the server's work (:mod:`~forethought.mcp.calibration`): a tool that
    answers faster never runs early, and every guess must be expected to save more than this."""

    def __post_init__(self) -> None:
        if self.guesses < 0:
            raise McpPolicyError("mcp.guesses must be >= 0")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise McpPolicyError("mcp.min_confidence must be between 0 and 1")
        if not self.ttl_s > 0:
            raise McpPolicyError("mcp.ttl_s must be > 0")
        if not self.max_upstream_ratio >= 1.0:
            raise McpPolicyError("mcp.max_upstream_ratio must be >= 1")
        if self.upstream_slack < 0:
            raise McpPolicyError("mcp.upstream_slack must be >= 0")
        if not 0.0 <= self.hedge_factor < float("inf"):
            raise McpPolicyError("mcp.hedge_factor must be a number >= 0")
        if self.results_per_turn < 1:
            raise McpPolicyError("mcp.results_per_turn must be >= 1")
        for name in ("abandoned_s", "name_wait_s", "guess_overhead_ms"):
            if not 0.0 <= getattr(self, name) < float("inf"):
                raise McpPolicyError(f"mcp.{name} must be a number >= 0")


@dataclass(frozen=True, slots=True)
class McpPolicy:
    """Everything the proxy's policy file says: the core's policy (servers and tools included) and the
    proxy's settings."""

    runtime: Policy = field(default_factory=Policy)
    settings: ProxySettings = field(default_factory=ProxySettings)

    def trusting(self) -> McpPolicy:
        """This policy with every server trusted (the ``--trust`` flag)."""
        return replace(self, runtime=replace(self.runtime, trust_servers=True))

    def accepting_observable_reads(self) -> McpPolicy:
        """This policy speculating tools whose reads are observable (``--accept-observable-reads``)."""
        return replace(self, runtime=replace(self.runtime, accept_observable_reads=True))

    def resolve(self, entry: Mapping[str, Any], server: Server) -> Resolved:
        """What the core's policy resolution decides for one upstream tool (a ``tools/list`` entry) of
        ``server`` (its name, or :data:`~forethought._core.policy.UNKNOWN_SERVER`)."""
        return resolve(self.runtime, str(entry.get("name", "")), server=server, hints=entry.get("annotations"))


_SETTING_KEYS = {"guesses": int, "min_confidence": float, "ttl_s": float, "max_upstream_ratio": float,
                 "upstream_slack": int,
                 "hedge_factor": float, "results_per_turn": int, "abandoned_s": float, "name_wait_s": float,
                 "guess_overhead_ms": float}


DAEMON_TABLE = "daemon"
"""The ``[daemon]`` table of a policy file: ``forethought serve``'s to read and check, ignored here (so one file
can configure both)."""


def policy_from_data(data: Mapping[str, Any], origin: str = "policy") -> McpPolicy:
    """Build an :class:`McpPolicy` from parsed TOML, naming the offending key in any error (the ``[daemon]``
    table is left to the daemon)."""
    rest = {k: v for k, v in data.items() if k not in ("mcp", DAEMON_TABLE)}
    try:
        runtime = policy_from_mapping(rest, origin)
    except McpPolicyError:
        raise
    except PolicyError as exc:
        raise McpPolicyError(str(exc)) from None
    return McpPolicy(runtime, _settings(data.get("mcp", {}), origin))


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


def load_mcp_policy(path: str | Path | None) -> McpPolicy:
    """Read an MCP proxy policy file (``None``: the defaults, which trust no server)."""
    if path is None:
        return McpPolicy()
    return policy_from_data(read_policy_file(path, McpPolicyError), origin=str(path))
