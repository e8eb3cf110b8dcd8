"""The MCP bench's ceiling: the oracle predictor proposes the true next calls, and its arm runs through the
proxy like the others (only read-only tools early, identical answers, upstream within the bound)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import ToolCall
from forethought.bench.mcp.oracle import OraclePredictor, oracle_factory
from forethought.bench.mcp.runner import McpBenchConfig
from forethought.predictors.base import ObservedCall, PredictionContext

CALLS = [ToolCall("ls", {}), ToolCall("cd", {"folder": "a"}), ToolCall("cat", {"file_name": "x"})]
CONTEXT = PredictionContext(session_id="s", messages=(), user_message="")


async def test_the_oracle_proposes_the_next_calls_and_nothing_past_the_end() -> None:
    oracle = OraclePredictor(CALLS, depth=2)
    assert [p.call for p in await oracle.predict(CONTEXT)] == CALLS[:2]
    after_one = PredictionContext(session_id="s", messages=(), user_message="", history=(ObservedCall(CALLS[0], ""),))
    assert [p.call for p in await oracle.predict(after_one)] == CALLS[1:3]  # asked before it learns the call
    for call in CALLS:
        oracle.observe(CONTEXT, ObservedCall(call, "out"))
    assert await oracle.predict(CONTEXT) == []
    predictor, fingerprint = oracle_factory(CALLS)({})
    assert [p.confidence for p in await predictor.predict(CONTEXT)] == [1.0] and fingerprint == "oracle"


def test_unknown_arms_and_depths_are_refused() -> None:
    with pytest.raises(ValueError):
        McpBenchConfig(arms=("direct", "psychic"))
    with pytest.raises(ValueError):
        OraclePredictor(CALLS, depth=0)


async def test_the_oracle_arm_hits_only_reads_and_stays_identical() -> None:
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make installs it)")
    from forethought.bench.mcp.runner import mcp_bench

    # tools that answer at once never pay for a guess: a little latency, for the oracle to hide
    results = await mcp_bench(McpBenchConfig(trajectories=1, training=1, think_s=0.05, latency_s=0.05,
                                             arms=("direct", "oracle")))
    assert results["equivalent"] is True
    oracle = results["arms"]["oracle"]
    assert oracle["early_non_read_runs"] == 0 and oracle["calls"] == results["arms"]["direct"]["calls"]
    assert oracle["hits"] >= 1 and oracle["upstream_ratio"] <= 1.5
    assert oracle["speculation"]["launched"] >= oracle["hits"]
    assert results["timing"]["read_calls"] <= results["timing"]["calls"]
