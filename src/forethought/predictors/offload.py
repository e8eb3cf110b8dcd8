"""A predictor run in a worker process, so that its CPU never blocks the agent's event loop.

A pattern predictor spends milliseconds per prediction and per observed call (more on big outputs). Run on
the agent's event loop, that time delays everything else the loop does: the model's stream, tool results,
other agents' steps. :class:`OffloadedPredictor` keeps the wrapped predictor in one worker process (a
single-worker :class:`~concurrent.futures.ProcessPoolExecutor`, started with ``spawn``) and talks to it by
pickled calls: :meth:`~OffloadedPredictor.observe` queues the observation and returns at once;
:meth:`~OffloadedPredictor.predict` awaits the worker's answer. The worker runs calls in the order they
were made, so a prediction always sees every observation made before it.

Nothing is lost when the worker dies (killed, out of memory): the next call starts a new worker from the
predictor as it was handed over and replays every observation since, in order; the prediction that was
in flight fails with a :class:`~forethought.errors.PredictorError` (the agent reports it and goes on
without that predictor's guesses for the step). An observation that cannot be sent (not picklable) or that
the wrapped predictor raises on is counted (``failed_observations``), logged and skipped, never raised.
The parent keeps the observations for the replay (references to what the agent already holds).

The wrapped predictor must be picklable (a :class:`~forethought.predictors.patterns.PatternPredictor` is).
Call :meth:`~OffloadedPredictor.start` before timing anything (it starts the worker and loads the
predictor) and :meth:`~OffloadedPredictor.close` at the end. The wrapper is not a chaining predictor
(``predict_after`` is synchronous and would block on the worker): chains need an in-process predictor.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import multiprocessing
import pickle
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from forethought.errors import PredictorError
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor

__all__ = ["OffloadedPredictor"]

_log = logging.getLogger(__name__)
_worker_predictor: Any = None  # the wrapped predictor, in the worker process only


def _load(snapshot: bytes) -> None:
    global _worker_predictor
    _worker_predictor = pickle.loads(snapshot)
    gc.collect()
    gc.freeze()  # the loaded state is long-lived: full collections need not walk it again and again


def _ready() -> str:
    return str(getattr(_worker_predictor, "name", ""))


def _observe(context: PredictionContext, observed: ObservedCall) -> None:
    _worker_predictor.observe(context, observed)


def _predict(context: PredictionContext) -> list[Prediction]:
    result = asyncio.run(_worker_predictor.predict(context))
    return list(result)


class OffloadedPredictor:
    """``predictor`` run in a worker process: the same guesses, none of its CPU on the caller's loop."""

    def __init__(self, predictor: Predictor) -> None:
        self._setup(predictor.name, self.pickled(predictor))

    @classmethod
    def from_pickle(cls, snapshot: bytes, name: str) -> OffloadedPredictor:
        """A worker for the predictor pickled in ``snapshot`` (:meth:`pickled`): many workers from one
        snapshot, and the caller need not keep the predictor itself in memory."""
        offloaded = cls.__new__(cls)
        offloaded._setup(name, snapshot)
        return offloaded

    @staticmethod
    def pickled(predictor: Predictor) -> bytes:
        """``predictor`` as a worker loads it; :class:`PredictorError` when it cannot be pickled."""
        try:
            return pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise PredictorError(f"predictor {predictor.name!r} cannot run in a worker process: it is not "
                                 f"picklable ({type(exc).__name__}: {exc})") from exc

    def _setup(self, name: str, snapshot: bytes) -> None:
        self.name = name
        self._snapshot = snapshot
        self._log: list[tuple[PredictionContext, ObservedCall]] = []
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self.restarts = 0
        """How many times a dead worker was replaced (its observations replayed)."""
        self.failed_observations = 0
        """Observations the wrapped predictor raised on (each skipped, as the agent would)."""

    async def start(self) -> None:
        """Start the worker and wait until the predictor is loaded (so no timed step pays for it)."""
        pool = self._ensure()
        await asyncio.wrap_future(pool.submit(_ready))

    def worker_pid(self) -> int | None:
        """The worker process's id (``None`` before it starts or after it stopped)."""
        processes = getattr(self._pool, "_processes", None) or {}
        return next(iter(processes), None)

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Queue one authoritative call for the worker; returns at once."""
        self._log.append((context, observed))
        self._send_observe(context, observed)

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        """The wrapped predictor's predictions for ``context``, computed in the worker."""
        pool = self._ensure()
        try:
            future = pool.submit(_predict, context)
        except BrokenProcessPool:
            pool = self._restart()
            future = pool.submit(_predict, context)
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._restart()
            raise PredictorError(f"predictor {self.name!r}: its worker process died during a prediction "
                                 "(a new worker was started with every observation replayed)") from exc

    async def close(self) -> None:
        """Stop the worker (pending observations are dropped with it; the predictor is not saved back)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            stop = functools.partial(pool.shutdown, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, stop)

    # --- the worker -----------------------------------------------------------------------------

    def _ensure(self) -> ProcessPoolExecutor:
        if self._closed:
            raise PredictorError(f"predictor {self.name!r} was closed")
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_load, initargs=(self._snapshot,))
        return self._pool

    def _restart(self) -> ProcessPoolExecutor:
        """Replace a dead worker: a fresh one from the snapshot, every observation so far replayed."""
        old, self._pool = self._pool, None
        if old is not None:
            old.shutdown(wait=False, cancel_futures=True)
        self.restarts += 1
        _log.warning("predictor %s: worker process died; restarting it and replaying %d observations",
                     self.name, len(self._log))
        pool = self._ensure()
        try:
            for context, observed in self._log:
                pool.submit(_observe, context, observed).add_done_callback(self._observed)
        except BrokenProcessPool as exc:  # the new worker died at once: its predictor cannot be loaded
            self._pool = None
            raise PredictorError(f"predictor {self.name!r}: a new worker process died while starting") from exc
        return pool

    def _send_observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        try:
            future = self._ensure().submit(_observe, context, observed)
        except BrokenProcessPool:
            self._restart()  # replays the log, which already holds this observation
            return
        future.add_done_callback(self._observed)

    def _observed(self, future: Future[None]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None or isinstance(exc, BrokenProcessPool):
            return  # a dead worker is replaced (and the observation replayed) on the next call
        self.failed_observations += 1
        _log.warning("predictor %s failed to learn from a call and skipped it: %s", self.name,
                     type(exc).__name__)
