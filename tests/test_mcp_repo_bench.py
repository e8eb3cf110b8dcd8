"""The repo suite of the MCP bench: its generated repository and tasks repeat for a seed, and one small run
of its three arms against the real filesystem and git servers is identical to direct with no early writes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.bench.mcp.repo import RepoShape, make_repository, make_traces
from forethought.bench.mcp.repo_bench import RepoBenchConfig, repo_bench
from test_mcp_proxy import NODE_FS, VENV_MCP, _need

ROOT = Path(__file__).resolve().parents[1]
SMALL = RepoShape(packages=2, modules=3, functions=3, commits=4, seed=5)
WRITES = {"edit_file", "write_file", "git_add", "git_commit"}


def _head(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_repository_and_its_tasks_repeat_for_a_seed(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    files_a = make_repository(tmp_path / "a", SMALL)
    files_b = make_repository(tmp_path / "b", SMALL)
    assert files_a == files_b and _head(tmp_path / "a") == _head(tmp_path / "b")
    root = tmp_path / "live"
    traces = make_traces(root, files_a, 6, seed=1)
    assert traces == make_traces(root, files_a, 6, seed=1)
    assert traces != make_traces(root, files_a, 6, seed=2)
    tools = [c.tool for t in traces for c in t]
    assert WRITES & set(tools) and {"read_text_file", "git_status", "git_log"} <= set(tools)
    for trace in traces:  # every edit replaces a line the generator wrote into that file
        for call in trace:
            if call.tool == "edit_file":
                path = str(call.arguments["path"])[len(str(root)) + 1:]
                assert call.arguments["edits"][0]["oldText"] in files_a[path]


async def test_one_task_through_every_arm_is_identical_with_no_early_writes() -> None:
    if shutil.which("node") is None or shutil.which("git") is None:
        pytest.skip("node and git are needed for the real filesystem and git servers")
    _need(NODE_FS, "@modelcontextprotocol/server-filesystem")
    _need(VENV_MCP / "mcp-server-git", "mcp-server-git")
    results = await repo_bench(RepoBenchConfig(tasks=1, think_s=0.0, shape=SMALL, project=str(ROOT)))
    assert results["equivalent"] is True
    arms = results["arms"]
    assert set(arms) == {"direct", "proxy-cold", "proxy-warm"}
    calls = arms["direct"]["calls"]
    assert calls > 5 and arms["direct"]["upstream_calls"] == calls
    for arm in ("proxy-cold", "proxy-warm"):
        assert arms[arm]["early_non_read_runs"] == 0 and arms[arm]["calls"] == calls
        assert calls <= arms[arm]["upstream_calls"] <= 1.5 * calls
