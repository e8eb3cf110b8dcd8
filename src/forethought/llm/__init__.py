"""LLM clients: Chat Completions, Responses and Anthropic Messages streams as one small event stream.

The names below are imported on first use (PEP 562): importing one light module of this package, such as
:mod:`forethought.llm.events`, does not import the ``openai`` SDK (half a second), which a predictor in a
worker process never needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forethought.llm.anthropic import AnthropicMessagesClient
    from forethought.llm.chat import LLMClient, OpenAIChatClient, ToolCallAssembler
    from forethought.llm.closing import ArgumentStream, ObjectCloseScanner
    from forethought.llm.events import (
        LLMEvent,
        MessageDone,
        ResponseStarted,
        TextDelta,
        ToolCallArgumentsDelta,
        ToolCallClosed,
        ToolCallStarted,
        ToolResultServed,
        Usage,
    )
    from forethought.llm.fake import FakeLLMClient, FakeRequest, scripted_message
    from forethought.llm.responses import OpenAIResponsesClient

_WHERE = {
    "AnthropicMessagesClient": "anthropic",
    "ArgumentStream": "closing",
    "FakeLLMClient": "fake",
    "FakeRequest": "fake",
    "LLMClient": "chat",
    "LLMEvent": "events",
    "MessageDone": "events",
    "ObjectCloseScanner": "closing",
    "OpenAIChatClient": "chat",
    "OpenAIResponsesClient": "responses",
    "ResponseStarted": "events",
    "TextDelta": "events",
    "ToolCallArgumentsDelta": "events",
    "ToolCallAssembler": "chat",
    "ToolCallClosed": "events",
    "ToolCallStarted": "events",
    "ToolResultServed": "events",
    "Usage": "events",
    "scripted_message": "fake",
}

__all__ = [
    "AnthropicMessagesClient",
    "ArgumentStream",
    "FakeLLMClient",
    "FakeRequest",
    "LLMClient",
    "LLMEvent",
    "MessageDone",
    "ObjectCloseScanner",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ResponseStarted",
    "TextDelta",
    "ToolCallArgumentsDelta",
    "ToolCallAssembler",
    "ToolCallClosed",
    "ToolCallStarted",
    "ToolResultServed",
    "Usage",
    "scripted_message",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
