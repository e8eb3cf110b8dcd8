"""Reading one field of a provider's value, whether it came as plain JSON or as an SDK object.

:func:`field_of` is how the stream tap's Chat Completions decoder (:mod:`forethought.llm.chat_chunks`) and
the transcript readers (:mod:`forethought.integrations.transcripts`) read what a caller hands them: a
mapping's key, an SDK (pydantic) object's attribute, and nothing of a string, a number or a list (no method
of theirs is ever taken for a field). No import beyond the standard library: light enough for any layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["field_of"]

_PLAIN = (str, bytes, int, float, bool, list, tuple)


def field_of(obj: Any, name: str) -> Any:
    """``obj[name]`` for a mapping, the field ``name`` of an SDK object; ``None`` for anything else (a
    string, a number, a list: no field of theirs, nor a method, is ever taken for a message's field)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    if obj is None or isinstance(obj, _PLAIN):
        return None
    value = getattr(obj, name, None)
    return None if callable(value) else value
