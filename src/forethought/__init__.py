"""forethought: speculative tool execution for tool-using LLM agents.

This module is the public surface: every name a user constructs or catches is exported here (see
``__all__``); framework adapters live in :mod:`forethought.integrations`. Every other module is private
and may move between releases.
"""

from typing import TYPE_CHECKING

from forethought._core.calls import ToolCall
from forethought._core.clock import Clock, FakeClock, SystemClock
from forethought._core.entry import CallKind, CallOutcome, SpeculationTicket, TicketStatus
from forethought._core.policy import BreakerPolicy, Policy, ToolPolicy
from forethought._core.policy_file import load_policy
from forethought._core.runtime import Runtime, Session
from forethought._core.tools import Effect, PartialRule, StateCell, Tool, tool
from forethought._version import __version__
from forethought.errors import (
    CallError,
    ForethoughtError,
    InvalidArgumentsError,
    LLMError,
    MalformedArgumentsJSONError,
    PolicyError,
    PredictorError,
    SnapshotError,
    StreamDroppedError,
    ToolDefinitionError,
    ToolExecutionError,
    UnknownToolError,
    UpstreamError,
    WorkloadError,
)
from forethought.sandbox import FileWorkspace, ObjectState
from forethought.telemetry import EventKind, SessionStats, Telemetry

if TYPE_CHECKING:
    from forethought.agent.loop import Agent, AgentResult, AgentStream, StepTiming, ToolRecord
    from forethought.agent.pacing import ReturnPacer
    from forethought.code import CodeExecutor, CodePredictor, ExecResult, PlainExecutor, ShadowLimits
    from forethought.code.defaults import code_policy
    from forethought.code.harness import PythonTool
    from forethought.llm import (
        AnthropicMessagesClient,
        FakeLLMClient,
        LLMClient,
        OpenAIChatClient,
        OpenAIResponsesClient,
        scripted_message,
    )
    from forethought.predictors import ModelSpeculator, ObservedCall, Prediction, PredictionContext, Predictor
    from forethought.predictors.offload import OffloadedPredictor
    from forethought.predictors.patterns import PatternConfig, PatternPredictor
    from forethought.serve.scripted import serve_scripted

_LAZY = {
    **dict.fromkeys(("Agent", "AgentResult", "AgentStream", "StepTiming", "ToolRecord"), "forethought.agent.loop"),
    **dict.fromkeys(("CodeExecutor", "CodePredictor", "ExecResult", "PlainExecutor", "ShadowLimits"),
                    "forethought.code"),
    "PythonTool": "forethought.code.harness",
    "code_policy": "forethought.code.defaults",
    "OffloadedPredictor": "forethought.predictors.offload",
    "ReturnPacer": "forethought.agent.pacing",
    **dict.fromkeys(("AnthropicMessagesClient", "FakeLLMClient", "LLMClient", "OpenAIChatClient",
                     "OpenAIResponsesClient", "scripted_message"), "forethought.llm"),
    **dict.fromkeys(("ModelSpeculator", "ObservedCall", "Prediction", "PredictionContext", "Predictor"),
                    "forethought.predictors"),
    **dict.fromkeys(("PatternConfig", "PatternPredictor"), "forethought.predictors.patterns"),
    "serve_scripted": "forethought.serve.scripted",
}
"""Public names imported on first use: the LLM clients and everything that uses them pull in the openai SDK
(about 0.6 s), and ``serve_scripted`` needs ``forethought[serve]``; ``import forethought`` stays light."""


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forethought' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Agent",
    "AgentResult",
    "AgentStream",
    "AnthropicMessagesClient",
    "BreakerPolicy",
    "CallError",
    "CallKind",
    "CallOutcome",
    "Clock",
    "CodeExecutor",
    "CodePredictor",
    "Effect",
    "EventKind",
    "ExecResult",
    "FakeClock",
    "FakeLLMClient",
    "FileWorkspace",
    "ForethoughtError",
    "InvalidArgumentsError",
    "LLMClient",
    "LLMError",
    "MalformedArgumentsJSONError",
    "ModelSpeculator",
    "ObjectState",
    "ObservedCall",
    "OffloadedPredictor",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "PartialRule",
    "PatternConfig",
    "PatternPredictor",
    "PlainExecutor",
    "Policy",
    "PolicyError",
    "Prediction",
    "PredictionContext",
    "Predictor",
    "PredictorError",
    "PythonTool",
    "ReturnPacer",
    "Runtime",
    "Session",
    "SessionStats",
    "ShadowLimits",
    "SnapshotError",
    "SpeculationTicket",
    "StateCell",
    "StepTiming",
    "StreamDroppedError",
    "SystemClock",
    "Telemetry",
    "TicketStatus",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolExecutionError",
    "ToolPolicy",
    "ToolRecord",
    "UnknownToolError",
    "UpstreamError",
    "WorkloadError",
    "__version__",
    "code_policy",
    "load_policy",
    "scripted_message",
    "serve_scripted",
    "tool",
]
