"""The small event stream a streamed chat completion is turned into.

An LLM client turns a provider's chunks into these values, in the order the information arrived:
text as it is generated, a tool call as soon as its name is known, its argument text as it streams, the
moment its arguments JSON object is closed (parsed, or with a clear error), and finally the end of the
message. Consumers (the agent, predictors) never see provider chunk formats.

Order guarantees for one message: ``ToolCallStarted(i)`` comes before any ``ToolCallArgumentsDelta(i)``,
which come before ``ToolCallClosed(i)``; each started call is closed exactly once, and ``MessageDone`` is
last. ``ToolCallClosed(i)`` is emitted while processing the fragment that closed the object, before any
later fragment (of this or another call) is looked at.

Two events belong to forethought's gateway (docs/gateway.md) and are ignored by consumers that do not know
them: :class:`ResponseStarted` comes first, from clients asked for it, with the response headers (the
gateway's response id and token); :class:`ToolResultServed` says the gateway executed a call of the message
itself (it had a speculated result) and continued the response. Once every call of the message has its
``ToolResultServed``, the following events belong to the next assistant message of the same response
(tool call indices start again at 0); ``MessageDone`` ends the whole response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the endpoint reported for one completion (``cached_tokens``: prompt tokens served from cache)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant message's text content."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model began tool call ``index`` (0-based within the message) with this id and tool name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A fragment of tool call ``index``'s argument text, as streamed (before the object closed)."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallClosed:
    """Tool call ``index``'s arguments are complete.

    ``arguments`` is the parsed JSON object, or ``None`` with ``error`` set when the text is malformed or
    was cut off; ``raw`` is the argument text received (up to and including the closing brace).
    """

    index: int
    id: str
    name: str
    arguments: dict[str, Any] | None
    raw: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class MessageDone:
    """The message ended normally: the endpoint sent its finish reason (and usage, when asked for)."""

    finish_reason: str
    usage: Usage | None = None
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    """The endpoint accepted the request and started streaming (emitted first, when the client is asked to).

    ``headers`` are the response headers with lower-case names; ``url`` is the URL the request went to;
    ``response_id`` is the gateway's response id header when there is one.
    """

    response_id: str | None
    headers: Mapping[str, str]
    url: str


@dataclass(frozen=True, slots=True)
class ToolResultServed:
    """The gateway served tool call ``index`` (id ``tool_call_id``) from its cache with ``output``.

    The client must not execute that call; the response continues with the next assistant message.
    ``segment`` is the number of the message that follows (the first message of a response is 0).
    """

    index: int
    tool_call_id: str
    name: str
    output: str
    segment: int = 0


@dataclass(frozen=True, slots=True)
class ClientItem:
    """An output item the caller runs itself that is not a function call (a Responses ``custom_tool_call``,
    ``computer_call``, ``local_shell_call``, ...), or a hosted ``mcp_call`` (the API calls a remote MCP server,
    which may write): an effect no session tool stands for, after the calls before it. Also
    :data:`NAME_IN_PIECES`: a call's name came in more than one piece, which client libraries put together
    differently (the Python SDK joins them, others keep one): the call the caller runs is not known for sure."""

    kind: str


NAME_IN_PIECES = "tool_name_in_pieces"
"""The :class:`ClientItem` kind of a call whose name came in pieces (an agent that runs the name as assembled
here has nothing to doubt; a caller that assembles it itself may run another tool)."""


LLMEvent = (TextDelta | ToolCallStarted | ToolCallArgumentsDelta | ToolCallClosed | MessageDone | ResponseStarted
            | ToolResultServed | ClientItem)
"""Any event of a streamed message."""
