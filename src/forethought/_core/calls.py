"""Tool calls and their canonical keys: the ONE rule that decides whether a result may serve a call.

A :class:`ToolCall` is what a model (or a predictor) asks for: a tool name and JSON arguments. **A result may
serve a call only if no difference between the guessed and the real call can reach the tool.** Two calls
that a tool cannot tell apart get the same key, and any difference that can reach it gives a different key;
a speculation is served only to an authoritative call with the identical key (:func:`may_serve`). Every way
in (the Python API, code mode, the tap and adapters, the MCP proxy, the gateway, shared stores) keys calls
here and nowhere else.

Canonicalisation is schema-aware and compiled once per tool (:func:`compile_arguments`):

* key order is irrelevant;
* numbers keep their Python type: ``1`` and ``1.0`` are different keys (a tool can tell them apart:
  ``repr``, ``isinstance``, integer division), and so are ``0.0`` and ``-0.0``;
* schema defaults are filled in before keying (an omitted argument keys like its default given);
* positional arguments are mapped to names in the schema's parameter order;
* strings are never altered;
* what reaches the tool decides the rest (:class:`Receives`): a tool that receives the caller's own Python
  values (``Receives.PYTHON``, every Python function tool) can tell a tuple from a list and a ``str``
  subclass from a ``str``, so the key also names the Python type of every value that is not a plain JSON
  type; a tool that receives the arguments as JSON text (``Receives.JSON``: an MCP server, any remote
  endpoint) sees only the JSON, where a tuple and a list are the same array, but ``3`` and ``3.0`` are
  still different text.

Canonical forms exist only for keys (and for partial-hit rules, which compare arguments). The tool
function receives the call's own arguments, exactly as the caller passed them or the model's JSON parsed
them (:meth:`ArgumentSpec.given`); docs/design.md, "Which spellings match", lists what keys alike.

The schema itself is compiled into a normaliser by :func:`~forethought._core.schema.compile_schema` (re-exported
here with :data:`~forethought._core.schema.Normalizer`). Invalid input raises
:class:`~forethought.errors.InvalidArgumentsError` with a message that names the argument path and what was
expected, never the rejected value (it may be private), and never a crash deeper in.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.schema import Normalizer, compile_schema, type_name
from forethought.errors import InvalidArgumentsError, MalformedArgumentsJSONError

__all__ = ["KEY_SEPARATOR", "ArgumentSpec", "CallKey", "JSONValue", "Normalizer", "Receives", "ToolCall",
           "compile_arguments", "compile_schema", "dumps_canonical", "may_serve", "parse_arguments_json",
           "python_types"]

JSONValue = Any
"""A JSON value as Python holds it (dict, list, str, int, float, bool, None)."""

CallKey = str
"""A canonical call key: the tool name and its canonical argument JSON."""

KEY_SEPARATOR = "\x1f"
TYPES_MARK = "types:"
"""Begins the part of a key that names Python types a JSON rendering would lose (after a separator)."""
OMITTED_MARK = "omitted:"
"""Begins the part of a key that names the parameters left out whose function default the tool can tell
from the schema's (after a separator)."""


class Receives(enum.Enum):
    """What a tool function receives of a call, which decides what keys apart (see the module docstring)."""

    PYTHON = "python"
    """The caller's own Python values (a tuple stays a tuple): every difference of Python type counts."""
    JSON = "json"
    """The arguments as JSON text (a server parses them): only differences of the JSON count."""

    __hash__ = object.__hash__


PRIVATE_MARK = "\x00private"
"""Begins the key of a call of a private tool (or one with private arguments): no name or value in clear."""
_PRIVATE_SECRET = os.urandom(16)
"""Keys private calls in this process: equal calls get equal keys, and the key text reveals nothing."""

_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Scalar types that a key's JSON names exactly (``1`` vs ``1.0`` vs ``true`` are already different JSON)."""


def _python_types(arguments: Mapping[str, Any]) -> str:
    """The Python types of the values in ``arguments`` that the canonical JSON does not show, as text.

    Empty for plain JSON values (dicts with ``str`` keys, lists, str, int, float, bool, None): the fast,
    common case. Otherwise a JSON array of ``[path, type]`` items, sorted, for every tuple, every value of
    another (sub)class and every dict key that is not exactly a ``str`` (``path`` a JSON array of the keys and
    indices leading there, so no key text can make two different sets of items read alike): what a tool
    receiving Python values could tell apart where the JSON would not.
    """
    for value in arguments.values():
        if type(value) not in _PLAIN:
            break
    else:
        return ""
    found: list[str] = []
    for name, value in arguments.items():
        _walk_types(value, (name,), found)
    return "[" + ",".join(sorted(found)) + "]" if found else ""


python_types = _python_types
"""Public name of :func:`_python_types` (what a tool's own defaults are checked with)."""


def _type_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _walk_types(value: Any, path: tuple[Any, ...], found: list[str]) -> None:
    kind = type(value)
    if kind in _PLAIN:
        return
    if kind is not dict and kind is not list:
        found.append(_dumps([[str(p) if isinstance(p, str) else p for p in path], _type_name(kind)]))
    if isinstance(value, Mapping):
        for k, v in value.items():
            if type(k) is not str:  # a str subclass (or any other key type) as a key: the tool can tell
                found.append(_dumps([[str(p) if isinstance(p, str) else p for p in path],
                                     "key:" + _type_name(type(k)), str(k) if isinstance(k, str) else repr(k)]))
            _walk_types(v, (*path, k), found)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _walk_types(v, (*path, i), found)


def json_view(value: Any) -> tuple[Any, bool]:
    """``value`` with what a framework makes of a model's JSON turned back into that JSON: an enum member into
    its value, a pydantic model into ``model_dump(mode="json")``, a date, time or datetime into its ISO text, a
    UUID into its text (inside dicts, lists and tuples too); and whether anything was turned. Everything else
    is left as it is (a set, any other object: still not JSON)."""
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            out[k], turned = json_view(v)
            changed = changed or turned
        return (out, True) if changed else (value, False)
    if isinstance(value, list | tuple):
        items = [json_view(v) for v in value]
        if not any(turned for _, turned in items):
            return value, False
        return [v for v, _ in items], True
    if isinstance(value, enum.Enum):
        return json_view(value.value)[0], True
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat(), True
    if isinstance(value, uuid.UUID):
        return str(value), True
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json"), True
        except Exception:  # not a pydantic model after all: left as it is
            return value, False
    return value, False


def may_serve(guess: CallKey, call: CallKey) -> bool:
    """Whether a speculation keyed ``guess`` may serve the call keyed ``call``: the one rule, which holds
    exactly when no difference between the two calls can reach the tool (keys are built so)."""
    return guess == call

_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _reject_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _make_canonical_encoder() -> Callable[[Any, int], Any]:
    """The C encoder built once (``JSONEncoder.encode`` rebuilds it per call); returns JSON chunks.

    It skips the circular-reference check, so it is used only on canonical arguments, which are fresh
    acyclic trees of plain JSON values; :func:`dumps_canonical` keeps the checked encoder.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return lambda value, _level: (_dumps(value),)
    encode: Callable[[Any, int], Any] = make(None, _reject_default, json.encoder.encode_basestring, None, ":", ",",
                                             True, False, False)
    return encode


_encode_canonical = _make_canonical_encoder()
_PYTHON = Receives.PYTHON


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
        # Must agree with the generated __eq__, under which {"a": 1} == {"a": 1.0} == {"a": True}:
        # hash only what equal calls certainly share (the name, the argument names, the arity).
        try:
            return hash((self.name, frozenset(self.arguments), len(self.positional)))
        except TypeError:
            return hash(self.name) if isinstance(self.name, str) else 0

    def describe(self) -> str:
        """A short human-readable rendering, e.g. ``cd(folder='docs')``."""
        parts = [repr(v) for v in self.positional]
        parts += [f"{k}={v!r}" for k, v in self.arguments.items()]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class ArgumentSpec:
    """How one tool's arguments are checked, normalised and keyed (built once per tool)."""

    tool: str
    parameter_order: tuple[str, ...]
    normalize: Normalizer
    receives: Receives = Receives.PYTHON
    private: bool = False
    """Key calls by a keyed digest of the whole key text (a private tool, or one with private arguments), so
    that a key handed to a callback, a log or a shared store never carries a name or a value in clear."""
    own_defaults: frozenset[str] = frozenset()
    """Parameters whose function default the tool can tell from the schema's default (a tuple against a list,
    an enum member against its value, another value): left out, one keys apart from any value given (the
    schema's default fills the JSON, but the tool receives its own default). Only for ``Receives.PYTHON``."""
    def canonical_arguments(self, call: ToolCall) -> dict[str, Any]:
        """Return the call's arguments as named, validated, defaulted JSON values (a fresh dict)."""
        arguments = call.arguments
        if type(arguments) is not dict:
            if not isinstance(arguments, Mapping):
                raise InvalidArgumentsError(
                    f"{self.tool}: arguments must be a JSON object, got {type_name(arguments)}")
            arguments = dict(arguments)
        if call.positional:
            arguments = self._with_positional(call.positional, arguments)
        return self._normalized(arguments)

    def _normalized(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` validated and normalised by the schema; values a framework made of the model's JSON
        (an enum member, a pydantic model, a date, a UUID) are taken as the JSON they came from
        (:func:`json_view`); their Python types still key apart (:func:`_python_types`)."""
        try:
            try:
                result: dict[str, Any] = self.normalize(arguments, "")
            except InvalidArgumentsError:
                view, changed = json_view(arguments)
                if not changed:
                    raise
                result = self.normalize(view, "")
        except InvalidArgumentsError as exc:
            raise InvalidArgumentsError(f"{self.tool}: {exc}") from None
        except RecursionError:
            raise InvalidArgumentsError(f"{self.tool}: arguments are nested too deeply (or circular)") from None
        return result

    def _with_positional(self, positional: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(positional, tuple | list):
            raise InvalidArgumentsError(
                f"{self.tool}: positional arguments must be a sequence, got {type_name(positional)}")
        if len(positional) > len(self.parameter_order):
            raise InvalidArgumentsError(
                f"{self.tool}: {len(positional)} positional arguments given, "
                f"the tool takes at most {len(self.parameter_order)}")
        named = dict(zip(self.parameter_order, positional, strict=False))
        clash = named.keys() & arguments.keys()
        if clash:
            raise InvalidArgumentsError(
                f"{self.tool}: argument {sorted(clash)[0]!r} given both by position and by name")
        return {**named, **arguments}

    def given(self, call: ToolCall) -> Mapping[str, Any]:
        """The arguments the tool function receives: the caller's own values, positional ones named.

        Call only after :meth:`keyed` accepted ``call`` (it validates). Nothing is converted, copied or
        defaulted: the function's own defaults apply to what the caller left out.
        """
        if call.positional:
            return self._with_positional(call.positional, dict(call.arguments))
        return call.arguments

    def keyed(self, call: ToolCall) -> tuple[dict[str, Any], CallKey]:
        """The canonical arguments of ``call`` and its key, in one pass (the hot path of every guess and call)."""
        given = call.arguments
        if type(given) is dict and not call.positional:  # the common case, without a call in between
            try:
                arguments: dict[str, Any] = self.normalize(given, "")
            except (InvalidArgumentsError, RecursionError):
                arguments = self._normalized(given)  # a framework's values, or the error as it reads
        else:
            arguments = self.canonical_arguments(call)
            given = self.given(call)
        key = call.name + KEY_SEPARATOR + "".join(_encode_canonical(arguments, 0))
        if self.receives is _PYTHON:
            for value in given.values():
                if type(value) not in _PLAIN:  # not the common case: name every Python type the JSON hides
                    types = _python_types(given)
                    if types:
                        key += KEY_SEPARATOR + TYPES_MARK + types
                    break
            if self.own_defaults:
                omitted = self.own_defaults.difference(given)
                if omitted:
                    key += KEY_SEPARATOR + OMITTED_MARK + _dumps(sorted(omitted))
        if self.private:
            digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16, key=_PRIVATE_SECRET)
            key = PRIVATE_MARK + KEY_SEPARATOR + digest.hexdigest()
        return arguments, key

    def key(self, call: ToolCall) -> CallKey:
        """The canonical key of ``call``: equal exactly when no difference between two calls can reach the tool."""
        return self.keyed(call)[1]


def compile_arguments(tool: str, parameters: Mapping[str, Any] | None,
                      parameter_order: Sequence[str] | None = None,
                      receives: Receives = Receives.PYTHON, private: bool = False,
                      own_defaults: frozenset[str] = frozenset()) -> ArgumentSpec:
    """Build the :class:`ArgumentSpec` for a tool from its JSON-schema ``parameters`` (``own_defaults``: see
    :attr:`ArgumentSpec.own_defaults`)."""
    schema = dict(parameters or {"type": "object", "properties": {}})
    order = tuple(parameter_order) if parameter_order is not None else tuple(schema.get("properties", {}))
    return ArgumentSpec(tool=tool, parameter_order=order, normalize=compile_schema(schema), receives=receives,
                        private=private, own_defaults=own_defaults if receives is Receives.PYTHON else frozenset())


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _json_error_reason(exc: Exception) -> str:
    """What went wrong and where, without any of the input text."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return type(exc).__name__


def parse_arguments_json(text: str, tool: str = "") -> dict[str, Any]:
    """Parse a model's argument text strictly; anything but a finite JSON object is an error."""
    where = f"{tool}: " if tool else ""
    try:
        value = json.loads(text or "{}", parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, TypeError) as exc:
        raise MalformedArgumentsJSONError(  # the text itself is never quoted: it may hold private values
            f"{where}arguments are not valid JSON ({_json_error_reason(exc)}, {len(str(text))} characters)"
        ) from None
    except RecursionError:
        raise MalformedArgumentsJSONError(f"{where}arguments are nested too deeply to parse") from None
    if not isinstance(value, dict):
        raise MalformedArgumentsJSONError(f"{where}arguments must be a JSON object, got {type_name(value)}")
    return value


def dumps_canonical(value: Any) -> str:
    """Compact, key-sorted JSON (the form keys are made of)."""
    return _dumps(value)
