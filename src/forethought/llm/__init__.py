"""LLM clients: OpenAI-compatible streaming turned into a small event stream (text, call started/closed, done)."""

from forethought.llm.client import LLMClient, OpenAIChatClient, ToolCallAssembler
from forethought.llm.closing import ArgumentStream, ObjectCloseScanner
from forethought.llm.events import (
    LLMEvent,
    MessageDone,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallClosed,
    ToolCallStarted,
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
    "TextDelta",
    "ToolCallArgumentsDelta",
    "ToolCallAssembler",
    "ToolCallClosed",
    "ToolCallStarted",
    "Usage",
    "scripted_message",
]
