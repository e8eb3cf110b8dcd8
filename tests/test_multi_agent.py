"""The multi-agent benchmark at a tiny scale: its JSON shape, equivalence per arm, and the process helper."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from forethought.bench.main import BenchConfig
from forethought.bench.multi_agent import ARMS, MultiAgentParams, run_multi_agent, tasks_for
from forethought.errors import ForethoughtError
from forethought.gateway.app import GatewayConfig, create_gateway
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.subprocess_server import serve_in_subprocess

TINY = MultiAgentParams(slots=2, cache_tokens=60_000, time_scale=0.01, processes=False, post_wait_s=1.0)


async def test_every_arm_at_every_agent_count_is_reported_and_equivalent(tmp_path: Path) -> None:
    config = BenchConfig(tool_latency_s=0.5, out_dir=str(tmp_path))
    doc = await run_multi_agent(config, agent_counts=(1, 3), tasks_per_agent=1, params=TINY,
                                json_path=tmp_path / "multi.json")
    assert json.loads((tmp_path / "multi.json").read_text()) == json.loads(json.dumps(doc, default=str))
    results = doc["results"]
    assert results["equivalent"] is True
    assert set(results["agents"]) == {"1", "3"}
    for arms in results["agents"].values():
        assert set(arms) == set(ARMS)
        for name, arm in arms.items():
            assert arm["tokens_per_s"] > 0 and arm["equivalent"] and arm["errors"] == 0
            assert 0 <= arm["slot_occupancy"] <= 1 and arm["prefill_tokens"] > 0
            assert arm["served_calls"] == arm["continuations"] if name == "engine-side" else arm["posts"] == 0
        assert arms["serial"]["time_saved"] == 0.0
        generated = {arm["generated_tokens"] for arm in arms.values()}
        assert len(generated) == 1  # every arm asked the engine for the same main-model tokens
    assert results["agents"]["3"]["engine-side"]["posts"] > 0
    engine = results["engine"]
    assert engine["main"]["max_concurrency"] == 2 and engine["main"]["time_scale"] == 0.01
    assert engine["api_overhead_s"] == TINY.api_overhead_s and doc["params"]["agent_counts"] == [1, 3]


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ForethoughtError):
        await run_multi_agent(BenchConfig(), agent_counts=(), params=TINY)
    with pytest.raises(ForethoughtError):
        await run_multi_agent(BenchConfig(workload="synthetic"), agent_counts=(1,), params=TINY)
    with pytest.raises(ValueError):
        MultiAgentParams(slots=0)
    with pytest.raises(ValueError):
        MultiAgentParams(time_scale=0)


def test_tasks_are_spread_and_cycled() -> None:
    trajectories = [Trajectory(f"t{i}", (Turn("u", ()),), ()) for i in range(4)]
    assert [t.id for _, t in tasks_for(trajectories, 2, 1)] == ["t0", "t2"]
    cycled = tasks_for(trajectories, 3, 2)
    assert [(r, t.id) for r, t in cycled][3:6] == [(0, "t3"), (1, "t0"), (1, "t1")]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


async def test_the_gateway_can_run_in_a_child_process() -> None:
    async with serve_in_subprocess(create_gateway, "http://127.0.0.1:9/v1", GatewayConfig(post_wait_s=0.2)) as url:
        health = await asyncio.to_thread(_get, url + "/health")
        stats = await asyncio.to_thread(_get, url + "/gateway/stats")
    assert health["status"] == "ok" and health["upstream"] == "http://127.0.0.1:9/v1"
    assert stats["responses"] == 0 and stats["process_cpu_s"] > 0
