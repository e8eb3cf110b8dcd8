"""The ceiling of the MCP bench: a predictor that is told the trajectory's true next calls.

:class:`OraclePredictor` knows the calls a replay will make, in order, and proposes the next one (or the next
``depth`` ones) with confidence 1 the moment it is asked: zero prediction time, every guess right. It goes
through the proxy exactly as the pattern predictor does, so the proxy's policy still decides what may run
early (only the server's read-only tools), the upstream bound still holds and the runtime still prices the
guesses. Its time saved is what speculation after each result can hide at all on a workload; the other
arms are reported as a share of it. It is a bench arm only: a real proxy never knows the future. Its proxy
gets one request of slack in the upstream bound (:func:`oracle_settings`): a guess that is always right never
adds an upstream request, but the bound counts every guess as a possible miss, and in a session too short to
earn one it would keep the ceiling from guessing at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from forethought._core.calls import ToolCall
from forethought.mcp.effects import ProxySettings
from forethought.mcp.seams import PredictorFactory
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor

SOURCE = "oracle"


class OraclePredictor:
    """Proposes the next ``depth`` calls of a known sequence; learns only how far the session has got."""

    name = SOURCE

    def __init__(self, calls: Sequence[ToolCall], depth: int = 1) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self._calls = tuple(calls)
        self._depth = depth
        self.position = 0
        """Calls of the sequence the session has made so far."""

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        # The calls made so far: the history's (the proxy asks before it has the predictor learn the latest
        # call), or those learned when the history is cut to its latest calls.
        done = max(self.position, len(context.history))
        return [Prediction(call, 1.0, SOURCE) for call in self._calls[done:done + self._depth]]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        self.position += 1


def oracle_factory(calls: Sequence[ToolCall], depth: int = 1) -> PredictorFactory:
    """A proxy's predictor factory that gives every session (re)built an oracle of ``calls``."""

    def build(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
        return OraclePredictor(calls, depth), SOURCE

    return build


def oracle_settings(settings: ProxySettings) -> ProxySettings:
    """``settings`` with the slack the oracle's proxy gets in the upstream bound (see the module docstring)."""
    return replace(settings, upstream_slack=max(1, settings.upstream_slack))
