"""JSON schemas from Python signatures: what a function's parameters, type hints and defaults say, as the
schema a tool is offered and keyed by, and which of its defaults that schema cannot spell.

:func:`schema_from_signature` derives an object schema (``list[int]``, ``Literal``, enums, pydantic models,
``X | None``, defaults); :func:`own_defaults` names the parameters whose function default the tool can tell
from the schema's (:attr:`~forethought._core.calls.ArgumentSpec.own_defaults`).
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections import abc
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from forethought._core.calls import dumps_canonical, python_types
from forethought.errors import ToolDefinitionError

__all__ = ["own_defaults", "schema_from_signature"]


_SEQUENCE_ORIGINS = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet,
                     abc.Iterable, abc.Collection)
_MAPPING_ORIGINS = (dict, abc.Mapping, abc.MutableMapping)


def _json_type(values: Iterable[Any]) -> str | None:
    """The one JSON type all ``values`` share (for enums and literals), if any."""
    kinds = set()
    for v in values:
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        elif isinstance(v, float):
            kinds.add("number")
        elif isinstance(v, str):
            kinds.add("string")
        else:
            return None
    if kinds == {"integer", "number"}:
        return "number"
    return kinds.pop() if len(kinds) == 1 else None


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kind = _json_type(values)
    return {"type": kind, "enum": values} if kind else {"enum": values}


def _schema_for(annotation: Any) -> dict[str, Any]:
    """JSON schema for a Python type hint (the common cases; anything else is unconstrained)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        schemas = [_schema_for(a) for a in options]
        if type(None) in args:
            schemas.append({"type": "null"})
        if any(not s for s in schemas):
            return {}
        return {"anyOf": schemas} if len(schemas) > 1 else schemas[0]
    if origin is Literal:
        return _enum_schema([v.value if isinstance(v, enum.Enum) else v for v in args])
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return {"type": "string"}
    if annotation is type(None):
        return {"type": "null"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([m.value for m in annotation])
    if _is_pydantic_model(annotation):
        return _pydantic_schema(annotation)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if args == ((),):
            return {"type": "array", "maxItems": 0}
        return {"type": "array", "prefixItems": [_schema_for(a) for a in args], "minItems": len(args),
                "maxItems": len(args)}
    if annotation in _SEQUENCE_ORIGINS or origin in _SEQUENCE_ORIGINS:
        return {"type": "array", "items": _schema_for(args[0])} if args else {"type": "array"}
    if annotation in _MAPPING_ORIGINS or origin in _MAPPING_ORIGINS:
        if len(args) == 2 and _schema_for(args[1]):
            return {"type": "object", "additionalProperties": _schema_for(args[1])}
        return {"type": "object"}
    return {}


def _is_pydantic_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic model class (checked without importing pydantic)."""
    return isinstance(annotation, type) and any(
        base.__module__.startswith("pydantic") and base.__name__ == "BaseModel" for base in annotation.__mro__)


def _pydantic_schema(model: type) -> dict[str, Any]:
    """The JSON schema pydantic itself gives ``model`` (via ``TypeAdapter``), references inlined."""
    try:
        from pydantic import TypeAdapter
    except ImportError:  # pragma: no cover - a model class implies pydantic is importable
        raise ToolDefinitionError(
            f"parameter type {model.__name__} is a pydantic model, but pydantic is not installed "
            "(pip install 'forethought[pydantic]')") from None
    schema: dict[str, Any] = TypeAdapter(model).json_schema()
    inlined: dict[str, Any] = _inline_refs(schema, schema.pop("$defs", {}), 0)
    return inlined


_MAX_REF_DEPTH = 32


def _inline_refs(schema: Any, defs: Mapping[str, Any], depth: int) -> Any:
    """``schema`` with every local ``$ref`` replaced by its definition (recursive models are cut off)."""
    if isinstance(schema, list):
        return [_inline_refs(s, defs, depth) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        if depth >= _MAX_REF_DEPTH:
            return {}
        target = defs.get(ref.removeprefix("#/$defs/"), {})
        return _inline_refs({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs, depth + 1)
    return {k: _inline_refs(v, defs, depth) for k, v in schema.items() if k != "title"}


def own_defaults(fn: Callable[..., Any], parameters: Mapping[str, Any]) -> frozenset[str]:
    """The parameters of ``fn`` whose own default the function can tell from the default ``parameters`` gives
    them (keyed apart when left out: :attr:`~forethought._core.calls.ArgumentSpec.own_defaults`): a default of
    another Python type than its JSON (a tuple, an enum member, a ``str`` subclass) or of another value."""
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping):
        return frozenset()
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return frozenset()
    own = set()
    for param in signature.parameters.values():
        prop = properties.get(param.name)
        if param.default is param.empty or not isinstance(prop, Mapping) or "default" not in prop:
            continue  # no schema default: a call that leaves it out keys apart from one that gives it already
        try:
            same = (dumps_canonical(param.default) == dumps_canonical(prop["default"])
                    and not python_types({param.name: param.default}))
        except (TypeError, ValueError):
            same = False
        if not same:
            own.add(param.name)
    return frozenset(own)


def _json_default(fn_name: str, param: str, value: Any) -> Any:
    """A parameter default as plain JSON (enum members by value, tuples as lists)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{fn_name}: default of {param!r} is not a JSON value ({exc})") from None
    return value


def _admits_null(schema: Mapping[str, Any]) -> bool:
    if not schema or schema.get("type") == "null":
        return True
    return any(_admits_null(s) for s in schema.get("anyOf", ()))


def schema_from_signature(fn: Callable[..., Any], skip_first: bool = False) -> dict[str, Any]:
    """Derive an object schema from ``fn``'s parameters, type hints and defaults.

    A ``None`` default widens the type to admit ``null`` (``x: int = None`` means ``x: int | None``).
    """
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError) as exc:
        raise ToolDefinitionError(f"cannot read the signature of {fn!r}: {exc}") from exc
    fn_name = getattr(fn, "__name__", repr(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    params = list(signature.parameters.values())
    if skip_first:
        if not params:
            raise ToolDefinitionError(f"{fn_name}: a tool with state needs a first parameter for the state")
        params = params[1:]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{fn_name}: *args/**kwargs cannot be described by a schema; pass parameters= with a JSON schema")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"{fn_name}: positional-only parameters are not supported")
        schema = _schema_for(hints.get(param.name, param.annotation))
        if param.default is param.empty:
            required.append(param.name)
        else:
            default = _json_default(fn_name, param.name, param.default)
            if default is None and not _admits_null(schema):
                schema = {"anyOf": [schema, {"type": "null"}]}
            schema = {**schema, "default": default}
        properties[param.name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = required
    return out
