"""Policy: what may be speculated, how much, and when to stop.

A :class:`Policy` is a frozen value handed to the :class:`~forethought._core.runtime.Runtime`. It holds global
limits (concurrency, per-turn budgets, breaker thresholds, confidence threshold) and per-tool overrides
(effect, allow/deny, cost, TTL, expected latency, privacy). :func:`load_policy` reads one from a TOML
file and fails fast with a message that names the offending key.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from forethought._core.tools import Effect, Tool
from forethought.errors import PolicyError


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Overrides for one tool; ``None`` keeps the tool's own setting."""

    effect: Effect | None = None
    speculate: bool = True
    cost_units: float | None = None
    ttl_s: float | None = None
    private: bool = False
    private_arguments: frozenset[str] = frozenset()
    expected_s: float | None = None

    def apply(self, t: Tool) -> Tool:
        """The tool with this policy's overrides applied (privacy only ever added, never removed)."""
        changes: dict[str, Any] = {}
        if self.effect is not None:
            changes["effect"] = self.effect
        if self.cost_units is not None:
            changes["cost_units"] = self.cost_units
        if self.ttl_s is not None:
            changes["ttl_s"] = self.ttl_s
        if self.expected_s is not None:
            changes["expected_s"] = self.expected_s
        if self.private and not t.private:
            changes["private"] = True
        if not self.private_arguments <= t.private_arguments:
            changes["private_arguments"] = t.private_arguments | self.private_arguments
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

    max_concurrent: int = 16
    max_concurrent_per_session: int = 8
    max_calls_per_turn: int = 16
    max_cost_per_turn: float = 64.0
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


_DEFAULT_TOOL_POLICY = ToolPolicy()
BACKOFF_ENV = "FORETHOUGHT_BACKOFF"


def _backoff_default() -> bool:
    return os.environ.get(BACKOFF_ENV, "").strip().lower() not in ("0", "off", "false", "no")

_GLOBAL_KEYS = {f.name: f for f in fields(Policy) if f.name not in ("breaker", "tools")}
_BREAKER_KEYS = {f.name for f in fields(BreakerPolicy)}
_TOOL_KEYS = {"effect", "speculate", "cost_units", "ttl_s", "private", "private_arguments", "expected_s"}


def _number(where: str, value: Any, integer: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise PolicyError(f"{where}: expected {'an integer' if integer else 'a number'}, got {value!r}")
    return value


def policy_from_mapping(data: Mapping[str, Any], origin: str = "policy") -> Policy:
    """Build a :class:`Policy` from parsed TOML (or any mapping), naming bad keys in errors."""
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{origin}: key '{key}'"
        if key == "breaker":
            if not isinstance(value, Mapping):
                raise PolicyError(f"{where}: expected a table")
            unknown = set(value) - _BREAKER_KEYS
            if unknown:
                raise PolicyError(f"{origin}: unknown key 'breaker.{sorted(unknown)[0]}'")
            kwargs["breaker"] = BreakerPolicy(**{
                k: _number(f"{origin}: key 'breaker.{k}'", v, integer=k in ("window", "min_samples"))
                for k, v in value.items()})
        elif key == "tools":
            if not isinstance(value, Mapping):
                raise PolicyError(f"{where}: expected a table of tools")
            kwargs["tools"] = {name: _tool_policy(name, spec, origin) for name, spec in value.items()}
        elif key in ("backoff", "combine_evidence"):
            if not isinstance(value, bool):
                raise PolicyError(f"{where}: expected true or false, got {value!r}")
            kwargs[key] = value
        elif key in ("backoff_lag_ms", "backoff_load_per_core"):
            if not isinstance(value, list) or len(value) != 2:
                raise PolicyError(f"{where}: expected [low, high]")
            kwargs[key] = (float(_number(where, value[0])), float(_number(where, value[1])))
        elif key in _GLOBAL_KEYS:
            integer = key.startswith("max_concurrent") or key == "max_calls_per_turn"
            kwargs[key] = _number(where, value, integer=integer)
        else:
            raise PolicyError(f"{origin}: unknown key '{key}'")
    return Policy(**kwargs)


def _tool_policy(name: str, spec: Any, origin: str) -> ToolPolicy:
    prefix = f"{origin}: key 'tools.{name}"
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{prefix}': expected a table")
    unknown = set(spec) - _TOOL_KEYS
    if unknown:
        raise PolicyError(f"{prefix}.{sorted(unknown)[0]}': unknown key")
    kwargs: dict[str, Any] = {}
    for key, value in spec.items():
        where = f"{prefix}.{key}'"
        if key == "effect":
            try:
                kwargs["effect"] = Effect(str(value).lower())
            except ValueError:
                allowed = ", ".join(e.value for e in Effect)
                raise PolicyError(f"{where}: {value!r} is not one of {allowed}") from None
        elif key in ("speculate", "private"):
            if not isinstance(value, bool):
                raise PolicyError(f"{where}: expected true or false, got {value!r}")
            kwargs[key] = value
        elif key == "private_arguments":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise PolicyError(f"{where}: expected a list of argument names")
            kwargs[key] = frozenset(value)
        else:
            number = _number(where, value)
            if number < 0 or (key == "ttl_s" and number == 0):
                raise PolicyError(f"{where}: must be positive")
            kwargs[key] = number
    return ToolPolicy(**kwargs)


def load_policy(path: str | Path) -> Policy:
    """Read a TOML policy file; any problem raises :class:`PolicyError` naming the line or key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read policy file {p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{p}: {exc}") from None
    return policy_from_mapping(data, origin=str(p))
