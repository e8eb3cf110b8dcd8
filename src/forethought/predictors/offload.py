"""A predictor run in a worker process, so that its CPU never blocks the agent's event loop.

A pattern predictor spends milliseconds per prediction and per observed call (more on big outputs), and
its learned state makes every full garbage collection of the process slow. Run on the agent's event loop,
that time delays everything else the loop does: the model's stream, tool results, other agents' steps.
:class:`OffloadedPredictor` keeps the wrapped predictor in one worker process (a single-worker
:class:`~concurrent.futures.ProcessPoolExecutor`, started with ``spawn``) and talks to it by pickled calls:
:meth:`~OffloadedPredictor.observe` queues the observation and returns at once;
:meth:`~OffloadedPredictor.predict` and :meth:`~OffloadedPredictor.predict_after_async` (chains) await the
worker's answer. The worker runs calls in the order they were made, so a prediction always sees every
observation made before it. What stays on the caller's thread is pickling each call's context (about a
millisecond per megabyte of transcript).

Nothing is lost when the worker dies (killed, out of memory): the next call starts a new worker from the
last checkpoint of the predictor (taken every ``checkpoint_every`` observations; at first the predictor as
it was handed over) and replays every observation since, in order; one death restarts the worker once,
however many calls were in flight, and those calls fail with a
:class:`~forethought.errors.PredictorError` (the agent reports it and goes on without that predictor's
guesses for the step). A worker that cannot even load the predictor (it dies before answering) fails
:meth:`~OffloadedPredictor.start` with a ``PredictorError`` and is not started again and again. An
observation that cannot be sent (not picklable) or that the wrapped predictor raises on is counted
(``failed_observations``), logged and dropped, never raised. A worker whose parent dies exits.

The wrapped predictor must be picklable (a :class:`~forethought.predictors.patterns.PatternPredictor` is);
it is handed to the worker as a file, so that starting a worker never writes megabytes through a pipe on
the caller's thread. Call :meth:`~OffloadedPredictor.start` before timing anything (it starts the worker
and loads the predictor) and :meth:`~OffloadedPredictor.close` at the end (after
:meth:`~OffloadedPredictor.kill` where the worker must not be waited for). A script that uses it needs the
``if __name__ == "__main__":`` guard that ``spawn`` needs (without it, each worker reruns the script).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import multiprocessing
import os
import pickle
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from forethought.errors import PredictorError
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor

__all__ = ["OffloadedPredictor"]

_log = logging.getLogger(__name__)
_worker_predictor: Any = None  # the wrapped predictor, in the worker process only
CHECKPOINT_EVERY = 2000
"""Observations between checkpoints of the worker's predictor (what a replacement worker starts from)."""
UNPROVEN_DEATHS = 2
"""Workers in a row that die before answering once: then the predictor cannot be loaded (never respawned)."""


def _exit_with_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is not None:
        parent.join()  # returns when the parent has gone
        os._exit(0)


WORKER_NICENESS = 5
"""How much lower the worker's CPU priority is than its parent's: a guess never takes CPU from the agent."""


def _load(path: str) -> None:
    global _worker_predictor
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent ends this worker
    with contextlib.suppress(OSError, AttributeError):  # no nice() on this platform: same priority
        os.nice(WORKER_NICENESS)
    with open(path, "rb") as handle:
        _worker_predictor = pickle.load(handle)
    gc.collect()
    gc.freeze()  # the loaded state is long-lived: full collections need not walk it again and again
    threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()


def _ready() -> str:
    return str(getattr(_worker_predictor, "name", ""))


def _observe(context: PredictionContext, observed: ObservedCall) -> None:
    _worker_predictor.observe(context, observed)


def _predict(context: PredictionContext) -> tuple[list[Prediction], float]:
    started = time.thread_time()
    predictions = list(asyncio.run(_worker_predictor.predict(context)))
    return predictions, time.thread_time() - started


def _predict_after(context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
    method = getattr(_worker_predictor, "predict_after", None)
    return [] if method is None else list(method(context, speculated))


def _checkpoint() -> bytes:
    return pickle.dumps(_worker_predictor, protocol=pickle.HIGHEST_PROTOCOL)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class OffloadedPredictor:
    """``predictor`` run in a worker process: the same guesses, none of its work on the caller's loop."""

    def __init__(self, predictor: Predictor, *, checkpoint_every: int = CHECKPOINT_EVERY) -> None:
        self._setup(predictor.name, self.pickled(predictor), checkpoint_every)

    @classmethod
    def from_pickle(cls, snapshot: bytes, name: str, *, checkpoint_every: int = CHECKPOINT_EVERY
                    ) -> OffloadedPredictor:
        """A worker for the predictor pickled in ``snapshot`` (:meth:`pickled`): many workers from one
        snapshot, and the caller need not keep the predictor itself in memory."""
        offloaded = cls.__new__(cls)
        offloaded._setup(name, snapshot, checkpoint_every)
        return offloaded

    @staticmethod
    def pickled(predictor: Predictor) -> bytes:
        """``predictor`` as a worker loads it; :class:`PredictorError` when it cannot be pickled."""
        try:
            return pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise PredictorError(f"predictor {predictor.name!r} cannot run in a worker process: it is not "
                                 f"picklable ({type(exc).__name__}: {exc})") from exc

    def _setup(self, name: str, snapshot: bytes, checkpoint_every: int) -> None:
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        self.name = name
        self.checkpoint_every = checkpoint_every
        self._path = ""
        self._finalizer: weakref.finalize[[str], OffloadedPredictor] | None = None
        self._save(snapshot)
        self._log: list[tuple[int, PredictionContext, ObservedCall]] = []  # (number, context, call)
        self._numbered = 0
        self._since_checkpoint = 0
        self._pool: ProcessPoolExecutor | None = None
        self._proven: ProcessPoolExecutor | None = None  # the last pool whose worker answered (loaded it)
        self._unproven_deaths = 0  # workers in a row that died before answering
        self._unloadable: str | None = None
        self._closed = False
        self.last_predict_cpu_s: float | None = None
        """CPU seconds the worker spent on the latest prediction (``None`` until one has come back): what a
        prediction costs the machine, where its wall time (queueing, the round trip) overlaps the caller's."""
        self.restarts = 0
        """How many times a dead worker was replaced (its observations replayed)."""
        self.failed_observations = 0
        """Observations that could not be sent or that the wrapped predictor raised on (each dropped)."""
        self.checkpoints = 0
        """Checkpoints taken (each shortens the replay a replacement worker would need)."""

    # --- the predictor ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the worker and wait until the predictor is loaded (so no timed step pays for it)."""
        while True:
            try:
                await self._call(_ready)
                return
            except PredictorError:
                if self._unloadable is not None or self._closed:
                    raise
                # the worker died while starting (killed?): it was replaced; wait for the new one

    def worker_pid(self) -> int | None:
        """The worker process's id (``None`` before it starts or after it stopped)."""
        processes = getattr(self._pool, "_processes", None) or {}
        return next(iter(processes), None)

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Queue one authoritative call for the worker; returns at once (raises only once closed).

        A predictor its worker cannot load takes no more observations (its predictions fail clearly)."""
        self._numbered += 1
        number = self._numbered
        self._log.append((number, context, observed))
        if self._unloadable is not None and not self._closed:
            return
        pool = self._ensure()
        try:
            future = pool.submit(_observe, context, observed)
        except BrokenProcessPool:
            try:
                self._restart(pool)  # replays the log, which already holds this observation
            except PredictorError as exc:
                _log.warning("%s", exc)
            return
        self._watch(future, number)
        self._since_checkpoint += 1
        if self._since_checkpoint >= self.checkpoint_every:
            self._take_checkpoint(pool)

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        """The wrapped predictor's predictions for ``context``, computed in the worker."""
        self.last_predict_cpu_s = None
        predictions: list[Prediction]
        predictions, self.last_predict_cpu_s = await self._call(_predict, context)
        return predictions

    async def predict_after_async(self, context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
        """The calls the wrapped predictor expects after ``speculated`` (its ``predict_after``; none if it
        has no such method), computed in the worker: what the agent chains past a speculated read."""
        successors: list[Prediction] = await self._call(_predict_after, context, speculated)
        return successors

    def kill(self) -> None:
        """End the worker process at once, without waiting for it (it may be loading, or stuck in a long
        call): the predictor is closed (later calls raise :class:`~forethought.errors.PredictorError`) and
        :meth:`close` still has to be awaited to release the pool. Work still queued is cancelled first, by
        the pool itself: a queued call cancelled by its caller and then failed by the pool's death would
        raise in the pool's own thread on Python 3.11 (CPython gh-107219)."""
        self._closed = True
        pool, pid = self._pool, self.worker_pid()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)  # the pool drops what is queued before it sees a death
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    async def close(self) -> None:
        """Stop the worker (work still queued is cancelled; the predictor is not saved back)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            stop = functools.partial(pool.shutdown, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, stop)
        if self._finalizer is not None:
            self._finalizer()

    # --- the worker ---------------------------------------------------------------------------------

    async def _call(self, function: Any, *args: Any) -> Any:
        pool = self._ensure()
        try:
            future = pool.submit(function, *args)
        except BrokenProcessPool:
            pool = self._restart(pool)
            future = pool.submit(function, *args)
        try:
            result = await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            if self._pool is pool:
                self._restart(pool)  # gives up instead when this worker never answered
            raise PredictorError(f"predictor {self.name!r}: its worker process died during a prediction "
                                 "(a new worker was started with every observation replayed)") from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and (task is None or not task.cancelling()):
                raise PredictorError(f"predictor {self.name!r}: the prediction was cancelled by its worker "
                                     "being stopped or replaced") from None
            raise
        self._prove(pool)
        return result

    def _ensure(self) -> ProcessPoolExecutor:
        if self._closed:
            raise PredictorError(f"predictor {self.name!r} was closed")
        if self._unloadable is not None:
            raise PredictorError(self._unloadable)
        if self._pool is None:
            pool = self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                    initializer=_load, initargs=(self._path,))
            loop = _running_loop()

            def loaded(f: Future[str]) -> None:  # the worker answered: it could load the predictor
                if not f.cancelled() and f.exception() is None:
                    if loop is None:
                        self._prove(pool)
                    else:
                        loop.call_soon_threadsafe(self._prove, pool)

            pool.submit(_ready).add_done_callback(loaded)
        return self._pool

    def _prove(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            self._proven = pool
            self._unproven_deaths = 0

    def _restart(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """Replace the dead worker of ``broken`` (once, however many calls saw it die): a fresh one from
        the last checkpoint, every observation since replayed."""
        if self._pool is not broken:
            return self._ensure()  # another call already replaced it
        if self._proven is not broken:
            self._unproven_deaths += 1
            if self._unproven_deaths >= UNPROVEN_DEATHS:
                self._give_up(broken, None)
        self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)
        self.restarts += 1
        _log.warning("predictor %s: worker process died; restarting it and replaying %d observations",
                     self.name, len(self._log))
        pool = self._ensure()
        for number, context, observed in self._log:
            self._watch(pool.submit(_observe, context, observed), number)
        return pool

    def _give_up(self, pool: ProcessPoolExecutor, exc: BaseException | None) -> None:
        """A worker died before it answered once: it cannot load the predictor; never start another."""
        self._unloadable = (f"predictor {self.name!r}: its worker process could not load it and died (see its "
                            "traceback above: the predictor's classes must be importable in a new process, "
                            "and a script needs the `if __name__ == \"__main__\":` guard)")
        if self._pool is pool:
            self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)
        raise PredictorError(self._unloadable) from exc

    def _watch(self, future: Future[None], number: int) -> None:
        loop = _running_loop()

        def done(f: Future[None]) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is None or isinstance(exc, BrokenProcessPool):
                return  # a dead worker is replaced (and the observation replayed) on the next call
            if loop is None:
                self._failed(number, exc)
            else:
                loop.call_soon_threadsafe(self._failed, number, exc)

        future.add_done_callback(done)

    def _failed(self, number: int, exc: BaseException) -> None:
        """On the caller's loop: count the failure and drop the observation from the replay log."""
        self.failed_observations += 1
        self._log = [entry for entry in self._log if entry[0] != number]
        _log.warning("predictor %s failed to learn from a call and skipped it: %s", self.name,
                     type(exc).__name__)

    def _take_checkpoint(self, pool: ProcessPoolExecutor) -> None:
        """Ask the worker for its predictor as it is now; once it answers, the replay starts there."""
        self._since_checkpoint = 0
        covered = self._numbered
        loop = _running_loop()

        def done(f: Future[bytes]) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            if loop is None:
                self._checkpointed(f.result(), covered, pool)
            else:
                loop.call_soon_threadsafe(self._checkpointed, f.result(), covered, pool)

        pool.submit(_checkpoint).add_done_callback(done)

    def _checkpointed(self, snapshot: bytes, covered: int, pool: ProcessPoolExecutor) -> None:
        if self._closed or self._pool is not pool:
            return  # a replacement replayed from the older snapshot: keep both consistent
        self._save(snapshot)
        self._log = [entry for entry in self._log if entry[0] > covered]
        self.checkpoints += 1

    def _save(self, snapshot: bytes) -> None:
        """Write ``snapshot`` to a new file the next worker loads (removed at close or exit)."""
        handle, path = tempfile.mkstemp(prefix="forethought-predictor-", suffix=".pickle")
        with os.fdopen(handle, "wb") as out:
            out.write(snapshot)
        if self._finalizer is not None:
            self._finalizer()
        self._path = path
        self._finalizer = weakref.finalize(self, _remove, path)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
