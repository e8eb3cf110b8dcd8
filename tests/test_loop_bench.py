"""The loop bench runs every arm on both suites and checks equivalence itself: identical answers and final
states, no early write, and (daemon arms) the client's bytes equal to the upstream's. Tiny sizes; no speed is
asserted (speed is measured by the bench, docs/daemon.md has the figures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from forethought.bench.loop.arms import ARMS
from forethought.bench.loop.command import format_loop_results
from forethought.bench.loop.runner import LoopBenchConfig, run_loop_bench
from forethought.bench.loop.workload import noisy_script, notes_tasks

ROOT = Path(__file__).resolve().parents[1]


async def test_the_notes_suite_runs_every_arm_and_every_arm_is_equivalent() -> None:
    doc = await run_loop_bench(LoopBenchConfig(tasks=3, training=1, repeats=1, latency_s=0.02, time_scale=0.1))
    arms = doc["results"]["arms"]
    assert list(arms) == list(ARMS) and doc["results"]["equivalent"]
    for arm, result in arms.items():
        assert result["equivalent"] and result["early_non_read_runs"] == 0, arm
        assert result["calls"] == arms["direct"]["calls"] > 0
    assert all(arms[arm]["stream_unchanged"] for arm in ("daemon", "daemon+speculator", "oracle"))
    assert arms["oracle"]["hits"] > 0
    assert "daemon saving / proxy's" in format_loop_results(doc)
    assert doc["params"]["load_average"]["start"] and doc["params"]["workload"] == "loop"


async def test_the_real_servers_suite_runs_and_is_equivalent() -> None:
    fs = ROOT / ".cache/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    if not fs.exists() or not (ROOT / ".venv-mcp/bin/mcp-server-git").exists() or shutil.which("node") is None:
        pytest.skip("the filesystem and git MCP servers are not installed (run `make mcp-servers`)")
    doc = await run_loop_bench(LoopBenchConfig(suite="repo", tasks=1, training=0, repeats=1, time_scale=0.05,
                                               arms=("direct", "proxy", "daemon"), project=str(ROOT)))
    arms = doc["results"]["arms"]
    assert doc["results"]["equivalent"] and arms["daemon"]["stream_unchanged"]
    assert arms["daemon"]["hits"] > 0 and arms["daemon"]["early_non_read_runs"] == 0


def test_tasks_are_seeded_and_use_every_api() -> None:
    first, again = notes_tasks(6, seed=3), notes_tasks(6, seed=3)
    assert first == again and {t.wire for t in first} == {"messages", "responses", "chat"}
    assert notes_tasks(6, seed=4) != first


def test_the_speculators_script_is_wrong_at_about_its_error_rate() -> None:
    script = notes_tasks(1, seed=0)[0].script
    calls = [c for r in script["responses"] for c in r.get("calls", ())]
    wrong = sum(a != b for task in range(40)
                for a, b in zip(calls, [c for r in noisy_script(script, 0.3, task)["responses"]
                                        for c in r.get("calls", ())], strict=True))
    assert 0.15 < wrong / (40 * len(calls)) < 0.45
    assert noisy_script(script, 0.0, 1) == script
