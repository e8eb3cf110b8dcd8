"""What users test their own agents and tools with: time they control, models they script, load they set.

* :class:`FakeClock` — a monotonic clock that moves only when told to (``Runtime(clock=FakeClock())``), so
  TTLs, claim waits and breaker cool-downs are decided, not waited for;
* :class:`FixedPressure` — a load signal at the level a test sets (``Runtime(pressure=FixedPressure(0.5))``);
* :class:`FakeLLMClient` and :func:`scripted_message` — an in-process model client replaying prepared
  events, recording every request;
* :func:`serve_scripted` — a real OpenAI-compatible (and Anthropic Messages) HTTP server on 127.0.0.1 that
  streams a script of messages and tool calls (needs ``forethought[serve]``).

The model client and the scripted server are imported on first use, so ``import forethought.testing`` stays
light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forethought._core.clock import FakeClock
from forethought._core.pressure import FixedPressure

if TYPE_CHECKING:
    from forethought.llm.fake import FakeLLMClient, scripted_message
    from forethought.serve.scripted import Script, load_script, serve_scripted

__all__ = ["FakeClock", "FakeLLMClient", "FixedPressure", "Script", "load_script", "scripted_message",
           "serve_scripted"]

_LAZY = {
    "FakeLLMClient": "forethought.llm.fake",
    "scripted_message": "forethought.llm.fake",
    "Script": "forethought.serve.scripted",
    "load_script": "forethought.serve.scripted",
    "serve_scripted": "forethought.serve.scripted",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forethought.testing' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
