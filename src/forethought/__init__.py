"""forethought: speculative tool execution for tool-using LLM agents.

The public surface: :class:`ToolCall`, :class:`Tool`, :class:`Effect`, :func:`tool`, :class:`Runtime`,
:class:`Policy`, and (once imported) :class:`Agent`. Everything else may move.
"""

from forethought._calls import ToolCall
from forethought._policy import Policy, ToolPolicy, load_policy
from forethought._runtime import CallOutcome, Runtime, Session, SessionStats, SpeculationTicket
from forethought._tools import Effect, PartialRule, Tool, tool
from forethought._version import __version__
from forethought.errors import ForethoughtError

__all__ = [
    "CallOutcome",
    "Effect",
    "ForethoughtError",
    "PartialRule",
    "Policy",
    "Runtime",
    "Session",
    "SessionStats",
    "SpeculationTicket",
    "Tool",
    "ToolCall",
    "ToolPolicy",
    "__version__",
    "load_policy",
    "tool",
]
