"""The proxy's pattern predictor in a worker process: its learning and predicting off the proxy's loop.

Run on the proxy's event loop, the pattern predictor's work (a few milliseconds to predict and as many to
learn after every answer, measured in ``docs/mcp.md``) sits in front of whatever the loop does next,
such as the client's next message. :class:`WorkerPatterns` is the predictor a session uses instead. It
has the same guesses, and its work runs in one
:class:`~forethought.predictors.offload.OffloadedPredictor` worker process per client session. On the
loop it only pickles each call's context, with the tool schemas left out because the worker already
holds them.

:class:`StoredPatterns` is what the worker holds: a
:class:`~forethought.predictors.patterns.PatternPredictor` on the SQLite pattern store. The store is
opened in the worker (so loading what was learned costs the loop nothing), under the tool-set
fingerprint, and writers only add, so concurrent proxy processes share it. The worker saves what it
learned only at its checkpoints (every :data:`SAVE_EVERY` observations: pickling it saves first) and when
the session ends. A worker that dies is replaced from its last checkpoint: the replacement loads the store
(which holds everything up to that checkpoint) and the observations since are replayed, so nothing is
counted twice. (Only a worker that dies after saving but before its answer reached the proxy leaves
those observations to be replayed and saved again.)

A dead worker never fails or delays a client call. The proxy awaits predictions only after an answer went
to the client, a failed prediction is logged and predicts nothing, and the next use starts a new worker
(see :class:`~forethought.predictors.offload.OffloadedPredictor`). A worker that cannot start stops the
session's speculation and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from forethought.errors import PredictorError
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.offload import OffloadedPredictor
from forethought.predictors.patterns import PatternConfig, PatternPredictor
from forethought.predictors.patterns.store import SqlitePatternStore, tool_set_fingerprint

log = logging.getLogger(__name__)

SAVE_SESSION = "forethought-mcp-save"
"""A prediction asked under this session id saves what the worker learned (and predicts nothing): the
worker runs calls in order, so once it answers, every observation queued before it is saved."""
SAVE_EVERY = 64
"""Observations between the worker's saves (its checkpoints: a replacement worker starts from there)."""
EARLY_OBSERVATIONS = 256
"""Observations kept for a worker not started yet (the latest)."""
CLOSE_TIMEOUT_S = 1.5
"""How long a session's end waits for its worker to start (if it has not yet) and save, before stopping it."""
_NEVER = sys.maxsize
_NO_TOOLS: Mapping[str, Mapping[str, Any]] = {}
_SAVE = PredictionContext(session_id=SAVE_SESSION, messages=(), user_message="")


class StoredPatterns:
    """The pattern predictor of one tool set on the store at ``path``; the store is opened where it is
    unpickled (in the worker), and pickling it saves first (so a checkpoint is a save)."""

    def __init__(self, path: str, tools: Mapping[str, Mapping[str, Any]], config: PatternConfig | None = None
                 ) -> None:
        self.path = path
        self.tools = dict(tools)
        self.config = config or PatternConfig()
        self.fingerprint = tool_set_fingerprint(self.tools)
        self.name = PatternPredictor.name
        self._inner: PatternPredictor | None = None

    def open(self) -> PatternPredictor:
        """Open the store and load what it holds for this tool set (the worker does this when it loads)."""
        if self._inner is None:
            # saves happen here (checkpoints and the session's end), never inside observe: a replayed
            # observation is then never saved twice
            config = replace(self.config, flush_every=_NEVER)
            self._inner = PatternPredictor(SqlitePatternStore(self.path), self.fingerprint, config)
        return self._inner

    def save(self) -> None:
        """Add what was learned since the last save to the store (a failure is logged, kept for later)."""
        if self._inner is None:
            return
        try:
            self._inner.flush()
        except (sqlite3.Error, OSError) as exc:
            log.warning("pattern store %s: save failed, kept in memory: %s", self.path, exc)

    def __reduce__(self) -> tuple[Any, ...]:
        self.save()
        return (_opened, (self.path, self.tools, self.config))

    def _full(self, context: PredictionContext) -> PredictionContext:
        return context if context.tools else replace(context, tools=self.tools)

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        if context.session_id == SAVE_SESSION:
            self.save()
            return []
        return self.open().predict_now(self._full(context))

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        self.open().observe(self._full(context), observed)


def _opened(path: str, tools: Mapping[str, Mapping[str, Any]], config: PatternConfig) -> StoredPatterns:
    """A :class:`StoredPatterns` unpickled: its store opened and loaded."""
    patterns = StoredPatterns(path, tools, config)
    patterns.open()
    return patterns


class WorkerPatterns:
    """A session's pattern predictor run by a worker process (implements
    :class:`~forethought.predictors.base.Predictor`). The worker starts at :meth:`start` (``start=True``: at
    once, on the running loop); until then it predicts nothing, and what it is told to learn waits (the
    latest :data:`EARLY_OBSERVATIONS`) and is learnt once it starts. The proxy starts it once it knows a
    guess can pay (after a session's first answers), so that starting it (an interpreter and its imports)
    is never on the path of the first answers, nor started at all for a client that never leaves time."""

    def __init__(self, path: str | Path, tools: Mapping[str, Mapping[str, Any]],
                 config: PatternConfig | None = None, start: bool = True) -> None:
        patterns = StoredPatterns(str(path), tools, config)
        self.name = patterns.name
        self.fingerprint = patterns.fingerprint
        self.worker = OffloadedPredictor(patterns, checkpoint_every=SAVE_EVERY)
        self._started: asyncio.Task[bool] | None = None
        self._closed = False
        self._early: deque[tuple[PredictionContext, ObservedCall]] = deque(maxlen=EARLY_OBSERVATIONS)
        if start:
            self.start()

    @property
    def started(self) -> bool:
        return self._started is not None

    def start(self) -> None:
        """Start the worker (once; on the running loop); what waited to be learnt is queued to it first."""
        if self._started is not None or self._closed:
            return
        self._started = asyncio.get_running_loop().create_task(self._start())
        early, self._early = list(self._early), deque(maxlen=EARLY_OBSERVATIONS)
        for context, observed in early:
            self.observe(context, observed)

    async def _start(self) -> bool:
        try:
            await self.worker.start()
            return True
        except Exception as exc:  # PredictorError: it cannot load; anything else: it could not be started
            log.warning("the pattern predictor's worker did not start; this session speculates nothing: %s", exc)
            return False

    async def ready(self) -> bool:
        """Wait until the worker has loaded the predictor; whether it did (``False`` if never started)."""
        return await asyncio.shield(self._started) if self._started is not None else False

    @property
    def last_predict_cpu_s(self) -> float | None:
        """The worker's CPU seconds for the latest prediction (``None``: none came back)."""
        return self.worker.last_predict_cpu_s

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        """The worker's predictions (none, logged, when the worker failed or died meanwhile; none before it
        was started)."""
        if self._started is None:
            return []
        try:
            return await self.worker.predict(replace(context, tools=_NO_TOOLS))
        except PredictorError as exc:
            log.warning("pattern prediction failed: %s", exc)
            return []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Queue the call for the worker to learn; returns at once (before :meth:`start`, it waits)."""
        if self._started is None:
            self._early.append((context, observed))
            return
        try:
            self.worker.observe(replace(context, tools=_NO_TOOLS), observed)
        except PredictorError as exc:
            log.warning("pattern learning failed: %s", exc)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Save what the worker learned, then stop it. Waiting for a worker still starting and for its
        save takes at most ``timeout_s`` (a dead worker's replacement replays what it had not saved, then
        saves). A worker that has not saved by then is stopped at once, and what it had not saved is lost:
        an MCP client gives a stdio server about 2 s to exit."""
        if self._closed:
            return
        self._closed = True
        if self._started is None:
            return  # never started: nothing to save or stop
        saved = False
        try:
            async with asyncio.timeout(timeout_s):
                if self._started is not None and await asyncio.shield(self._started):
                    for _ in range(2):  # the second try goes to a worker replaced after a death
                        try:
                            await self.worker.predict(_SAVE)
                            saved = True
                            break
                        except PredictorError as exc:
                            log.warning("pattern store: the worker failed to save: %s", exc)
        except TimeoutError:
            log.warning("pattern store: the worker did not save within %.1f s; stopping it", timeout_s)
        if not saved and self._started is not None:
            self._started.cancel()
            self._stop_now()
        with contextlib.suppress(PredictorError):
            await self.worker.close()

    def _stop_now(self) -> None:
        """End the worker process without waiting for it (it may be loading, or stuck in a save)."""
        self.worker.kill()
