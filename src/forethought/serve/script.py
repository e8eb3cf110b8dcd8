"""The scripted model's script: its format, read and checked (:func:`parse_script`, :func:`load_script`).

A script is a list of model responses (text, tool calls, timing), or an object holding that list as
``responses`` with defaults for the timing and ``loop``; every field is checked and a bad one is a
:class:`~forethought.errors.WorkloadError` naming it. :mod:`forethought.serve.scripted` serves it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forethought.errors import WorkloadError

DEFAULT_TTFT_S = 0.05
DEFAULT_CHUNK_S = 0.01
DEFAULT_FRAGMENT_CHARS = 16
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One tool call a scripted response makes."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One model response: its text, its calls (in order), and its timing."""

    text: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    ttft_s: float = DEFAULT_TTFT_S
    chunk_s: float = DEFAULT_CHUNK_S
    fragment_chars: int = DEFAULT_FRAGMENT_CHARS


@dataclass(frozen=True, slots=True)
class Script:
    """The responses of a scripted model, served by position in the conversation."""

    responses: tuple[ScriptedResponse, ...]
    loop: bool = False

    def at(self, turn: int) -> ScriptedResponse:
        if self.loop:
            return self.responses[turn % len(self.responses)]
        if turn >= len(self.responses):
            raise Rejected(f"the script has {len(self.responses)} responses; this request is at model turn {turn}")
        return self.responses[turn]


class Rejected(Exception):
    """A request the script cannot answer (HTTP 400)."""


SCRIPT_KEYS = frozenset({"responses", "ttft_s", "chunk_s", "fragment_chars", "loop"})
RESPONSE_KEYS = frozenset({"text", "calls", "ttft_s", "chunk_s", "fragment_chars"})
CALL_KEYS = frozenset({"name", "arguments"})


def _number(value: Any, where: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise WorkloadError(f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def _count(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise WorkloadError(f"{where} must be a whole number of at least 1, got {value!r}")
    return int(value)


def _known(item: Mapping[str, Any], keys: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in item if k not in keys)
    if unknown:
        raise WorkloadError(f"{where} has unknown field{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(repr(k) for k in unknown)} (expected: {', '.join(sorted(keys))})")


def _call(call: Any, where: str) -> ScriptedCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"] \
            or not isinstance(call.get("arguments", {}), dict):
        raise WorkloadError(f"{where} needs a non-empty string 'name' and an object 'arguments'")
    _known(call, CALL_KEYS, where)
    return ScriptedCall(call["name"], dict(call.get("arguments", {})))


def parse_script(data: Any) -> Script:
    """A :class:`Script` from parsed JSON (raises :class:`WorkloadError` naming the bad field)."""
    if isinstance(data, list):
        data = {"responses": data}
    if not isinstance(data, dict) or not isinstance(data.get("responses"), list) or not data["responses"]:
        raise WorkloadError("a script is an object with a non-empty list 'responses' (or that list itself)")
    _known(data, SCRIPT_KEYS, "the script")
    ttft = _number(data.get("ttft_s"), "ttft_s", DEFAULT_TTFT_S)
    chunk = _number(data.get("chunk_s"), "chunk_s", DEFAULT_CHUNK_S)
    fragment = _count(data.get("fragment_chars"), "fragment_chars", DEFAULT_FRAGMENT_CHARS)
    loop = data.get("loop", False)
    if not isinstance(loop, bool):
        raise WorkloadError(f"loop must be true or false, got {loop!r}")
    responses = []
    for i, item in enumerate(data["responses"]):
        where = f"responses[{i}]"
        if not isinstance(item, dict):
            raise WorkloadError(f"{where} must be an object")
        _known(item, RESPONSE_KEYS, where)
        text = item.get("text", "")
        if not isinstance(text, str):
            raise WorkloadError(f"{where}.text must be a string")
        calls = item.get("calls") or []
        if not isinstance(calls, list):
            raise WorkloadError(f"{where}.calls must be a list of calls")
        responses.append(ScriptedResponse(
            text, tuple(_call(call, f"{where}.calls[{j}]") for j, call in enumerate(calls)),
            _number(item.get("ttft_s"), f"{where}.ttft_s", ttft),
            _number(item.get("chunk_s"), f"{where}.chunk_s", chunk),
            _count(item.get("fragment_chars"), f"{where}.fragment_chars", fragment)))
    return Script(tuple(responses), loop)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_script(path: str | Path) -> Script:
    """Read a script file (JSON, UTF-8); any problem is a :class:`WorkloadError` naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_no_constant)
    except OSError as exc:
        raise WorkloadError(f"cannot read script {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"script {path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        raise WorkloadError(f"script {path} is not JSON: {exc}") from exc
    try:
        return parse_script(data)
    except WorkloadError as exc:
        raise WorkloadError(f"script {path}: {exc}") from exc
