"""Schema checks: a derived value in the form its parameter's JSON schema accepts.

A value found in text or in an output is often of another JSON type than the parameter wants: ``"12"``
for an integer, ``"a"`` for a list of strings, ``"True"`` for a boolean. :func:`schema_checker` gives, for
one parameter schema, a function that returns the value itself when the schema accepts it, else the first
coercion of it that the schema accepts, else None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from forethought._core.calls import Normalizer, compile_schema
from forethought.errors import InvalidArgumentsError
from forethought.predictors.patterns.text import parse_number


def _coercions(value: Any) -> list[Any]:
    """The value itself, then the other JSON types it could be meant as (a number in a string...)."""
    out = [value]
    if isinstance(value, str):
        number = parse_number(value)
        if number is not None:
            out.append(int(number) if number.is_integer() else number)
        if value.lower() in ("true", "false"):
            out.append(value.lower() == "true")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))
    if not isinstance(value, list):
        out.append([value])
    return out


def schema_checker(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """A function giving a value in the form ``schema`` accepts (coerced if need be: ``"12"`` -> ``12``,
    ``"a"`` -> ``["a"]``), or None when no coercion fits."""
    try:
        normalize: Normalizer | None = compile_schema(schema)
    except InvalidArgumentsError:
        normalize = None

    def check(value: Any) -> Any:
        if normalize is None:
            return value
        try:
            normalize(value, "")  # the value as it is: the first coercion, and nearly always fine
        except InvalidArgumentsError:
            pass
        else:
            return value
        for candidate in _coercions(value)[1:]:
            try:
                normalize(candidate, "")
            except InvalidArgumentsError:
                continue
            return candidate
        return None

    return check
