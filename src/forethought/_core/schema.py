"""JSON schemas compiled into normalisers: fast checks that a value fits, returning its keying form.

:func:`compile_schema` turns the subset of JSON schema that tools use (types and their aliases, ``properties``
with ``required``, ``default`` and ``additionalProperties``, ``items`` and ``prefixItems`` with their
bounds, ``anyOf`` / ``oneOf``, ``enum``) into a :data:`Normalizer`, once per schema. A normaliser keeps the
value's own spelling (numbers keep their Python type, strings are never altered) and fills in defaults;
:mod:`forethought._core.calls` keys calls by what it returns.

Invalid input raises :class:`~forethought.errors.InvalidArgumentsError` with a message that names the
argument path and what was expected, never the rejected value (it may be private), and never a crash
deeper in. Normalisers are on the hot path of every call, so they build no path strings while a value is
valid: an error collects its path on the way out.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from forethought.errors import InvalidArgumentsError

_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
"""Compact, key-sorted JSON: ``enum`` options are compared in this form."""


Normalizer = Callable[[Any, str], Any]
"""Checks and normalises one value; the second argument is its path, used only in error messages."""


class _ArgumentPathError(InvalidArgumentsError):
    """An invalid value deep in the arguments; containers add their path parts as it propagates."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str | int] = [path] if path else []

    def __str__(self) -> str:
        rendered = ""
        for part in reversed(self.parts):
            if isinstance(part, int):
                rendered += f"[{part}]"
            else:
                rendered += f".{part}" if rendered else part
        return f"argument {rendered or '(root)'}: {self.reason}"


def type_name(value: object) -> str:
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
    return _ArgumentPathError(path, message)


def _annotate(exc: _ArgumentPathError, part: str | int, path: str) -> None:
    exc.parts.append(part)
    if path:
        exc.parts.append(path)


_SCALARS = (str, int, bool, type(None))


def _normalize_any(value: Any, path: str) -> Any:
    """Check that ``value`` is plain JSON (finite numbers, string keys); keep its spelling."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise _fail(path, _NOT_FINITE)
    if isinstance(value, list | tuple):
        out_list = []
        for i, item in enumerate(value):
            try:
                out_list.append(_normalize_any(item, ""))
            except _ArgumentPathError as exc:
                _annotate(exc, i, path)
                raise
        return out_list
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise _fail(path, f"an object key is a {type_name(k)}, not a string")  # its value may be private
            try:
                out[k] = _normalize_any(v, "")
            except _ArgumentPathError as exc:
                _annotate(exc, k, path)
                raise
        return out
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return _normalize_any(float(value), path)
    raise _fail(path, f"{type(value).__name__} is not a JSON value")


_NOT_FINITE = "is not a finite JSON number (NaN or infinity)"


def _number(integer: bool) -> Normalizer:
    expected = "integer" if integer else "number"

    def normalize(value: Any, path: str) -> Any:
        kind = type(value)
        if kind is not int and kind is not float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _fail(path, f"expected {expected}, got {type_name(value)}")
            value = int(value) if isinstance(value, int) else float(value)  # subclasses key as their base
        if type(value) is int:
            return value  # kept exact: a large integer never becomes a rounded float
        if not math.isfinite(value):
            raise _fail(path, _NOT_FINITE)
        if integer and not value.is_integer():
            raise _fail(path, "expected integer, got a number with a fractional part")
        return value  # a float keys as a float (1.0 is not 1, -0.0 is not 0.0): the tool can tell them apart

    return normalize


def _normalize_string(value: Any, path: str) -> Any:
    if type(value) is str or isinstance(value, str):
        return value
    raise _fail(path, f"expected string, got {type_name(value)}")


def _normalize_boolean(value: Any, path: str) -> Any:
    if value is True or value is False:
        return value
    raise _fail(path, f"expected boolean, got {type_name(value)}")


def _normalize_null(value: Any, path: str) -> Any:
    if value is None:
        return value
    raise _fail(path, f"expected null, got {type_name(value)}")


_normalize_number = _number(integer=False)
_normalize_integer = _number(integer=True)

_EXACT_TYPES: dict[Normalizer, type] = {
    _normalize_string: str, _normalize_boolean: bool, _normalize_integer: int,
    _normalize_any: str,
}
"""Normalisers that return a value of this exact type unchanged (number is not here: a float must be
checked for NaN and infinity)."""

_TYPE_ALIASES = {"dict": "object", "float": "number", "int": "integer", "bool": "boolean", "list": "array",
                 "tuple": "array", "str": "string", "any": None}


def _fresh_copy(value: Any) -> Any:
    """Defaults are shared by every call; a mutable one is copied so no call can change it for another."""
    return copy.deepcopy(value) if isinstance(value, list | dict) else value


def _normalize_object(properties: dict[str, Normalizer], required: frozenset[str],
                      defaults: dict[str, Any], extra: Normalizer, closed: bool,
                      exact_types: dict[str, type]) -> Normalizer:
    """``exact_types`` maps a property to the Python type whose values it keeps unchanged (the fast path)."""
    get = properties.get
    exact = exact_types.get
    default_items = tuple(defaults.items())

    def normalize(value: Any, path: str) -> Any:
        if type(value) is not dict and not isinstance(value, dict):
            raise _fail(path, f"expected object, got {type_name(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(item) is exact(key):
                out[key] = item
                continue
            norm = get(key)
            if norm is None:
                if type(key) is not str and not isinstance(key, str):
                    raise _fail(path, f"an object key is a {type_name(key)}, not a string")  # its value may be private
                if closed:
                    unknown = _ArgumentPathError("", "is not a parameter of this tool")
                    _annotate(unknown, key, path)
                    raise unknown
                norm = extra
            try:
                out[key] = norm(item, "")
            except _ArgumentPathError as exc:
                _annotate(exc, key, path)
                raise
        if required and not out.keys() >= required:
            raise _fail(path, f"missing required {', '.join(sorted(required.difference(out)))}")
        for key, default in default_items:
            if key not in out:
                out[key] = _fresh_copy(default)
        return out

    return normalize


def _first_of(options: list[Normalizer]) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        errors = []
        for option in options:
            try:
                return option(value, "")
            except _ArgumentPathError as exc:
                errors.append(f"{str(exc).removeprefix('argument ')}" if exc.parts else exc.reason)
        raise _fail(path, "matches none of the allowed forms (" + "; ".join(errors) + ")")

    return normalize


def _array(item: Normalizer, prefix: list[Normalizer], min_items: int | None,
           max_items: int | None) -> Normalizer:
    def normalize(value: Any, path: str) -> Any:
        if type(value) is not list and not isinstance(value, list | tuple):
            raise _fail(path, f"expected array, got {type_name(value)}")
        n = len(value)
        if min_items is not None and n < min_items:
            raise _fail(path, f"expected at least {min_items} items, got {n}")
        if max_items is not None and n > max_items:
            raise _fail(path, f"expected at most {max_items} items, got {n}")
        out = []
        for i, element in enumerate(value):
            try:
                out.append((prefix[i] if i < len(prefix) else item)(element, ""))
            except _ArgumentPathError as exc:
                _annotate(exc, i, path)
                raise
        return out

    return normalize


def _numeric_canon(value: Any) -> Any:
    """``value`` with integer-valued floats as ints: the JSON-equality form used for ``enum``."""
    if type(value) is float and value.is_integer():
        return int(value)  # only to test enum membership under JSON equality; keys keep the float
    if isinstance(value, list):
        return [_numeric_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _numeric_canon(v) for k, v in value.items()}
    return value


def _with_enum(base: Normalizer, enum: Any) -> Normalizer:
    if not isinstance(enum, list | tuple) or not enum:
        raise InvalidArgumentsError(f"schema enum must be a non-empty list, got {enum!r}")
    allowed: dict[str, Any] = {}
    for option in enum:
        canon = _numeric_canon(base(option, "enum"))
        allowed.setdefault(_dumps(canon), canon)
    shown = list(allowed.values())
    # Scalar options (the usual case) are matched by (type, value) without encoding JSON.
    scalars = {(type(v), v): v for v in shown if v is None or type(v) in (str, int, float, bool)}

    not_allowed = f"is not one of the allowed values {shown!r}"

    def normalize(value: Any, path: str) -> Any:
        given = base(value, path)
        out = _numeric_canon(given)
        if type(out) in _ENUM_SCALAR_TYPES:
            if (type(out), out) in scalars:
                return given  # the caller's own spelling keys (1.0 and 1 differ, as for any number)
            if len(scalars) == len(shown):
                raise _fail(path, not_allowed)
        if _dumps(out) not in allowed:
            raise _fail(path, not_allowed)
        return given

    return normalize


_ENUM_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def compile_schema(schema: Mapping[str, Any] | bool | None) -> Normalizer:
    """Compile a JSON schema (the subset tools use) into a fast normaliser for one value."""
    if not schema or schema is True:
        return _normalize_any
    if not isinstance(schema, Mapping):
        raise InvalidArgumentsError(f"schema must be an object, got {type_name(schema)}")
    if "anyOf" in schema or "oneOf" in schema:
        return _first_of([compile_schema(s) for s in schema.get("anyOf", schema.get("oneOf", []))])
    raw_type = schema.get("type")
    if isinstance(raw_type, list):
        return _first_of([compile_schema({**schema, "type": t}) for t in raw_type])
    kind = _TYPE_ALIASES.get(raw_type, raw_type) if isinstance(raw_type, str) else None
    base: Normalizer
    if kind == "number":
        base = _normalize_number
    elif kind == "integer":
        base = _normalize_integer
    elif kind == "string":
        base = _normalize_string
    elif kind == "boolean":
        base = _normalize_boolean
    elif kind == "null":
        base = _normalize_null
    elif kind == "array" or (kind is None and ("items" in schema or "prefixItems" in schema)):
        prefix = [compile_schema(s) for s in schema.get("prefixItems", ())]
        base = _array(compile_schema(schema.get("items")), prefix, schema.get("minItems"), schema.get("maxItems"))
    elif kind == "object" or (kind is None and "properties" in schema):
        props_schema = schema.get("properties") or {}
        properties = {name: compile_schema(sub) for name, sub in props_schema.items()}
        required = frozenset(schema.get("required", ()))
        defaults: dict[str, Any] = {}
        for name, sub in props_schema.items():
            if isinstance(sub, Mapping) and "default" in sub and name not in required:
                defaults[name] = _normalize_default(properties[name], sub["default"], name)
        additional = schema.get("additionalProperties", True)
        extra = compile_schema(additional) if isinstance(additional, Mapping) else _normalize_any
        exact_types = {name: _EXACT_TYPES[normalizer] for name, normalizer in properties.items()
                       if normalizer in _EXACT_TYPES}
        base = _normalize_object(properties, required, defaults, extra, additional is False, exact_types)
    elif kind is None:
        base = _normalize_any
    else:
        raise InvalidArgumentsError(f"schema type {raw_type!r} is not supported")
    enum = schema.get("enum")
    return base if enum is None else _with_enum(base, enum)


def _normalize_default(normalize: Normalizer, default: Any, name: str) -> Any:
    """A default keys like the same value given explicitly; one the schema rejects is kept as plain JSON."""
    try:
        return normalize(default, name)
    except InvalidArgumentsError:
        return _normalize_any(default, name)
