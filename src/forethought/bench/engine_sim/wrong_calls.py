"""Plausible wrong tool calls for the speculator stand-in of the simulated engine.

When the stand-in misses (probability ``1 - alpha``) it must still propose something a small speculator
model could have said: either another tool of the same trajectory with arguments built from that tool's
schema (values drawn from the strings the trajectory uses, enums, small numbers), or the true tool with
one argument value changed to another value of the same kind. :class:`WrongCalls` is built once per
trajectory; every draw comes from the caller's seeded generator, so a run is reproducible.

:func:`named_arguments` maps a trajectory call's positional arguments to names with the tool's schema
(the engine streams named JSON arguments, as a model would).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from forethought._core.calls import ToolCall
from forethought.errors import WorkloadError
from forethought.predictors.trajectory import Trajectory

_SUFFIXES = ("alt", "old", "tmp", "copy")


def named_arguments(call: ToolCall, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``call``'s arguments by name: positional ones are named in the schema's property order."""
    arguments = dict(call.arguments)
    if call.positional:
        order = list((schemas.get(call.name) or {}).get("properties") or {})
        if len(order) < len(call.positional):
            raise WorkloadError(f"trajectory call {call.describe()} has positional arguments that the "
                                f"schema of {call.name!r} cannot name")
        arguments = {**dict(zip(order, call.positional, strict=False)), **arguments}
    return arguments


def _strings(value: Any, out: set[str]) -> None:
    if isinstance(value, str):
        out.add(value)
    for item in value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ():
        _strings(item, out)


def _changeable(value: Any, schema: Mapping[str, Any]) -> bool:
    enum_values = schema.get("enum")
    if enum_values:
        return any(v != value for v in enum_values)
    return value is None or isinstance(value, bool | int | float | str | list | dict)


class WrongCalls:
    """Plausible wrong calls for one trajectory: other tools, or one argument value changed."""

    def __init__(self, trajectory: Trajectory, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self.schemas = schemas
        pool: set[str] = set()
        for call in trajectory.calls:
            _strings(named_arguments(call, schemas), pool)
        self.pool = sorted(pool)

    def make(self, true_name: str, true_args: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]] | None:
        """A wrong (name, arguments) for the true call, or ``None`` when no plausible one exists."""
        others = sorted(name for name in self.schemas if name != true_name)
        changeable = [key for key in sorted(true_args)
                      if _changeable(true_args[key], self._property(true_name, key))]
        if changeable and (not others or rng.random() < 0.5):
            key = rng.choice(changeable)
            value = self._changed(true_args[key], self._property(true_name, key), rng)
            return true_name, {**true_args, key: value}
        if others:
            name = rng.choice(others)
            schema = self.schemas[name]
            required = [k for k in (schema.get("properties") or {}) if k in set(schema.get("required") or ())]
            return name, {k: self._value(schema["properties"][k], rng) for k in required}
        return None

    def _property(self, tool: str, key: str) -> Mapping[str, Any]:
        prop = ((self.schemas.get(tool) or {}).get("properties") or {}).get(key)
        return prop if isinstance(prop, Mapping) else {}

    def _value(self, schema: Mapping[str, Any], rng: random.Random) -> Any:
        if schema.get("enum"):
            return rng.choice(list(schema["enum"]))
        kind = schema.get("type")
        if kind in ("integer", "int"):
            return rng.randint(0, 10)
        if kind in ("number", "float"):
            return rng.randint(0, 100) / 10
        if kind in ("boolean", "bool"):
            return rng.random() < 0.5
        if kind in ("array", "list", "tuple"):
            return []
        if kind in ("object", "dict"):
            return {}
        return rng.choice(self.pool) if self.pool else "example"

    def _changed(self, value: Any, schema: Mapping[str, Any], rng: random.Random) -> Any:
        """A different value of the same kind, or ``None`` when there is none to give."""
        enum_values = schema.get("enum")
        if enum_values:
            options = [v for v in enum_values if v != value]
            return rng.choice(options) if options else None
        if isinstance(value, bool):
            return not value
        if isinstance(value, int):
            return value + rng.randint(1, 5)
        if isinstance(value, float):
            return value + rng.randint(1, 5) / 2
        if isinstance(value, str):
            options = [s for s in self.pool if s != value]
            if options and rng.random() < 0.5:
                return rng.choice(options)
            return f"{value}_{rng.choice(_SUFFIXES)}"
        if isinstance(value, list):
            return value[:-1] if value else [self._value(schema.get("items") or {}, rng)]
        if isinstance(value, dict):
            return {k: v for k, v in list(value.items())[:-1]} if value else {"extra": True}
        if value is None:
            return "none"
        return None
