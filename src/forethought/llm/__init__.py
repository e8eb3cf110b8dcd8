"""LLM clients: Chat Completions, Responses and Anthropic Messages streams as one small event stream."""

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
