"""Policy tables apply under every handshake the ``mcp`` SDK speaks, against the third-party servers (issue 28):
each server is trusted only by its own ``[servers.NAME]`` table (the name it gives itself), the client opens
its session each way the server accepts, and the proxy must learn that name, run early only the server's
read-only tools, and give exactly what a direct client gets."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.mcp.effects import policy_from_data
from mcp_handshakes import direct, proxied
from test_mcp_proxy import NODE_FS, VENV_MCP, VENV_SQLITE, _dump, _make_repo, _need


def _git(tmp_path: Path) -> tuple[list[str], str, list[tuple[str, dict[str, Any]]], set[str]]:
    _need(VENV_MCP / "mcp-server-git", "mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    repo = _make_repo(tmp_path / "repo")
    calls = [(name, {"repo_path": str(repo), **extra}) for _ in range(4)
             for name, extra in (("git_status", {}), ("git_log", {"max_count": 2}))]
    return [str(VENV_MCP / "mcp-server-git"), "--repository", str(repo)], "mcp-git", calls, {"git_status", "git_log"}


def _time(tmp_path: Path) -> tuple[list[str], str, list[tuple[str, dict[str, Any]]], set[str]]:
    _need(VENV_MCP / "mcp-server-time", "mcp-server-time")
    calls = [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": z})
             for z in ("Europe/Paris", "Asia/Tokyo") * 4]
    return [str(VENV_MCP / "mcp-server-time"), "--local-timezone", "UTC"], "mcp-time", calls, {"convert_time"}


def _sqlite(tmp_path: Path) -> tuple[list[str], str, list[tuple[str, dict[str, Any]]], set[str]]:
    _need(VENV_SQLITE / "mcp-server-sqlite", "mcp-server-sqlite")
    calls = [(name, args) for _ in range(4) for name, args in (("list_tables", {}),
                                                              ("read_query", {"query": "SELECT 1 AS one"}))]
    return [str(VENV_SQLITE / "mcp-server-sqlite"), "--db-path", str(tmp_path / "db.sqlite")], "sqlite", calls, \
        {"list_tables", "read_query"}


def _filesystem(tmp_path: Path) -> tuple[list[str], str, list[tuple[str, dict[str, Any]]], set[str]]:
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH: the npm filesystem server cannot run")
    _need(NODE_FS, "@modelcontextprotocol/server-filesystem")
    root = (tmp_path / "fs").resolve()
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    calls = [(name, {"path": str(p)}) for _ in range(4)
             for name, p in (("list_directory", root), ("read_text_file", root / "a.txt"))]
    return ["node", str(NODE_FS), str(root)], "secure-filesystem-server", calls, {"list_directory", "read_text_file"}


SERVERS = {"git": (_git, ("auto", "discover", "pinned", "legacy")), "time": (_time, ("auto", "pinned")),
           "sqlite": (_sqlite, ("auto", "legacy")), "filesystem": (_filesystem, ("auto", "legacy"))}
CASES = [(server, handshake) for server, (_, handshakes) in SERVERS.items() for handshake in handshakes]


@pytest.mark.parametrize(("server", "handshake"), CASES, ids=[f"{s}-{h}" for s, h in CASES])
async def test_a_server_s_own_table_applies_whatever_the_handshake(tmp_path: Path, server: str,
                                                                    handshake: str) -> None:
    command, name, calls, reads = SERVERS[server][0](tmp_path)

    async def run(session: Any) -> list[str]:
        out = [_dump(await session.list_tools())]
        for tool, arguments in calls:
            out.append(_dump(await session.call_tool(tool, arguments)))
            await asyncio.sleep(0.02)
        return out

    async with direct(command, handshake) as session:
        expected = await run(session)
    read_only = {t: {"effect": "read_only"} for t in reads}  # the sqlite server annotates nothing
    policy = policy_from_data({"servers": {name: {"trusted": True, "tools": read_only},
                                           "other": {"trusted": False}}})
    async with proxied(command, policy, handshake) as (session, handle):
        got = await run(session)
        learnt = handle.proxy.speculators[-1].server
    assert got == expected
    assert learnt == name
    assert handle.speculated and set(handle.speculated) <= reads


@pytest.mark.parametrize("server", list(SERVERS))
async def test_through_the_command_as_a_client_starts_it(tmp_path: Path, server: str) -> None:
    """``forethought mcp-proxy`` as a subprocess on stdio (its warm start, its own pipes) in front of each
    server: exactly what a direct client gets, and the exit line counts every call."""
    import sys

    from mcp import ClientSession, StdioServerParameters, stdio_client

    command, name, calls, reads = SERVERS[server][0](tmp_path)
    handshake = SERVERS[server][1][0]

    async def run(session: Any) -> list[str]:
        out = [_dump(await session.list_tools())]
        for tool, arguments in calls:
            out.append(_dump(await session.call_tool(tool, arguments)))
            await asyncio.sleep(0.02)
        return out

    async with direct(command, handshake) as session:
        expected = await run(session)
    policy = tmp_path / "policy.toml"
    tables = "".join(f'[servers."{name}".tools.{t}]\neffect = "read_only"\n' for t in sorted(reads))
    policy.write_text(f'[servers."{name}"]\ntrusted = true\n{tables}')
    proxy = [str(Path(sys.executable).with_name("forethought")), "mcp-proxy", "--memory", "--policy", str(policy),
             "--", *command]
    from mcp_handshakes import open_session

    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        params = StdioServerParameters(command=proxy[0], args=proxy[1:])
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await open_session(session, handshake)
            got = await run(session)
    assert got == expected
    for _ in range(100):  # the summary is the proxy's last word, once it has seen the client go
        lines = errlog.read_text().strip().splitlines()
        if lines and lines[-1].startswith("forethought mcp-proxy:"):
            break
        await asyncio.sleep(0.05)
    assert lines[-1].startswith(f"forethought mcp-proxy: {len(calls)} calls")
