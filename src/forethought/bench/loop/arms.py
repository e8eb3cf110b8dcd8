"""The loop bench's arms: how the client reaches the model and its MCP servers in each.

========================  ==============================================  ===========================================
arm                       model path                                      MCP path
========================  ==============================================  ===========================================
``direct``                client -> upstream                              client -> server
``proxy``                 client -> upstream                              client -> ``forethought mcp-proxy`` -> server
``daemon``                client -> daemon -> upstream                    client -> linked shim -> server
``daemon+speculator``     as ``daemon``, a cheaper model sampled too      as ``daemon``
``oracle``                as ``daemon``, told every next call             as ``daemon``
========================  ==============================================  ===========================================

An :class:`ArmStack` holds an arm's long-lived parts for the whole run (a real client keeps its servers and
the daemon keeps learning across tasks): its servers' sessions or proxies, its daemon. Per task it gives the
client its :class:`~forethought.bench.loop.agent.ToolRouter`. The linked shim is
:class:`~forethought.bench.loop.shim.FakeShim` until ``forethought mcp-proxy --daemon`` exists (then the
daemon arms use the proxy with its link, as the ``proxy`` arm uses it plainly).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from forethought._core.calls import ToolCall
from forethought._core.policy import Policy
from forethought.bench.loop.shim import FakeShim, call_server
from forethought.bench.loop.workload import CLIENT_EDIT, Task
from forethought.daemon import Client, Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.guesses import SpeculatorSettings
from forethought.mcp.daemon_link import LinkAnswer
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext

__all__ = ["ARMS", "DAEMON_ARMS", "ArmStack", "ScriptOracle", "open_arm"]

ARMS = ("direct", "proxy", "daemon", "daemon+speculator", "oracle")
DAEMON_ARMS = frozenset({"daemon", "daemon+speculator", "oracle"})
SPECULATOR_MODEL = "speculator"


class ScriptOracle:
    """A predictor told the truth: at each step's start, the step's calls up to its first write (a perfect
    predictor could start no more at that moment without running a read before a write it follows)."""

    name = "oracle"

    def __init__(self, tasks: Sequence[Task]) -> None:
        self._tasks = {t.user_text: t for t in tasks}

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        task = self._tasks.get(context.user_message)
        if task is None:
            return []
        step = sum(1 for m in context.messages if m.get("role") == "assistant")
        responses = task.script["responses"]
        if step >= len(responses):
            return []
        out = []
        for call in responses[step].get("calls", ()):
            if call["name"] not in task.reads:
                break
            out.append(Prediction(ToolCall(call["name"], dict(call["arguments"])), 1.0, self.name))
        return out

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Nothing to learn."""


class Connection(Protocol):
    """A client's connection to one MCP server (a session, a shim): calls a tool by its own name."""

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer: ...


@dataclass
class Router:
    """The client's tools in one task: MCP tools through its connections, its own editing tool on the files."""

    connections: Mapping[str, Connection]
    edit: Callable[[str, str], None] | None = None

    async def call(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        if name == CLIENT_EDIT and self.edit is not None:
            self.edit(str(arguments["path"]), str(arguments["text"]))
            return LinkAnswer(result={"content": [{"type": "text", "text": "edited"}]})
        _, server, tool = name.split("__", 2)
        return await self.connections[server].call_tool(tool, arguments)


class _Session:
    """A client session through a proxy, as a connection."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        return await call_server(self.session, name, arguments)


@dataclass
class ArmStack:
    """One arm's long-lived parts (see the module docstring)."""

    arm: str
    shims: dict[str, FakeShim] = field(default_factory=dict)
    proxies: dict[str, Any] = field(default_factory=dict)
    daemon: Daemon | None = None
    upstream: str = ""

    @property
    def base_url(self) -> str:
        return self.daemon.url if self.daemon is not None else self.upstream

    def model_url(self, task: Task) -> str:
        from forethought.daemon.wire import Wire

        if self.daemon is None:
            return self.upstream
        return self.daemon.url + ("/anthropic" if task.wire is Wire.MESSAGES else "/openai")

    @contextlib.asynccontextmanager
    async def connections(self) -> AsyncIterator[dict[str, Connection]]:
        """The client's MCP connections for one task (a proxy opens a session per client, as a client starts
        its servers anew)."""
        if not self.proxies:
            yield dict(self.shims)
            return
        import anyio
        from mcp import ClientSession
        from mcp.shared.message import SessionMessage

        async with contextlib.AsyncExitStack() as stack:
            out: dict[str, Connection] = {}
            serving = []
            for name, proxy in self.proxies.items():
                to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
                proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
                serving.append((to_proxy, asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))))
                session = await stack.enter_async_context(ClientSession(from_proxy, to_proxy))
                await session.initialize()
                await session.list_tools()
                await proxy.ready()  # the predictor's worker has started (untimed, as the server's start is)
                out[name] = _Session(session)
            yield out
        for to_proxy, task in serving:
            to_proxy.close()
            await asyncio.wait_for(task, 30)


@contextlib.asynccontextmanager
async def open_arm(arm: str, upstream: str, commands: Mapping[str, Sequence[str]], policy: Policy,
                   tasks: Sequence[Task], work: Path, env: Mapping[str, str] | None = None) -> AsyncIterator[ArmStack]:
    """Start ``arm``'s long-lived parts: its daemon (daemon arms), its servers (behind proxies in ``proxy``)."""
    stack = ArmStack(arm, upstream=upstream)
    async with contextlib.AsyncExitStack() as exits:
        if arm in DAEMON_ARMS:
            speculator = SpeculatorSettings(SPECULATOR_MODEL, samples=2, budget_tokens=None) \
                if arm == "daemon+speculator" else None
            config = DaemonConfig(Upstreams(upstream, upstream), Client.GENERIC, policy,
                                  patterns=arm != "oracle", speculator=speculator)
            options: dict[str, Any] = {"predictors": [ScriptOracle(tasks)]} if arm == "oracle" else {}
            stack.daemon = await exits.enter_async_context(serve_daemon(config, **options))
        if arm == "proxy":
            from forethought.mcp.effects import McpPolicy
            from forethought.mcp.proxy import Proxy, ProxyConfig

            store = work / "proxy-patterns.sqlite"
            for name, command in commands.items():
                proxy = Proxy(ProxyConfig(command=tuple(command), policy=McpPolicy().trusting(), store=store,
                                          name=name, env=env))
                exits.callback(proxy.close)
                stack.proxies[name] = proxy
        else:
            for name, command in commands.items():
                link = (stack.daemon.url, stack.daemon.token) if stack.daemon is not None else None
                stack.shims[name] = await exits.enter_async_context(
                    FakeShim.started(command, name, daemon=link, env=env))
        yield stack


def edit_notes(state: Path) -> Callable[[str, str], None]:
    """The notes suite's client edit tool: it changes the state file itself."""
    def edit(path: str, text: str) -> None:
        notes = json.loads(state.read_text())
        notes[path] = text
        state.write_text(json.dumps(notes, sort_keys=True))

    return edit
