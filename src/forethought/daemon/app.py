"""The daemon assembled: one runtime, the model relay, the link API, the conversations and their guesses.

:class:`Daemon` owns what outlives a request: the core :class:`~forethought._core.runtime.Runtime` (one
write clock, one policy, one scheduler for every conversation and shim), the linked shims, the
conversations, the claim desk, the guessers and the upstream connection pool. Its Starlette ``app`` serves

* the model routes (:mod:`forethought.daemon.relay`): pass-through, read beside the relay;
* the link routes (:mod:`forethought.daemon.link_api`), behind the token;
* ``GET /health`` (liveness, no details) and ``GET /metrics`` (Prometheus counts: never a header, a body or
  an argument).

:meth:`Daemon.step` is the relay's :class:`~forethought.daemon.relay.StepSource`: it reads a request's
conversation and begins its step. :func:`serve_daemon` runs a daemon on 127.0.0.1 while a block runs (tests
and the bench); the command line (:mod:`forethought.daemon.cli`) runs one until interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._version import __version__
from forethought.daemon.claims import ClaimDesk
from forethought.daemon.conversation import Conversations
from forethought.daemon.guesses import Guessers, SpeculatorSettings
from forethought.daemon.link_api import LinkApi
from forethought.daemon.linked import early_reason
from forethought.daemon.naming import Client
from forethought.daemon.observer import Watcher
from forethought.daemon.relay import ModelRelay, Upstreams
from forethought.daemon.shims import Shim, Shims
from forethought.daemon.speculator import REPLAY_KEY, Replay
from forethought.daemon.token_file import DaemonTokenFile, new_token
from forethought.daemon.transcript import read_request
from forethought.daemon.wire import Wire
from forethought.predictors.base import Predictor
from forethought.predictors.patterns.store import MemoryPatternStore, PatternStore, SqlitePatternStore
from forethought.serve.http import serve_in_process

__all__ = ["Daemon", "DaemonConfig", "serve_daemon"]

log = logging.getLogger(__name__)
UPSTREAM_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Everything the command line decides (configuration enters here and flows inward as values)."""

    upstreams: Upstreams = field(default_factory=Upstreams)
    client: Client = Client.GENERIC
    policy: Policy = field(default_factory=Policy)
    store: Path | None = None
    """SQLite file of learned patterns (``None``: learn in memory only)."""
    patterns: bool = True
    """Guess with the pattern predictor at each step's start."""
    speculator: SpeculatorSettings | None = None
    daemon_file: Path | None = None
    """Where to announce the URL and the link token (``None``: nowhere; tests pass the token directly)."""
    token: str | None = None
    """The link token (``None``: a new random one)."""


class Daemon:
    """One ``forethought serve`` (see the module docstring)."""

    def __init__(self, config: DaemonConfig | None = None, *, runtime: Runtime | None = None,
                 http: httpx2.AsyncClient | None = None, predictors: Sequence[Predictor] = ()) -> None:
        self.config = config or DaemonConfig()
        self.runtime = runtime or Runtime(policy=self.config.policy)
        self.started = time.time()
        self.token = self.config.token or new_token()
        self._http = http or httpx2.AsyncClient(timeout=httpx2.Timeout(UPSTREAM_TIMEOUT_S, connect=10.0),
                                                limits=httpx2.Limits(max_connections=None,
                                                                     max_keepalive_connections=64))
        self._own_http = http is None
        self.shims = Shims()
        self.conversations = Conversations(self.runtime, self.shims, self.config.client)
        self.desk = ClaimDesk(self.runtime, self.conversations)
        self.store: PatternStore = (SqlitePatternStore(self.config.store) if self.config.store is not None
                                    else MemoryPatternStore())
        if self.config.speculator is not None:
            self.guessers = Guessers.with_speculator(self.store, self.config.speculator, self._http,
                                                     patterns=self.config.patterns, extra=predictors)
        else:
            self.guessers = Guessers(self.store, patterns=self.config.patterns, extra=predictors)
        self.relay = ModelRelay(self.config.upstreams, self._http, self)
        self.link = LinkApi(self.token, self.shims, self.desk, self.status)
        self.app = Starlette(routes=[*self.relay.routes(), *self.link.routes(),
                                     Route("/health", self._health, methods=["GET"]),
                                     Route("/metrics", self._metrics, methods=["GET"])])
        self.url = ""
        """The base URL once serving (``http://127.0.0.1:PORT``)."""
        self._announced: DaemonTokenFile | None = None
        self._reaping: set[asyncio.Task[None]] = set()

    # --- the relay's steps ----------------------------------------------------------------------------

    def step(self, wire: Wire, url: str, headers: Sequence[tuple[str, str]], raw: bytes) -> Watcher | None:
        """Read a model request's conversation and begin its step (the relay calls this beside the send)."""
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        transcript = read_request(wire, body)
        conversation = self.conversations.get(transcript.key)
        predictors = self.guessers.for_step(conversation.key, transcript.tools)
        replay = self.guessers.replay
        if conversation.replay is not None and replay is not None:
            replay.release(conversation.replay)
            conversation.replay = None
        extra: dict[str, Any] = {}
        if replay is not None and self.guessers.speculator in predictors:
            conversation.replay = replay.bind(Replay(wire, url, tuple(headers), body, conversation.key))
            extra[REPLAY_KEY] = conversation.replay
        watcher = conversation.begin(transcript, predictors, time.monotonic(), extra)
        if self.conversations.forgotten:
            self._reap()
        return watcher

    def _reap(self) -> None:
        for conversation in self.conversations.forgotten:
            if conversation.replay is not None and self.guessers.replay is not None:
                self.guessers.replay.release(conversation.replay)
            if self.guessers.budget is not None:
                self.guessers.budget.forget(conversation.key)
        task = asyncio.get_running_loop().create_task(self.conversations.reap())
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    # --- status ---------------------------------------------------------------------------------------

    def status(self) -> Mapping[str, Any]:
        """What the daemon is doing, safe to show: no header, body, argument or result in it."""
        upstreams = self.config.upstreams
        budget = self.guessers.budget
        return {
            "version": __version__, "uptime_s": round(time.time() - self.started, 1),
            "client": str(self.config.client),
            "upstreams": {"anthropic": upstreams.anthropic, "openai": upstreams.openai},
            "servers": [{"names": list(s.names), "tools": self._tools_of(s), "early_runs": s.runs_sent,
                         "answers": s.answers} for s in self.shims.live()],
            "conversations": len(self.conversations),
            "claims": {"claims": self.desk.counts.claims, "hits": self.desk.counts.hits,
                       "runs": self.desk.counts.runs, "untracked": self.desk.counts.untracked,
                       "saved_s": round(self.desk.counts.saved_s, 3), "open_runs": self.desk.open_runs,
                       "by_server": self.desk.counts.by_server},
            "relay": vars(self.relay.counts).copy(),
            "speculator": None if self.config.speculator is None else {
                "model": self.config.speculator.model, "tokens": budget.total if budget else 0,
                "budget_tokens_per_conversation": self.config.speculator.budget_tokens},
        }

    def _tools_of(self, shim: Shim) -> list[dict[str, Any]]:
        out = []
        for name in sorted(shim.tools):
            early, why = early_reason(shim, shim.tools[name], self.runtime.policy)
            out.append({"name": name, "early": early, "why": why})
        return out

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    async def _metrics(self, request: Request) -> Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_DaemonCollector(self))
        return Response(generate_latest(registry) + self.runtime.telemetry.exposition(),
                        media_type=CONTENT_TYPE_LATEST)

    # --- life -----------------------------------------------------------------------------------------

    def announce(self, url: str) -> None:
        """Write the daemon file (URL and token) where shims look for it."""
        if self.config.daemon_file is not None:
            self._announced = DaemonTokenFile(self.config.daemon_file, url, self.token)
            self._announced.write()

    async def aclose(self) -> None:
        if self._announced is not None:
            self._announced.remove()
        self.shims.close()
        await self.desk.close()
        await self.conversations.close()
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)
        self.guessers.close()
        self.store.close()
        if self._own_http:
            await self._http.aclose()
        self.runtime.close()


class _DaemonCollector:
    """The daemon's counts as Prometheus metrics (read at each scrape)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def collect(self) -> Any:
        relay = self.daemon.relay.counts
        for name, value in sorted(vars(relay).items()):
            yield CounterMetricFamily(f"forethought_daemon_relay_{name}", f"Model requests: {name}.", value=value)
        counts = self.daemon.desk.counts
        claims = CounterMetricFamily("forethought_daemon_claims", "Shim claims by outcome.", labels=["outcome"])
        claims.add_metric(["hit"], counts.hits)
        claims.add_metric(["run"], counts.runs - counts.untracked)
        claims.add_metric(["untracked"], counts.untracked)
        yield claims
        yield CounterMetricFamily("forethought_daemon_seconds_saved", "Tool seconds hidden by hits.",
                                  value=counts.saved_s)
        yield GaugeMetricFamily("forethought_daemon_linked_servers", "Linked shims.",
                                value=len(self.daemon.shims.live()))
        yield GaugeMetricFamily("forethought_daemon_conversations", "Conversations followed.",
                                value=len(self.daemon.conversations))
        budget = self.daemon.guessers.budget
        if budget is not None:
            yield CounterMetricFamily("forethought_daemon_speculator_tokens", "Speculator model tokens.",
                                      value=budget.total)


@contextlib.asynccontextmanager
async def serve_daemon(config: DaemonConfig | None = None, port: int = 0, **options: Any) -> AsyncIterator[Daemon]:
    """Run a daemon on 127.0.0.1 (``port``; 0: a free one) while the block runs; its ``url`` attribute is set,
    and its file announced where the config says."""
    daemon = Daemon(config, **options)
    try:
        async with serve_in_process(daemon.app, port=port) as url:
            daemon.url = url
            daemon.announce(url)
            yield daemon
    finally:
        await daemon.aclose()
