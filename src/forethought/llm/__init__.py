"""LLM clients: OpenAI-compatible streaming turned into a small event stream (text, call started/closed, done)."""

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

__all__ = [
    "ArgumentStream",
    "FakeLLMClient",
    "FakeRequest",
    "LLMClient",
    "LLMEvent",
    "MessageDone",
    "ObjectCloseScanner",
    "OpenAIChatClient",
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
