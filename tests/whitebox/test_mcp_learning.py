"""After each answer the proxy guesses first and learns afterwards: the predictor is asked with the latest
call in its history, the guess's request is out before the predictor learns that call, and the call is
learned in the very context its prediction was made in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp_types import JSONRPCRequest

from forethought import Runtime, ToolCall
from forethought._core.versions import StateVersion
from forethought.mcp.effects import McpPolicy, ProxySettings
from forethought.mcp.naming import ServerName
from forethought.mcp.seams import CallReport
from forethought.mcp.speculation import SessionSpeculator
from forethought.mcp.upstream import Answer, UpstreamLink
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext

TOOLS = {"tools": [{"name": "read", "inputSchema": {"type": "object", "properties": {"k": {"type": "integer"}}},
                    "annotations": {"readOnlyHint": True}}]}


class Sink:
    """The upstream's write side: keeps what was sent, never answers (the guesses just wait)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, item: Any, /) -> None:
        self.sent.append(item)


class Recorder:
    """A predictor that proposes ``read(k=n+1)`` after n calls and writes down what it was asked, when."""

    name = "recorder"

    def __init__(self, link: UpstreamLink) -> None:
        self.link = link
        self.log: list[tuple[str, int, int]] = []
        self.asked: list[PredictionContext] = []
        self.learned_in: list[PredictionContext] = []

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        self.log.append(("predict", len(context.history), self.link.speculative_calls))
        self.asked.append(context)
        return [Prediction(ToolCall("read", {"k": len(context.history) + 1}), 1.0, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        self.log.append(("observe", len(context.history), self.link.speculative_calls))
        self.learned_in.append(context)


def _call(n: int) -> tuple[JSONRPCRequest, CallReport]:
    request = JSONRPCRequest(jsonrpc="2.0", id=n, method="tools/call", params={"name": "read", "arguments": {"k": n}})
    return request, CallReport(Answer(result={"content": [{"type": "text", "text": f"v{n}"}]}), "miss")


async def test_the_guess_goes_out_before_the_call_is_learned() -> None:
    link = UpstreamLink(Sink())
    recorder = Recorder(link)
    policy = McpPolicy(settings=ProxySettings(max_upstream_ratio=3.0)).trusting()
    runtime = Runtime(policy=policy.runtime)
    speculator = SessionSpeculator(link, policy, runtime, lambda _: (recorder, "fp"), StateVersion(), ServerName("s"))
    try:
        await speculator.tools_page(None, TOOLS)
        for n in (1, 2):
            speculator.calls += 1
            link.client_calls += 1
            await speculator.after_answer(*_call(n))
        # asked with the call in its history; learned it (in the context before it) once the guess was sent
        assert recorder.log == [("predict", 1, 0), ("observe", 0, 1), ("predict", 2, 1), ("observe", 1, 2)]
        assert recorder.learned_in[1] is recorder.asked[0]  # the call is learned where it was predicted
    finally:
        await speculator.close()
        runtime.close()
