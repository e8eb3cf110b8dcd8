"""Using an SDK client the user already has as forethought's LLM client.

:func:`as_llm_client` accepts anything with a ``stream`` method (an :class:`~forethought.llm.chat.LLMClient`)
as it is, and wraps an ``openai.AsyncOpenAI`` (Chat Completions, or the Responses API with
``api="responses"``) or an ``anthropic.AsyncAnthropic`` in the matching forethought client, which then
sends its requests through that SDK client (its base URL, key, headers, retries and HTTP pool).
"""

from __future__ import annotations

from typing import Any, Literal

import openai

from forethought.llm.chat import LLMClient, OpenAIChatClient
from forethought.llm.responses import OpenAIResponsesClient

Api = Literal["chat", "responses"]


def as_llm_client(client: Any, api: Api = "chat") -> LLMClient:
    """``client`` as an :class:`~forethought.llm.chat.LLMClient` (see the module docstring)."""
    if isinstance(client, openai.AsyncOpenAI):
        if api == "responses":
            return OpenAIResponsesClient(client=client)
        if api == "chat":
            return OpenAIChatClient.from_client(client)
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    if type(client).__module__.split(".")[0] == "anthropic" and hasattr(client, "messages"):
        from forethought.llm.anthropic import AnthropicMessagesClient

        return AnthropicMessagesClient(client=client)
    if callable(getattr(client, "stream", None)):
        stream_client: LLMClient = client
        return stream_client
    raise TypeError(f"cannot use {type(client).__name__} as an LLM client: pass an LLMClient, "
                    "an openai.AsyncOpenAI or an anthropic.AsyncAnthropic")
