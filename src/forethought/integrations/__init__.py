"""Using forethought inside the stack you have: a stream tap for your own loop, and framework adapters.

* :func:`tap` (:mod:`forethought.integrations.tap`): wrap an ``openai`` / ``anthropic`` SDK stream.
* :class:`Foresight` (:mod:`forethought.integrations.foresight`): what the adapters and the tap use to guess
  each step's calls at its start (the pattern predictor, learning online and saved; speculator models).
* OpenAI Agents SDK (``openai-agents``): :func:`agents_tools`, :class:`ForethoughtModel`.
* LangGraph: :class:`ForethoughtToolNode`.
* pydantic-ai: :class:`ForethoughtToolset`, :class:`TappedModel`.

The adapters import their framework only when first used (``pip install 'forethought[integrations]'``).
"""

from __future__ import annotations

import importlib
from typing import Any

from forethought.integrations.tap import StreamTap, TappedCall, tap

_LAZY = {
    "Foresight": "forethought.integrations.foresight",
    "agents_tools": "forethought.integrations.openai_agents",
    "ForethoughtModel": "forethought.integrations.openai_agents",
    "ForethoughtToolNode": "forethought.integrations.langgraph",
    "ForethoughtToolset": "forethought.integrations.pydantic_ai",
    "TappedModel": "forethought.integrations.pydantic_ai",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forethought.integrations' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["Foresight", "ForethoughtModel", "ForethoughtToolNode", "ForethoughtToolset", "StreamTap", "TappedCall",
           "TappedModel", "agents_tools", "tap"]
