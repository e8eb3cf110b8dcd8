"""One family of errors for forethought, grouped by cause.

Every error a user can meet derives from :class:`ForethoughtError`. Errors from the layers below (JSON
parsing, the OpenAI SDK, HTTP, a tool's own exception) are mapped to these at the boundary, so callers
catch one family.
"""

from __future__ import annotations


class ForethoughtError(Exception):
    """Base of every error raised by forethought."""


# --- calls and arguments -------------------------------------------------------------------------


class CallError(ForethoughtError):
    """A tool call is malformed: its name or arguments cannot be keyed or executed."""


class UnknownToolError(CallError):
    """The call names a tool that is not registered."""


class InvalidArgumentsError(CallError):
    """The call's arguments are not a JSON object, hold NaN/inf, or violate the tool's schema."""


class MalformedArgumentsJSONError(InvalidArgumentsError):
    """The model streamed argument text that is not valid JSON (or was cut off)."""


# --- tools -----------------------------------------------------------------------------------------


class ToolDefinitionError(ForethoughtError):
    """A tool was declared in a way forethought cannot use (bad schema, unsupported signature)."""


class ToolExecutionError(ForethoughtError):
    """The tool itself raised while running an authoritative call; ``__cause__`` holds its exception."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(f"tool {tool!r} failed: {message}")
        self.tool = tool


# --- speculation ----------------------------------------------------------------------------------


class SnapshotError(ForethoughtError):
    """A snapshot could not be taken, run against, or committed."""


# --- configuration ---------------------------------------------------------------------------------


class PolicyError(ForethoughtError):
    """A policy (file or object) is invalid; the message names the offending key or line."""


# --- models and streams ----------------------------------------------------------------------------


class LLMError(ForethoughtError):
    """The language-model endpoint failed for this turn."""


class StreamDroppedError(LLMError):
    """The streamed response ended without a finish reason (connection lost or server died)."""


class UpstreamError(LLMError):
    """The endpoint answered with an error status or an unparsable stream."""


# --- predictors ------------------------------------------------------------------------------------


class PredictorError(ForethoughtError):
    """A predictor could not be run as asked (not picklable for a worker process, its worker died,
    it was closed); the agent reports it and goes on without that predictor's guesses."""


# --- workloads -------------------------------------------------------------------------------------


class WorkloadError(ForethoughtError):
    """A workload could not be loaded (missing package, bad entry, unknown id)."""
