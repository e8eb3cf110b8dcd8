"""``forethought bench --workload mcp --mcp-suite repo``: generated agent tasks on a generated repository,
replayed by an MCP client against the real filesystem and git servers, direct vs through the proxy.

The bench writes a seeded repository (:mod:`forethought.bench.mcp.repo`) and seeded tasks on it, split into
two folds by interleaving. Every task is replayed by ``mcp`` SDK clients holding two sessions, one to the
npm ``@modelcontextprotocol/server-filesystem`` and one to ``mcp-server-git`` (both installed by ``make
mcp-servers``), with think time before every call, on a fresh copy of the repository at the same path.
Arms, their order rotated per task: ``direct`` (the client talks to the servers), ``proxy-cold`` (each
server behind a proxy; both proxies share one store, empty at the start and learning across the fold),
``proxy-warm`` (the same, the store first trained by replaying the other fold). Sharing a store, the two
proxies share its write clock, so an edit through the filesystem server stops the git proxy serving a
guess taken before it. The servers are trusted (their read-only annotations are right), tool latency is the
servers' own.

Per arm: wall time from the first call to the last answer (server start-up excluded), time saved against
direct, upstream ``tools/call`` requests (guesses included), early runs of non-read tools, and whether every
answer and the repository's final state (files, HEAD, status) equal the direct arm's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from forethought.bench.mcp.repo import RepoShape, TraceCall, git_env, make_repository, make_traces
from forethought.bench.mcp.runner import (
    ARMS,
    ArmTotals,
    Replay,
    _dump,
    _null_log,
    _results,
    add_runs,
    merge_tools,
    tool_report,
)
from forethought.mcp.effects import McpPolicy, ProxySettings
from forethought.mcp.errors import McpProxyError
from forethought.mcp.proxy import Proxy, ProxyConfig

SERVERS = ("fs", "git")
FS_SCRIPT = Path(".cache/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
GIT_SERVER = Path(".venv-mcp/bin/mcp-server-git")


@dataclass(frozen=True, slots=True)
class RepoBenchConfig:
    tasks: int = 8
    """Tasks in the test fold (the training fold has as many)."""
    think_s: float = 0.1
    seed: int = 0
    settings: ProxySettings = field(default_factory=ProxySettings)
    in_process: bool = False
    """Run the proxies' pattern predictor on their event loop, not in worker processes."""
    """The proxies' own knobs (guesses per result, confidence floor, upstream bound)."""
    shape: RepoShape = field(default_factory=RepoShape)
    project: str = "."
    """Where ``make mcp-servers`` installed the servers (the project's root)."""


def server_commands(project: str, root: Path) -> dict[str, list[str]]:
    """The commands of the two servers for a repository at ``root``; an error names the missing one."""
    base = Path(os.path.abspath(project))
    fs, git = base / FS_SCRIPT, base / GIT_SERVER
    node = shutil.which("node")
    for path, what in ((fs, "@modelcontextprotocol/server-filesystem"), (git, "mcp-server-git")):
        if not path.exists():
            raise McpProxyError(f"{what} is not installed at {path} (run `make mcp-servers`)")
    if node is None or shutil.which("git") is None:
        raise McpProxyError("the repo suite needs node and git on PATH")
    return {"fs": [node, str(fs), str(root)], "git": [str(git), "--repository", str(root)]}


async def _replay(sessions: Mapping[str, Any], trace: Sequence[TraceCall], think_s: float) -> tuple[float, list[str]]:
    answers: list[str] = []
    start = time.monotonic()
    for call in trace:
        if think_s:
            await asyncio.sleep(think_s)  # the model thinking before it emits the call
        try:
            answers.append(_dump(await sessions[call.server].call_tool(call.tool, dict(call.arguments))))
        except Exception as exc:  # a JSON-RPC error: what the client saw is the answer
            answers.append(f"error: {type(exc).__name__}: {exc}")
    return time.monotonic() - start, answers


@contextlib.asynccontextmanager
async def _direct(commands: Mapping[str, Sequence[str]], read_only: set[str]) -> AsyncIterator[dict[str, Any]]:
    """Client sessions straight to the servers; the tools they annotate read-only are added to ``read_only``."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    async with contextlib.AsyncExitStack() as stack:
        quiet = stack.enter_context(_null_log())
        sessions: dict[str, Any] = {}
        for server, command in commands.items():
            params = StdioServerParameters(command=command[0], args=list(command[1:]), env=git_env())
            read, write = await stack.enter_async_context(stdio_client(params, errlog=quiet))
            sessions[server] = await stack.enter_async_context(ClientSession(read, write))
            await sessions[server].initialize()
            for tool in (await sessions[server].list_tools()).tools:
                if tool.annotations is not None and tool.annotations.read_only_hint:
                    read_only.add(tool.name)
        yield sessions


@contextlib.asynccontextmanager
async def _through(proxies: Mapping[str, Proxy]) -> AsyncIterator[dict[str, Any]]:
    import anyio
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage

    async with contextlib.AsyncExitStack() as stack:
        sessions: dict[str, Any] = {}
        for server, proxy in proxies.items():
            to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
            proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
            serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
            stack.push_async_callback(_stop, to_proxy, serving)
            sessions[server] = await stack.enter_async_context(ClientSession(from_proxy, to_proxy))
            await sessions[server].initialize()
            await sessions[server].list_tools()
            await proxy.ready()  # its predictor's worker has started (untimed, as the servers' start is)
        yield sessions


async def _stop(to_proxy: Any, serving: asyncio.Task[Any]) -> None:
    to_proxy.close()
    await serving


def _proxies(store: Path, commands: Mapping[str, Sequence[str]], settings: ProxySettings,
             in_process: bool = False) -> dict[str, Proxy]:
    policy = McpPolicy(settings=settings).trusting()
    return {server: Proxy(ProxyConfig(command=tuple(command), policy=policy, store=store, env=git_env(),
                                      in_process=in_process))
            for server, command in commands.items()}


def repository_state(root: Path) -> str:
    """A digest of the working tree's files, HEAD and ``git status``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for args in (["rev-parse", "HEAD"], ["status", "--porcelain"]):
        digest.update(subprocess.run(["git", *args], cwd=root, check=True, capture_output=True).stdout)
    return digest.hexdigest()


def _reset(template: Path, root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(template, root, symlinks=True)


async def _run_arm(arm: str, trace: Sequence[TraceCall], template: Path, root: Path,
                   commands: Mapping[str, Sequence[str]], store: Path | None, config: RepoBenchConfig,
                   read_only: set[str]) -> Replay:
    _reset(template, root)
    if store is None:
        async with _direct(commands, read_only) as sessions:
            seconds, answers = await _replay(sessions, trace, config.think_s)
        return Replay(seconds, tuple(answers), repository_state(root), len(answers), 0, 0)
    proxies = _proxies(store, commands, config.settings, config.in_process)
    try:
        async with _through(proxies) as sessions:
            seconds, answers = await _replay(sessions, trace, config.think_s)
    finally:
        for proxy in proxies.values():
            proxy.close()
    links = [link for proxy in proxies.values() for link in proxy.links]
    upstream = sum(link.client_calls + link.speculative_calls + link.validator_calls for link in links)
    early = sum(1 for link in links for tool in link.speculative_tools if tool not in read_only)
    hits = sum(proxy.finished.hits for proxy in proxies.values())
    refusals: Counter[str] = Counter()
    tools: dict[str, dict[str, Any]] = {}
    for proxy in proxies.values():
        refusals.update({f"proxy refused: {reason}": n for reason, n in proxy.refusals.items()})
        merge_tools(tools, tool_report(proxy))
    return Replay(seconds, tuple(answers), repository_state(root), upstream, early, hits, dict(refusals), tools)


async def repo_bench(config: RepoBenchConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the three arms on the test fold of generated tasks; returns the ``bench``-style results."""
    totals = {arm: ArmTotals() for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="forethought-mcp-repo-") as tmp:
        template, root = Path(tmp) / "template", Path(tmp) / "work" / "repo"
        files = make_repository(template, config.shape)
        traces = make_traces(root, files, 2 * config.tasks, config.seed)
        train, test = traces[0::2], traces[1::2]
        root.parent.mkdir()
        _reset(template, root)
        commands = server_commands(config.project, root)
        read_only: set[str] = set()  # what the servers annotate read-only: the direct arm, first of all, lists it
        cold, warm = Path(tmp) / "cold.sqlite", Path(tmp) / "warm.sqlite"
        for i, trace in enumerate(train):
            _reset(template, root)
            proxies = _proxies(warm, commands, config.settings, config.in_process)
            try:
                async with _through(proxies) as sessions:
                    await _replay(sessions, trace, 0.0)
            finally:
                for proxy in proxies.values():
                    proxy.close()
            progress(f"trained on {i + 1}/{len(train)} tasks")
        for i, trace in enumerate(test):
            order = ARMS[i % 3:] + ARMS[:i % 3]  # direct first on the first task
            runs: dict[str, Replay] = {}
            for arm in order:
                store = None if arm == "direct" else (cold if arm == "proxy-cold" else warm)
                runs[arm] = await _run_arm(arm, trace, template, root, commands, store, config, read_only)
            add_runs(totals, runs)
            progress(f"task {i}: {len(trace)} calls, " + ", ".join(f"{a} {runs[a].seconds:.2f}s" for a in ARMS))
    calls = [c.tool for trace in test for c in trace]
    share = sum(c in read_only for c in calls) / len(calls) if calls else 0.0
    results = _results(asdict(config), totals, frozenset(read_only))
    results["params"] |= {"suite": "repo", "shape": asdict(config.shape), "load_average": _load()}
    return results | {"read_only_call_share": round(share, 4)}


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on this platform
        return []
