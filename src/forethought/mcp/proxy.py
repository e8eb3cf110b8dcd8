"""The proxy assembled: an upstream connection, the runtime, the pattern store, a relay per client session.

:class:`ProxyConfig` is everything the command line decides. :class:`Proxy` owns what outlives a client
session (the runtime, the SQLite store of patterns and stats, the totals the metrics read) and
:meth:`Proxy.serve_session` relays one client session over any pair of ``mcp`` SDK streams, opening the
upstream for it (one runtime session, one upstream connection per client session), and with ``--daemon``
links the session to ``forethought serve`` (:mod:`~forethought.mcp.daemon_hook`). :func:`run_stdio` serves
one client on the process's own stdin and stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sqlite3
import tempfile
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from forethought._core.runtime import Runtime
from forethought._core.versions import StateVersion, Version
from forethought.errors import ForethoughtError
from forethought.mcp.calibration import CalibrationStore, Calibrator, Carried
from forethought.mcp.concurrency import Concurrency
from forethought.mcp.daemon_hook import DaemonAddress, DaemonHook
from forethought.mcp.effects import McpPolicy
from forethought.mcp.errors import McpProxyError
from forethought.mcp.firstcalls import FirstCalls, MemoryFirstCalls, SqliteFirstCalls
from forethought.mcp.holder import held
from forethought.mcp.naming import ServerName
from forethought.mcp.patterns import WorkerPatterns
from forethought.mcp.pipes import fd_streams, process_streams
from forethought.mcp.relay import MessageSource, Relay
from forethought.mcp.seams import CallReport, Learning, PredictorFactory
from forethought.mcp.sharedclock import SqliteVersion
from forethought.mcp.speculation import SessionSpeculator
from forethought.mcp.stats import ProxyStats, StatsStore
from forethought.mcp.upstream import MessageSink, UpstreamLink
from forethought.mcp.warmup import Handoff, WarmStart
from forethought.predictors.base import Predictor
from forethought.predictors.patterns import PatternPredictor
from forethought.predictors.patterns.store import MemoryPatternStore, PatternStore, SqlitePatternStore

log = logging.getLogger(__name__)

UNLISTED = "unlisted"
MAX_CREDIT = 2.0
"""The most upstream requests a session may spend beyond its own bound, from what earlier sessions left unspent."""
"""Fingerprint the stats of a session are kept under when its client never listed the tools."""


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What the proxy fronts and how: exactly one of ``command`` (stdio) and ``url`` (streamable HTTP)."""

    command: Sequence[str] = ()
    url: str | None = None
    policy: McpPolicy = field(default_factory=McpPolicy)
    store: Path | None = None
    """SQLite file of learned patterns and stats (``None``: learn in memory only)."""
    name: str | None = None
    """The upstream's name in the policy (default: the name it gives itself)."""
    env: Mapping[str, str] | None = None
    """Environment of a stdio upstream (default: the proxy's own, as a client would start it)."""
    cwd: str | None = None
    in_process: bool = False
    """Learn and predict on the proxy's own event loop (``--in-process``) instead of in one worker process
    per client session (:mod:`~forethought.mcp.patterns`)."""
    daemon: DaemonAddress | None = None
    """The ``forethought serve`` each client session links to (``--daemon``; :mod:`~forethought.mcp.daemon_hook`)."""

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise McpProxyError("give the upstream either as a command (after --) or with --upstream-url")

    @property
    def label(self) -> str:
        """How errors and logs name the upstream (:func:`upstream_label`)."""
        return upstream_label(self.command, self.url)


def upstream_label(command: Sequence[str], url: str | None) -> str:
    """How errors and logs name an upstream: its program's name, or its URL's scheme, host and path; never
    its arguments or a URL's credentials or query (any of them may carry a secret)."""
    if url:
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        try:
            port = f":{parts.port}" if parts.port is not None else ""
        except ValueError:
            port = ""
        return f"{parts.scheme}://{host}{port}{parts.path.split(';', 1)[0]}"
    return (Path(command[0]).name if command else "") or "the upstream command"


def scrubbed(text: str, command: Sequence[str], url: str | None) -> str:
    """``text`` (an error's message) with the upstream's arguments, URL, credentials and query replaced by
    :func:`upstream_label` or ``***``."""
    secrets = [*command[1:]]
    if url:
        text = text.replace(url, upstream_label(command, url))
        parts = urlsplit(url)
        secrets += [parts.query, parts.password or "", parts.username or "", parts.fragment]
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@contextlib.asynccontextmanager
async def open_upstream(config: ProxyConfig) -> AsyncIterator[tuple[MessageSource, MessageSink]]:
    """The upstream's streams through the ``mcp`` SDK's client transports."""
    if config.url:
        async with streamable_http_client(config.url) as (read, write):
            yield read, write
        return
    params = StdioServerParameters(command=config.command[0], args=list(config.command[1:]),
                                   env=dict(config.env if config.env is not None else os.environ), cwd=config.cwd)
    async with contextlib.AsyncExitStack() as stack:
        try:
            read, write = await stack.enter_async_context(stdio_client(params))
        except OSError as exc:
            raise McpProxyError(f"cannot start the upstream server {config.label!r}: {exc}") from None
        yield read, write


class Proxy:
    """What all client sessions of one proxy process share."""

    def __init__(self, config: ProxyConfig, predictor_for: PredictorFactory | None = None,
                 clock: Version | None = None) -> None:
        """``clock``: the shared write clock, when the caller made it already (a warm start relays writes
        before the proxy exists); by default it is made here, for the store or for this process."""
        self.config = config
        self._factory = predictor_for
        """Builds each session's predictor (default: the pattern predictor on the store)."""
        self.runtime = Runtime(policy=config.policy.runtime)
        self._patterns: PatternStore = MemoryPatternStore()
        self._stats_store: StatsStore | None = None
        self._sqlite_clock: SqliteVersion | None = None
        self.clock: Version = clock if clock is not None else StateVersion()
        """The state every early-allowed tool reads and every other tool writes (see
        :mod:`~forethought.mcp.sharedclock`): this process's, or shared through the store."""
        if config.store is not None:
            try:
                self._patterns = SqlitePatternStore(config.store)
                self._stats_store = StatsStore(config.store)
                if clock is None:
                    self._sqlite_clock = SqliteVersion(config.store)
                    self.clock = self._sqlite_clock
            except (sqlite3.Error, OSError) as exc:
                raise McpProxyError(f"cannot open the pattern store {config.store}: {exc}") from None
        self._calibration_store: CalibrationStore | None = None
        self._first_calls: SqliteFirstCalls | None = None
        first_calls: FirstCalls = MemoryFirstCalls()
        if config.store is not None:
            try:
                self._calibration_store = CalibrationStore(config.store)
                first_calls = self._first_calls = SqliteFirstCalls(config.store)
            except (sqlite3.Error, OSError) as exc:
                raise McpProxyError(f"cannot open the pattern store {config.store}: {exc}") from None
        self.concurrency = Concurrency(self.runtime.tool_runtime_ewma.get)
        """Whether the upstream server handles calls at once, as learnt (shared by the sessions)."""
        self.calibrator = Calibrator(self.runtime, self.concurrency, config.policy.settings.guess_overhead_ms / 1000)
        self.carried = Carried(self.calibrator, self._calibration_store)
        self.learning = Learning(self.calibrator, first_calls, self.carried.listed, self._credit)
        """What the sessions share of what they learn (see :class:`~forethought.mcp.speculation.Learning`)."""
        self.finished = ProxyStats()
        self._relays: list[Relay] = []
        """The relay of every client session being served (each holds its session's speculator)."""
        self.links: list[UpstreamLink] = []
        """The upstream link of every client session served (the tests count its requests)."""
        self.daemons: list[DaemonHook] = []
        """The daemon link of every client session served with ``--daemon`` (the tests look inside)."""
        self.on_call: Callable[[CallReport], None] | None = None
        self.refusals: Counter[str] = Counter()
        """Predictions the finished sessions did not speculate, by reason."""
        self._scratch: Path | None = None

    @property
    def _live(self) -> list[SessionSpeculator]:
        """The speculators of the sessions being served."""
        return [relay.speculator for relay in self._relays]

    @property
    def speculators(self) -> list[SessionSpeculator]:
        """The speculators of the client sessions being served (tests and benchmarks look inside)."""
        return self._live

    def current(self) -> ProxyStats:
        """Totals so far, the sessions still open included (what the metrics show)."""
        total = self.finished
        for speculator in self._live:
            total = total.plus(speculator.stats())
        return total

    def _predictor_for(self, schemas: Mapping[str, Mapping[str, Any]]) -> tuple[Predictor, str]:
        if self._factory is not None:
            return self._factory(schemas)
        if self.config.in_process:
            predictor = PatternPredictor.for_tools(schemas, store=self._patterns)
            return predictor, predictor.fingerprint
        worker = WorkerPatterns(self.config.store or self._scratch_store(), schemas, start=False)
        return worker, worker.fingerprint

    def _scratch_store(self) -> Path:
        """Where the workers of a proxy without a store keep what its sessions learn (removed at close)."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="forethought-mcp-"))
        return self._scratch / "patterns.sqlite"

    async def ready(self) -> None:
        """Wait until every open session has its tools listed and its predictor ready (for benchmarks)."""
        await asyncio.gather(*(speculator.ready() for speculator in self._live))

    async def settled(self) -> None:
        """Wait until every open session has made the guesses owed to the answers it already sent (see
        :meth:`Relay.settled`); for tests and benchmarks that must not depend on the worker's speed."""
        await asyncio.gather(*(relay.settled() for relay in list(self._relays)))

    async def serve_session(self, down_read: MessageSource, down_write: MessageSink,
                            handoff: Handoff | None = None) -> ProxyStats:
        """Relay one client session until the client disconnects; returns its stats. ``handoff``: the session
        began in a warm start (its upstream already running, its first lines relayed), which goes on here."""
        upstream = process_streams(handoff.process, handoff.server_rest) if handoff is not None else \
            open_upstream(self.config)
        async with held(upstream) as (up_read, up_write):  # a failing transport ends the upstream, not the session
            link = UpstreamLink(up_write, self.config.policy.settings.abandoned_s, self.concurrency)
            self.links.append(link)
            speculator = SessionSpeculator(link, self.config.policy, self.runtime, self._predictor_for, self.clock,
                                           ServerName(self.config.name), self.learning)
            daemon = None
            if self.config.daemon is not None:
                daemon = DaemonHook(self.config.daemon, speculator, self.config.name,
                                    self.config.policy.settings.name_wait_s)
                self.daemons.append(daemon)
            relay = Relay(down_read, down_write, up_read, link, speculator, on_call=self.on_call,
                          exit_detail=lambda: f"{self.config.label!r} exited or closed its connection", daemon=daemon)
            self._relays.append(relay)
            try:
                if handoff is not None:
                    await relay.adopt(handoff)
                await relay.run()
            finally:
                self._relays.remove(relay)
                self.refusals.update(speculator.refusals)
                stats = speculator.stats()
                self.finished = self.finished.plus(stats)
                self._save(speculator.fingerprint or UNLISTED, stats)
                self.carried.save(speculator.fingerprint, [n for n, d in speculator.decisions.items() if not d.private])
        return stats

    def _credit(self, fingerprint: str) -> float:
        """What earlier sessions of ``fingerprint`` left unspent under the upstream bound (the store's totals, or
        this process's finished sessions without a store), at most :data:`MAX_CREDIT` requests."""
        totals = self.finished
        if self._stats_store is not None:
            try:
                totals = self._stats_store.of(fingerprint)
            except sqlite3.Error as exc:  # a busy, broken or garbled store: no credit
                log.warning("could not read proxy stats from %s: %s", self.config.store, type(exc).__name__)
                return 0.0
        upstream = totals.calls + totals.extra_upstream_calls
        unspent = self.config.policy.settings.max_upstream_ratio * totals.calls - upstream
        return max(0.0, min(MAX_CREDIT, unspent))

    def _save(self, fingerprint: str, stats: ProxyStats) -> None:
        if self._stats_store is None:
            return
        try:
            self._stats_store.add(fingerprint, stats)
        except sqlite3.Error as exc:
            log.warning("could not save proxy stats to %s: %s", self.config.store, exc)

    def close(self) -> None:
        self.runtime.close()
        self._patterns.close()
        for store in (self._calibration_store, self._first_calls):
            if store is not None:
                store.close()
        if self._stats_store is not None:
            self._stats_store.close()
        if self._sqlite_clock is not None:
            self._sqlite_clock.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


async def run_stdio(proxy: Proxy, warm: WarmStart | None = None) -> ProxyStats:
    """Serve one client on this process's stdin/stdout (the way MCP clients start a server); ``warm``: its
    upstream was started and its first lines relayed while the proxy loaded, and the session goes on here."""
    if warm is not None:
        handoff = warm.handoff()
        async with fd_streams(0, 1, handoff.client_rest) as (read, write):
            return await proxy.serve_session(read, write, handoff)
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        try:
            return await proxy.serve_session(read, write)
        finally:
            write.close()  # lets the transport's writer finish


async def run_stdio_until_stopped(proxy: Proxy, warm: WarmStart | None = None,
                                  stopped: threading.Event | None = None) -> ProxyStats | None:
    """:func:`run_stdio`, ending cleanly (stats saved) on SIGTERM as on the client's disconnect; ``stopped``: a
    SIGTERM that came while the proxy loaded (during a warm start), which ends it the same way once it runs."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    stopper: asyncio.Task[None] | None = None
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        if stopped is not None and stopped.is_set():
            stopper = loop.create_task(_stop_once_serving(proxy, task))
    try:
        return await run_stdio(proxy, warm)
    except asyncio.CancelledError:
        return None
    except BaseExceptionGroup as group:  # the SDK's task groups wrap what failed
        first = _first_error(group)
        if first is not None:
            raise first from None
        raise
    finally:
        if stopper is not None:
            stopper.cancel()


EARLY_STOP_WAIT_S = 5.0
"""How long a SIGTERM that came while the proxy loaded waits for the session to be served before it ends it."""


async def _stop_once_serving(proxy: Proxy, task: asyncio.Task[Any]) -> None:
    """End ``task`` once its session is being served (what a warm start relayed is then counted and saved), or
    after :data:`EARLY_STOP_WAIT_S`."""
    for _ in range(int(EARLY_STOP_WAIT_S / 0.01)):
        if proxy._relays:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # the session's first turn: its warm-up lines are taken over
    task.cancel()


def _first_error(group: BaseExceptionGroup[BaseException]) -> ForethoughtError | None:
    for exc in group.exceptions:
        if isinstance(exc, ForethoughtError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_error(exc)
            if found is not None:
                return found
    return None
