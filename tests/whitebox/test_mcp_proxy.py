"""The MCP proxy against real MCP servers nobody here wrote (plus one probe server for progress, cancellation
and crashes): results byte-identical to a direct client, writes never early, the upstream's own count of
calls, and an upstream crash answered with a clear error.

Each test starts the servers it needs (`make mcp-servers` installs them into their own environments); a test
whose server is missing skips and says which `make` target provides it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

from forethought import Effect, Policy, ToolPolicy  # noqa: E402
from forethought._core.policy import ServerPolicy  # noqa: E402
from forethought.mcp.effects import McpPolicy  # noqa: E402
from forethought.mcp.proxy import Proxy, ProxyConfig  # noqa: E402
from forethought.mcp.stats import ProxyStats  # noqa: E402
from mcp_handshakes import free_guesses  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENV_MCP = ROOT / ".venv-mcp" / "bin"
VENV_SQLITE = ROOT / ".venv-mcp-sqlite" / "bin"
NODE_FS = ROOT / ".cache" / "mcp-servers" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / \
    "index.js"
PROBE = Path(__file__).parent.with_name("mcp_servers") / "probe_server.py"


def _need(path: Path, what: str) -> None:
    if not path.exists():
        pytest.skip(f"{what} is not installed at {path} (run `make mcp-servers`)")


def _dump(result: Any) -> str:
    return json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)


@contextlib.asynccontextmanager
async def direct(command: Sequence[str], modern: bool = False) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=command[0], args=list(command[1:]))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await (session.discover() if modern else session.initialize())
        yield session


class Proxied:
    """A client session through an in-process proxy; ``stats`` is set when the session has ended."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.stats = ProxyStats()
        self.speculated: list[str] = []


@contextlib.asynccontextmanager
async def proxied(command: Sequence[str], policy: McpPolicy | None = None, store: Path | None = None,
                  modern: bool = False, in_process: bool = False, settle: bool = False
                  ) -> AsyncIterator[tuple[ClientSession, Proxied]]:
    """With ``settle``, each ``call_tool`` returns once the proxy has made the guesses its answer owes, so a
    test's hits do not depend on how fast a busy machine runs the predictor's worker. These servers answer in
    milliseconds, faster than a guess costs: guesses are priced free (:func:`mcp_handshakes.free_guesses`)."""
    proxy = Proxy(ProxyConfig(command=tuple(command), policy=free_guesses(policy or McpPolicy()), store=store,
                              in_process=in_process))
    handle = Proxied(proxy)
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))

    try:
        async with ClientSession(from_proxy, to_proxy) as session:
            await (session.discover() if modern else session.initialize())
            _ready_after_listing(session, proxy)
            if settle:
                _settled_after_calls(session, proxy)
            yield session, handle
    finally:
        to_proxy.close()
        handle.stats = await asyncio.wait_for(serving, 30)
        handle.speculated = list(proxy.links[-1].speculative_tools) if proxy.links else []
        proxy.close()


def _waiting_after(session: ClientSession, method: str, wait: Callable[[], Awaitable[None]]) -> None:
    """Each call of ``session.<method>`` returns once ``wait()`` has, too (within 60 s)."""
    plain = getattr(session, method)

    async def waited(*args: Any, **kwargs: Any) -> Any:
        result = await plain(*args, **kwargs)
        await asyncio.wait_for(wait(), 60)
        return result

    setattr(session, method, waited)


def _ready_after_listing(session: ClientSession, proxy: Proxy) -> None:
    """Each ``list_tools`` of ``session`` returns once the proxy's predictor worker has started, so that a
    test's first guesses do not race the worker's start (the bench waits the same way)."""
    _waiting_after(session, "list_tools", proxy.ready)


def _settled_after_calls(session: ClientSession, proxy: Proxy) -> None:
    """Each ``call_tool`` of ``session`` returns once the proxy has made the guesses its answer owes."""
    _waiting_after(session, "call_tool", proxy.settled)


def _trusting(*read_only: str) -> McpPolicy:
    tools = {name: ToolPolicy(effect=Effect.READ_ONLY) for name in read_only}
    return McpPolicy(Policy(servers={"*": ServerPolicy(trusted=True, tools=tools)}))


# --- sqlite: read_query may run early, write_query never ---------------------------------------------------

SQL_STEPS = 6


async def _sqlite_session(session: ClientSession) -> list[str]:
    out = [_dump(await session.list_tools())]
    out.append(_dump(await session.call_tool("create_table", {"query": "CREATE TABLE t (id INTEGER, v TEXT)"})))
    for i in range(SQL_STEPS):
        out.append(_dump(await session.call_tool("list_tables", {})))
        out.append(_dump(await session.call_tool("describe_table", {"table_name": "t"})))
        out.append(_dump(await session.call_tool("read_query", {"query": "SELECT COUNT(*) AS n FROM t"})))
        out.append(_dump(await session.call_tool("write_query", {"query": f"INSERT INTO t VALUES ({i}, 'v{i}')"})))
        await asyncio.sleep(0.05)  # think time: what speculation overlaps
    out.append(_dump(await session.call_tool("read_query", {"query": "SELECT * FROM nope"})))  # an error result
    return out


def _rows(db: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT id, v FROM t ORDER BY rowid").fetchall()


async def test_sqlite_results_identical_and_writes_never_early(tmp_path: Path) -> None:
    _need(VENV_SQLITE / "mcp-server-sqlite", "mcp-server-sqlite")
    server = str(VENV_SQLITE / "mcp-server-sqlite")
    async with direct([server, "--db-path", str(tmp_path / "direct.db")]) as session:
        expected = await _sqlite_session(session)
    policy = _trusting("read_query", "list_tables", "describe_table")
    async with proxied([server, "--db-path", str(tmp_path / "proxy.db")], policy, settle=True) as (session, handle):
        got = await _sqlite_session(session)
    assert got == expected
    assert _rows(tmp_path / "proxy.db") == _rows(tmp_path / "direct.db")  # every insert ran exactly once
    assert handle.speculated, "the proxy never guessed"
    assert set(handle.speculated) <= {"read_query", "list_tables", "describe_table"}
    stats = handle.stats
    assert stats.calls == 2 + 4 * SQL_STEPS
    assert stats.hits > 0
    assert handle.proxy.refusals["predicted too late"] == 0
    assert stats.hits + stats.misses + stats.passthrough == stats.calls
    assert stats.speculative_calls == len(handle.speculated)


# --- untrusted servers: nothing runs early ------------------------------------------------------------------


async def _git_session(session: ClientSession, repo: Path) -> list[str]:
    out = []
    for _ in range(4):
        for name, arguments in (("git_status", {}), ("git_log", {"max_count": 3}), ("git_diff_unstaged", {})):
            out.append(_dump(await session.call_tool(name, {"repo_path": str(repo), **arguments})))
            await asyncio.sleep(0.02)  # think time: a guess is predicted (by the worker) before the next call
    return out


def _make_repo(path: Path) -> Path:
    path.mkdir()
    env = {"GIT_AUTHOR_DATE": "2020-01-01T00:00:00", "GIT_COMMITTER_DATE": "2020-01-01T00:00:00"}
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "T"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    for i in range(3):
        (path / f"f{i}.txt").write_text(f"line {i}\n")
        subprocess.run(["git", "add", "."], cwd=path, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"commit {i}"], cwd=path, check=True,
                       env={**dict(__import__("os").environ), **env})
    (path / "f0.txt").write_text("changed\n")
    return path


async def test_git_untrusted_runs_nothing_early_trusted_only_reads_identical(tmp_path: Path) -> None:
    _need(VENV_MCP / "mcp-server-git", "mcp-server-git")
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    repo = _make_repo(tmp_path / "repo")
    command = [str(VENV_MCP / "mcp-server-git"), "--repository", str(repo)]
    async with direct(command) as session:
        expected = await _git_session(session, repo)
    async with proxied(command) as (session, untrusted):  # default policy: no server is trusted
        assert await _git_session(session, repo) == expected
    assert untrusted.speculated == []
    assert untrusted.stats.speculative_calls == 0 and untrusted.stats.hits == 0
    assert untrusted.stats.misses + untrusted.stats.passthrough == len(expected)
    async with proxied(command, McpPolicy().trusting(), settle=True) as (session, trusted):
        await session.list_tools()
        assert await _git_session(session, repo) == expected
    assert trusted.stats.hits > 0
    assert set(trusted.speculated) <= {"git_status", "git_log", "git_diff_unstaged", "git_diff_staged",
                                       "git_diff", "git_show", "git_branch"}


# --- time and filesystem ------------------------------------------------------------------------------------


async def test_time_convert_identical(tmp_path: Path) -> None:
    _need(VENV_MCP / "mcp-server-time", "mcp-server-time")
    command = [str(VENV_MCP / "mcp-server-time"), "--local-timezone", "UTC"]

    async def run(session: ClientSession) -> list[str]:
        out = [_dump(await session.list_tools())]
        for zone in ("Europe/Paris", "Asia/Tokyo", "Europe/Paris", "Asia/Tokyo"):
            out.append(_dump(await session.call_tool("convert_time", {
                "source_timezone": "UTC", "time": "12:00", "target_timezone": zone})))
        out.append(_dump(await session.call_tool("convert_time", {
            "source_timezone": "Nowhere/Else", "time": "12:00", "target_timezone": "UTC"})))
        return out

    async with direct(command) as session:
        expected = await run(session)
    async with proxied(command, McpPolicy().trusting()) as (session, _):
        assert await run(session) == expected


async def _fs_session(session: ClientSession, root: Path) -> list[str]:
    out = [_dump(await session.list_tools())]
    for i in range(3):
        out.append(_dump(await session.call_tool("list_directory", {"path": str(root)})))
        out.append(_dump(await session.call_tool("read_text_file", {"path": str(root / "a.txt")})))
        out.append(_dump(await session.call_tool("write_file", {"path": str(root / f"w{i}.txt"),
                                                                "content": f"w{i}"})))
        await asyncio.sleep(0.05)
    return out


async def test_filesystem_identical_and_writes_never_early(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH: the npm filesystem server cannot run")
    _need(NODE_FS, "@modelcontextprotocol/server-filesystem")
    results = []
    for arm in ("direct", "proxy"):
        root = (tmp_path / "fs").resolve()
        if root.exists():
            shutil.rmtree(root)
        root.mkdir()
        (root / "a.txt").write_text("hello\n")
        command = ["node", str(NODE_FS), str(root)]
        if arm == "direct":
            async with direct(command) as session:
                results.append(await _fs_session(session, root))
        else:
            async with proxied(command, McpPolicy().trusting(), settle=True) as (session, handle):
                results.append(await _fs_session(session, root))
    assert results[0] == results[1]
    assert "write_file" not in handle.speculated
    assert handle.proxy.refusals["predicted too late"] == 0  # settled: every guess was made before the next call
    assert handle.stats.hits > 0


# --- progress, cancellation, errors, crashes (the probe server) --------------------------------------------


def _probe(log: Path) -> list[str]:
    return [sys.executable, str(PROBE), str(log)]


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_progress_passes_through(tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    async with proxied(_probe(tmp_path / "log"), McpPolicy().trusting()) as (session, _):
        await session.list_tools()
        result = await session.call_tool("counted", {"steps": 3}, progress_callback=progress)
    assert _dump(result) == _dump(type(result)(content=result.content, structured_content=result.structured_content))
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


async def test_cancellation_reaches_upstream(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with proxied(_probe(log)) as (session, _):
        await session.list_tools()
        with anyio.move_on_after(0.5):
            await session.call_tool("slow", {"seconds": 30})
        for _ in range(200):  # the upstream notes the cancellation when it arrives
            if any(e["event"] == "cancelled" for e in _events(log)):
                break
            await asyncio.sleep(0.02)
        assert (await session.call_tool("lookup", {"key": "k"})).content[0].text == "value-of-k"  # type: ignore[union-attr]
    assert any(e["event"] == "cancelled" for e in _events(log))


async def test_tool_errors_never_served_from_a_guess(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with proxied(_probe(log), McpPolicy().trusting()) as (session, handle):
        await session.list_tools()
        answers = []
        for _ in range(4):
            answers.append(await session.call_tool("failing", {"key": "x"}))
            answers.append(await session.call_tool("lookup", {"key": "y"}))
            await asyncio.sleep(0.05)
    assert all(a.is_error for a in answers[::2]) and not any(a.is_error for a in answers[1::2])
    calls = [e for e in _events(log) if e["event"] == "call" and e["tool"] == "failing"]
    # every client call of the failing tool reached the upstream: a failed guess is never served
    assert len(calls) >= 4
    assert handle.stats.hits <= 4  # only lookup can be a hit


async def test_survives_upstream_crash_with_clear_error(tmp_path: Path) -> None:
    async with proxied(_probe(tmp_path / "log"), McpPolicy().trusting()) as (session, _):
        await session.list_tools()
        with pytest.raises(MCPError, match="upstream MCP server is gone"):
            await session.call_tool("crash", {})
        for _ in range(2):  # the proxy is still there and says the same, for any request
            with pytest.raises(MCPError, match="upstream MCP server is gone"):
                await session.call_tool("lookup", {"key": "k"})
            with pytest.raises(MCPError, match="upstream MCP server is gone"):
                await session.list_tools()


async def test_store_persists_learning_between_sessions(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    policy = McpPolicy().trusting()
    for _ in range(2):
        async with proxied(_probe(tmp_path / "log"), policy, store=store) as (session, handle):
            await session.list_tools()
            for key in ("a", "b", "c"):
                await session.call_tool("lookup", {"key": key})
                await session.list_tools()  # listed again, unchanged: what was speculated stays
                await asyncio.sleep(0.05)
                await session.call_tool("counted", {"steps": 1})
    assert handle.stats.hits > 0  # the second session starts from what the first one stored
    with contextlib.closing(sqlite3.connect(store)) as conn:
        assert conn.execute("SELECT SUM(sessions), SUM(calls) FROM mcp_proxy_stats").fetchone() == (2, 12)


async def test_newest_stateless_revision_passes_through_and_speculates(tmp_path: Path) -> None:
    """2026-07-28: no handshake, every request carries its envelope; guesses carry the client's."""

    async def run(session: ClientSession) -> list[str]:
        out = [_dump(await session.list_tools())]
        for key in ("a", "b", "a", "b", "a", "b"):
            out.append(_dump(await session.call_tool("lookup", {"key": key})))
            await asyncio.sleep(0.05)
        return out

    async with direct(_probe(tmp_path / "direct.log"), modern=True) as session:
        assert session.discover_result is not None
        expected = await run(session)
    async with proxied(_probe(tmp_path / "proxy.log"), McpPolicy().trusting(), modern=True) as (session, handle):
        got = await run(session)
    assert got == expected
    assert handle.stats.hits > 0


async def test_tool_list_pages_and_list_changed_pass_through(tmp_path: Path) -> None:
    command = [sys.executable, str(Path(__file__).parent.with_name("mcp_servers") / "paged_server.py")]
    changed: list[str] = []

    async def run(session: ClientSession) -> list[str]:
        out, cursor = [], None
        while True:  # every page, as the client asks for them
            page = await session.list_tools(params=mcp.types.PaginatedRequestParams(cursor=cursor))
            out.append(_dump(page))
            cursor = page.next_cursor
            if cursor is None:
                break
        out.append(_dump(await session.call_tool("echo_c", {"x": "1"})))  # a tool of the second page
        out.append(_dump(await session.call_tool("add_tool", {})))
        for _ in range(100):
            if changed:
                break
            await asyncio.sleep(0.02)
        return out

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp.types.ServerNotification) or hasattr(message, "method"):
            changed.append(str(getattr(message, "method", type(message).__name__)))

    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write, message_handler=on_message) as s:
        await s.initialize()
        expected = await run(s)
    assert changed, "the server's list_changed notification never arrived (direct)"
    changed.clear()
    proxy = Proxy(ProxyConfig(command=tuple(command), policy=McpPolicy().trusting()))
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    async with ClientSession(from_proxy, to_proxy, message_handler=on_message) as s:
        await s.initialize()
        got = await run(s)
    to_proxy.close()
    stats = await serving
    proxy.close()
    assert got == expected
    assert changed, "the server's list_changed notification never reached the client through the proxy"
    assert (stats.misses, stats.passthrough) == (1, 1)  # echo_c (second page) was known, add_tool is unlisted
