"""When a guessed result may still be served, against real servers: a validator the policy names
(git_status before git_diff_unstaged) catches a change the proxy cannot see, a validator that is not a read
keeps its tool from running early, and proxies sharing a store share a write clock, so a write through the
filesystem server's proxy stops the git server's proxy serving a guess.

Each test also runs the arm without the mechanism and shows the stale answer it prevents, so the test fails
if the mechanism does nothing. Guesses are launched white-box (the predictor's are off).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import Effect, Policy, ToolCall
from forethought._core.policy import ServerPolicy, ValidatorSpec
from forethought.mcp.effects import McpPolicy, ProxySettings, policy_from_data
from forethought.mcp.errors import McpPolicyError
from forethought.mcp.proxy import Proxy
from test_mcp_proxy import NODE_FS, VENV_MCP, _dump, _make_repo, _need, direct, proxied

WAIT_S = 30.0


async def _guess(proxy: Proxy, name: str, arguments: dict[str, Any]) -> None:
    """Launch a guess of ``name(arguments)`` and wait until it has its answer."""
    session = proxy.speculators[-1].session
    assert session is not None, "the client has not listed the tools yet"
    ticket = session.speculate(ToolCall(name, arguments), source="test")
    assert ticket.status == "launched", ticket
    await session.wait_speculations(WAIT_S)


def _policy(validators: dict[str, ValidatorSpec] | None = None) -> McpPolicy:
    return McpPolicy(Policy(servers={"*": ServerPolicy(trusted=True, validators=validators or {})}),
                     ProxySettings(guesses=0))


def _restore(repo: Path, name: str) -> None:
    subprocess.run(["git", "checkout", "-q", "--", name], cwd=repo, check=True)


def _git(repo: Path) -> list[str]:
    _need(VENV_MCP / "mcp-server-git", "mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    return [str(VENV_MCP / "mcp-server-git"), "--repository", str(repo)]


async def test_a_named_validator_catches_a_change_made_outside_the_proxy(tmp_path: Path) -> None:
    repo = _make_repo(tmp_path / "repo")
    command = _git(repo)
    args = {"repo_path": str(repo)}
    seen: dict[bool, tuple[str, str, Any, int]] = {}
    fresh = ""
    for validated in (False, True):
        # git_log and git_show name validators that are not reads of this server: they never run early
        validators = {"git_diff_unstaged": ValidatorSpec("git_status"), "git_log": ValidatorSpec("git_commit"),
                      "git_show": ValidatorSpec("no_such_tool")} if validated else {}
        async with proxied(command, _policy(validators)) as (session, handle):
            await session.list_tools()
            effects = handle.proxy.speculators[-1].decisions
            assert effects["git_log"].resolved.effect is Effect.READ_ONLY
            assert effects["git_log"].early is not validated
            assert effects["git_show"].early is not validated and effects["git_status"].early
            await session.call_tool("git_status", args)
            await _guess(handle.proxy, "git_diff_unstaged", args)
            unchanged = _dump(await session.call_tool("git_diff_unstaged", args))  # nothing changed: served
            await _guess(handle.proxy, "git_diff_unstaged", args)
            (repo / "f1.txt").write_text("edited outside the proxy\n")  # the status changes too
            changed = _dump(await session.call_tool("git_diff_unstaged", args))
        if not fresh:  # the same change in both arms: one direct look at it
            async with direct(command) as plain:
                fresh = _dump(await plain.call_tool("git_diff_unstaged", args))
        _restore(repo, "f1.txt")
        seen[validated] = (unchanged, changed, handle.stats, handle.proxy.links[-1].validator_calls)
        assert "edited outside" in fresh and "edited outside" not in unchanged
        if validated:
            assert changed == fresh
        else:
            assert changed == unchanged  # without the validator the stale guess is served
    assert seen[True][2].hits == 1 and seen[False][2].hits == 2
    assert seen[True][3] == 4 and seen[False][3] == 0  # git_status at each guess's start and at its claim
    assert seen[True][0] == seen[False][0]


async def test_a_write_through_one_proxy_stales_the_guesses_of_another_sharing_its_store(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH: the npm filesystem server cannot run")
    _need(NODE_FS, "@modelcontextprotocol/server-filesystem")
    repo = _make_repo(tmp_path / "repo").resolve()
    git, fs = _git(repo), ["node", str(NODE_FS), str(repo)]
    args = {"repo_path": str(repo)}
    served: dict[bool, str] = {}
    fresh = ""
    for shared in (False, True):
        stores = (tmp_path / "one.sqlite", tmp_path / "one.sqlite") if shared else (None, None)
        async with proxied(git, _policy(), store=stores[0]) as (git_session, git_handle), \
                proxied(fs, _policy(), store=stores[1]) as (fs_session, _):
            await git_session.list_tools()
            await fs_session.list_tools()
            before = _dump(await git_session.call_tool("git_status", args))
            await _guess(git_handle.proxy, "git_status", args)
            await fs_session.call_tool("write_file", {"path": str(repo / "f2.txt"), "content": "written\n"})
            served[shared] = _dump(await git_session.call_tool("git_status", args))
        if not fresh:  # the same write in both arms: one direct look at it
            async with direct(git) as plain:
                fresh = _dump(await plain.call_tool("git_status", args))
        _restore(repo, "f2.txt")
        assert "f2.txt" in fresh and "f2.txt" not in before
        assert (served[shared] == fresh) is shared  # apart, the git proxy serves its stale guess
        assert git_handle.stats.hits == (0 if shared else 1)


def test_validators_in_a_policy_file() -> None:
    policy = policy_from_data({"servers": {"git": {"trusted": True, "tools": {
        "git_diff_unstaged": {"validator": "git_status", "ttl_s": 5},
        "git_log": {"validator": {"tool": "git_status", "copy": ["repo_path"], "arguments": {"x": 1}}}}}}})
    server = policy.runtime.server("git")
    assert server.validators["git_diff_unstaged"] == ValidatorSpec("git_status")
    assert server.tools["git_diff_unstaged"].ttl_s == 5
    spec = server.validators["git_log"]
    assert spec.arguments_for({"repo_path": "/r", "max_count": 3}, {}) == {"repo_path": "/r", "x": 1}
    by_schema = server.validators["git_diff_unstaged"]
    assert by_schema.arguments_for({"repo_path": "/r", "context_lines": 3},
                                   {"properties": {"repo_path": {"type": "string"}}}) == {"repo_path": "/r"}
    for bad in ({"tool": ""}, {"tool": "x", "copy": "repo_path"}, {"tool": "x", "when": 1}, 3):
        with pytest.raises(McpPolicyError, match="validator"):
            policy_from_data({"servers": {"git": {"tools": {"git_log": {"validator": bad}}}}})
