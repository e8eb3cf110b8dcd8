"""Tool calls and their canonical keys.

A :class:`ToolCall` is what a model (or a predictor) asks for: a tool name and JSON arguments. Two calls
that a tool cannot tell apart must get the same key, and any real difference must give a different key; a
speculation is served only to an authoritative call with the identical key.

Canonicalisation is schema-aware and compiled once per tool (:func:`compile_arguments`):

* key order is irrelevant;
* numbers equal under JSON semantics are equal where the schema says ``number``/``integer``
  (``1`` and ``1.0`` key alike), elsewhere their JSON spelling is kept;
* schema defaults are filled in before keying;
* positional arguments are mapped to names in the schema's parameter order;
* strings are never altered.

Invalid input raises :class:`~forethought.errors.InvalidArgumentsError` with a message that names the
argument path, never a crash deeper in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.errors import InvalidArgumentsError

JSONValue = Any
"""A JSON value as Python holds it (dict, list, str, int, float, bool, None)."""

CallKey = str
"""A canonical call key: the tool name and its canonical argument JSON."""

KEY_SEPARATOR = "\x1f"

_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A request to run tool ``name`` with ``arguments`` (and, rarely, positional values).

    ``positional`` holds values given without a name (``cd('docs')``); they are mapped to parameter names
    by the tool's schema when the call is keyed.
    """

    name: str
    arguments: Mapping[str, JSONValue] = field(default_factory=dict)
    positional: tuple[JSONValue, ...] = ()

    def __hash__(self) -> int:
        try:
            return hash((self.name, _dumps(self.arguments), _dumps(list(self.positional))))
        except (TypeError, ValueError):
            return hash((self.name, repr(self.arguments), repr(self.positional)))

    def describe(self) -> str:
        """A short human-readable rendering, e.g. ``cd(folder='docs')``."""
        parts = [repr(v) for v in self.positional]
        parts += [f"{k}={v!r}" for k, v in self.arguments.items()]
        return f"{self.name}({', '.join(parts)})"


Normalizer = Callable[[Any, str], Any]
"""Checks and normalises one value; the second argument is its path for error messages."""


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _fail(path: str, message: str) -> InvalidArgumentsError:
    return InvalidArgumentsError(f"argument {path or '(root)'}: {message}")


def _normalize_any(value: Any, path: str) -> Any:
    """Check that ``value`` is plain JSON (finite numbers, string keys); keep its spelling."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(path, f"{value!r} is not a JSON number")
        return value
    if isinstance(value, list | tuple):
        return [_normalize_any(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _fail(path, f"object key {k!r} is not a string")
            out[k] = _normalize_any(v, f"{path}.{k}" if path else k)
        return out
    raise _fail(path, f"{type(value).__name__} is not a JSON value")


def _number(integer: bool) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(path, f"expected {'integer' if integer else 'number'}, got {_type_name(value)}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _fail(path, f"{value!r} is not a JSON number")
            if value.is_integer():
                return int(value)
            if integer:
                raise _fail(path, f"expected integer, got {value!r}")
        return value

    return normalize


def _simple(expected: str, check: Callable[[Any], bool]) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        if not check(value):
            raise _fail(path, f"expected {expected}, got {_type_name(value)}")
        return value

    return normalize


_TYPE_ALIASES = {"dict": "object", "float": "number", "int": "integer", "bool": "boolean", "list": "array",
                 "tuple": "array", "str": "string", "any": None}


def _normalize_object(properties: dict[str, Normalizer], required: frozenset[str],
                      defaults: dict[str, Any], extra: Normalizer | None, closed: bool) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _fail(path, f"expected object, got {_type_name(value)}")
        missing = required.difference(value)
        if missing:
            raise _fail(path, f"missing required {', '.join(sorted(missing))}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _fail(path, f"object key {key!r} is not a string")
            sub = f"{path}.{key}" if path else key
            norm = properties.get(key)
            if norm is None:
                if closed:
                    raise _fail(sub, "is not a parameter of this tool")
                norm = extra or _normalize_any
            out[key] = norm(item, sub)
        for key, default in defaults.items():
            if key not in out:
                out[key] = default
        return out

    return normalize


def _first_of(options: list[Normalizer]) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        errors = []
        for option in options:
            try:
                return option(value, path)
            except InvalidArgumentsError as exc:
                errors.append(str(exc))
        raise _fail(path, "matches none of the allowed forms (" + "; ".join(errors) + ")")

    return normalize


def compile_schema(schema: Mapping[str, Any] | None) -> Normalizer:
    """Compile a JSON schema (the subset tools use) into a fast normaliser for one value."""
    if not schema:
        return _normalize_any
    if "anyOf" in schema or "oneOf" in schema:
        return _first_of([compile_schema(s) for s in schema.get("anyOf", schema.get("oneOf", []))])
    raw_type = schema.get("type")
    if isinstance(raw_type, list):
        return _first_of([compile_schema({**schema, "type": t}) for t in raw_type])
    kind = _TYPE_ALIASES.get(raw_type, raw_type) if isinstance(raw_type, str) else None
    base: Normalizer
    if kind == "number":
        base = _number(integer=False)
    elif kind == "integer":
        base = _number(integer=True)
    elif kind == "string":
        base = _simple("string", lambda v: isinstance(v, str))
    elif kind == "boolean":
        base = _simple("boolean", lambda v: isinstance(v, bool))
    elif kind == "null":
        base = _simple("null", lambda v: v is None)
    elif kind == "array":
        item = compile_schema(schema.get("items"))

        def base(value: Any, path: str) -> Any:
            if not isinstance(value, list | tuple):
                raise _fail(path, f"expected array, got {_type_name(value)}")
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
    elif kind == "object" or (kind is None and "properties" in schema):
        props_schema = schema.get("properties") or {}
        properties = {name: compile_schema(sub) for name, sub in props_schema.items()}
        required = frozenset(schema.get("required", ()))
        defaults = {name: _normalize_any(sub["default"], name) for name, sub in props_schema.items()
                    if isinstance(sub, dict) and "default" in sub and name not in required}
        additional = schema.get("additionalProperties", True)
        extra = compile_schema(additional) if isinstance(additional, dict) else None
        base = _normalize_object(properties, required, defaults, extra, closed=additional is False)
    elif kind is None:
        base = _normalize_any
    else:
        raise InvalidArgumentsError(f"schema type {raw_type!r} is not supported")
    enum = schema.get("enum")
    if enum is None:
        return base
    allowed = [base(v, "enum") for v in enum]
    allowed_keys = {_dumps(v) for v in allowed}

    def with_enum(value: Any, path: str) -> Any:
        out = base(value, path)
        if _dumps(out) not in allowed_keys:
            raise _fail(path, f"{value!r} is not one of {allowed!r}")
        return out

    return with_enum


@dataclass(frozen=True, slots=True)
class ArgumentSpec:
    """How one tool's arguments are checked, normalised and keyed (built once per tool)."""

    tool: str
    parameter_order: tuple[str, ...]
    normalize: Normalizer

    def canonical_arguments(self, call: ToolCall) -> dict[str, Any]:
        """Return the call's arguments as named, validated, defaulted JSON values."""
        arguments = call.arguments
        if not isinstance(arguments, Mapping):
            raise InvalidArgumentsError(
                f"{self.tool}: arguments must be a JSON object, got {_type_name(arguments)}")
        if call.positional:
            if len(call.positional) > len(self.parameter_order):
                raise InvalidArgumentsError(
                    f"{self.tool}: {len(call.positional)} positional arguments given, "
                    f"the tool takes at most {len(self.parameter_order)}")
            named = dict(zip(self.parameter_order, call.positional, strict=False))
            clash = named.keys() & arguments.keys()
            if clash:
                raise InvalidArgumentsError(
                    f"{self.tool}: argument {sorted(clash)[0]!r} given both by position and by name")
            arguments = {**named, **arguments}
        try:
            result: dict[str, Any] = self.normalize(dict(arguments), "")
        except InvalidArgumentsError as exc:
            raise InvalidArgumentsError(f"{self.tool}: {exc}") from None
        return result

    def key(self, call: ToolCall) -> CallKey:
        """The canonical key of ``call``: equal exactly when the tool cannot tell the calls apart."""
        return call.name + KEY_SEPARATOR + _dumps(self.canonical_arguments(call))


def compile_arguments(tool: str, parameters: Mapping[str, Any] | None,
                      parameter_order: Sequence[str] | None = None) -> ArgumentSpec:
    """Build the :class:`ArgumentSpec` for a tool from its JSON-schema ``parameters``."""
    schema = dict(parameters or {"type": "object", "properties": {}})
    order = tuple(parameter_order) if parameter_order is not None else tuple(schema.get("properties", {}))
    return ArgumentSpec(tool=tool, parameter_order=order, normalize=compile_schema(schema))


def parse_arguments_json(text: str, tool: str = "") -> dict[str, Any]:
    """Parse a model's argument text strictly; anything but a finite JSON object is an error."""
    from forethought.errors import MalformedArgumentsJSONError

    def reject_constant(token: str) -> Any:
        raise ValueError(f"{token} is not valid JSON")

    where = f"{tool}: " if tool else ""
    try:
        value = json.loads(text or "{}", parse_constant=reject_constant)
    except ValueError as exc:
        raise MalformedArgumentsJSONError(f"{where}arguments are not valid JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(value, dict):
        raise MalformedArgumentsJSONError(f"{where}arguments must be a JSON object, got {_type_name(value)}")
    return value


def dumps_canonical(value: Any) -> str:
    """Compact, key-sorted JSON (the form keys are made of)."""
    return _dumps(value)
