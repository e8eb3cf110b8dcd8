"""Reading a policy from a TOML file (or any mapping): every key checked, every error naming its key.

:func:`load_policy` reads a file, :func:`policy_from_mapping` builds a :class:`~forethought._core.policy.Policy`
from parsed data. Besides the runtime's own keys, a file may hold ``[tools.NAME]`` tables (per-tool
overrides) and ``[servers.NAME]`` tables (``"*"`` for any server: ``trusted``, ``observable_reads``, and
``[servers.NAME.tools.TOOL]`` overrides, which may name a ``validator``). Keys an edge owns (the MCP proxy's
``[mcp]`` table) are the edge's to read: it passes the rest here.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from forethought._core.policy import BreakerPolicy, Policy, ServerPolicy, ToolPolicy, ValidatorSpec
from forethought._core.tools import Effect
from forethought.errors import PolicyError

__all__ = ["load_policy", "policy_from_mapping", "read_policy_file"]

_GLOBAL_KEYS = {f.name: f for f in fields(Policy) if f.name not in ("breaker", "tools", "servers")}
_BREAKER_KEYS = {f.name for f in fields(BreakerPolicy)}
_TOOL_KEYS = {"effect", "speculate", "cost_units", "ttl_s", "private", "private_arguments", "expected_s",
              "validator", "observable"}
_SERVER_KEYS = {"trusted", "tools", "observable_reads"}
_VALIDATOR_KEYS = {"tool", "arguments", "copy"}
_FLAGS = ("backoff", "combine_evidence", "trust_servers", "accept_observable_reads")


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
        elif key == "servers":
            if not isinstance(value, Mapping):
                raise PolicyError(f"{where}: expected a table of servers")
            kwargs["servers"] = {name: _server(name, spec, origin) for name, spec in value.items()}
        elif key in _FLAGS:
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


def _server(name: str, spec: Any, origin: str) -> ServerPolicy:
    where = f"{origin}: key 'servers.{name}"
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where}': expected a table")
    unknown = set(spec) - _SERVER_KEYS
    if unknown:
        raise PolicyError(f"{where}.{sorted(unknown)[0]}': unknown key")
    flags: dict[str, bool] = {}
    for flag in ("trusted", "observable_reads"):
        value = spec.get(flag, False)
        if not isinstance(value, bool):
            raise PolicyError(f"{where}.{flag}': expected true or false, got {value!r}")
        flags[flag] = value
    raw_tools = spec.get("tools", {})
    if not isinstance(raw_tools, Mapping):
        raise PolicyError(f"{where}.tools': expected a table of tools")
    tools = {tool: _tool_policy(tool, table, origin, f"servers.{name}.tools.{tool}")
             for tool, table in raw_tools.items()}
    validators = {tool: p.validator for tool, p in tools.items() if p.validator is not None}
    return ServerPolicy(flags["trusted"], tools, validators, flags["observable_reads"])


def _validator(raw: Any, where: str) -> ValidatorSpec:
    if isinstance(raw, str) and raw:
        return ValidatorSpec(raw)
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: expected a tool name or a table with 'tool'")
    unknown = set(raw) - _VALIDATOR_KEYS
    if unknown:
        raise PolicyError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    tool, arguments, copy = raw.get("tool"), raw.get("arguments", {}), raw.get("copy")
    if not isinstance(tool, str) or not tool:
        raise PolicyError(f"{where}: 'tool' must name a tool of the same server")
    if not isinstance(arguments, Mapping):
        raise PolicyError(f"{where}: 'arguments' must be a table")
    if copy is not None and (not isinstance(copy, list) or not all(isinstance(c, str) for c in copy)):
        raise PolicyError(f"{where}: 'copy' must be a list of argument names")
    return ValidatorSpec(tool, dict(arguments), tuple(copy) if copy is not None else None)


def _tool_policy(name: str, spec: Any, origin: str, path: str | None = None) -> ToolPolicy:
    prefix = f"{origin}: key '{path or 'tools.' + name}"
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
        elif key == "validator":
            kwargs["validator"] = _validator(value, where)
        elif key in ("speculate", "private", "observable"):
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


def read_policy_file(path: str | Path, error: type[PolicyError] = PolicyError) -> dict[str, Any]:
    """The parsed TOML of a policy file; an unreadable or malformed file raises ``error`` (one line naming the
    file, and the line of a syntax error). Every way in reads policy files through this."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read policy file {p}: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{p}: {exc}") from None


def load_policy(path: str | Path) -> Policy:
    """Read a TOML policy file; any problem raises :class:`PolicyError` naming the line or key."""
    return policy_from_mapping(read_policy_file(path), origin=str(path))
