"""A predictor in a worker process: the same guesses as in process, in order, nothing lost when the worker
dies, clear errors for what cannot work (what it saves on the caller's loop is measured by the bench:
``forethought bench --offload`` vs ``--in-process``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import AsyncIterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import OffloadedPredictor, PredictorError, ToolCall
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from forethought.predictors.offload import UNPROVEN_DEATHS
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train

OBJECT = {"type": "object", "properties": {}}
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = {"list_dir": OBJECT, "read_file": PATH, "summarize": OBJECT,
         "search": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
TOPICS = ["otters", "comets", "tides", "lichens", "moss", "quartz", "dunes", "kelp"]


def _session(n: int, topic: str) -> RecordedSession:
    path = f"/notes/{topic}_{n}.md"
    listing = json.dumps({"files": [path, f"/notes/other_{n}.md"]})
    calls = (ObservedCall(ToolCall("search", {"query": topic}), listing),
             ObservedCall(ToolCall("read_file", {"path": path}), f"all about {topic}"),
             ObservedCall(ToolCall("summarize"), "short"))
    return RecordedSession(f"r{n}", (RecordedTurn(f"Research '{topic}' for me", calls),), TOOLS)


def _trained() -> PatternPredictor:
    predictor = PatternPredictor()
    train(predictor, [_session(n, t) for n, t in enumerate(TOPICS[:4])])
    return predictor


def _steps(n: int, topic: str) -> list[tuple[PredictionContext, ObservedCall]]:
    return [(context, observed) for context, observed, _ in contexts(_session(n, topic))]


@pytest.fixture
async def pair() -> AsyncIterator[tuple[PatternPredictor, OffloadedPredictor]]:
    trained = _trained()
    local = trained.copy()  # what pickling keeps is what a copy keeps
    remote = OffloadedPredictor(trained)
    await remote.start()
    try:
        yield local, remote
    finally:
        await remote.close()


def _calls(predictions: Sequence[Prediction]) -> list[tuple[ToolCall, float, bool, str]]:
    return [(p.call, round(p.confidence, 9), p.executable, p.source) for p in predictions]


async def test_same_predictions_as_in_process_with_observations_in_order(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    local, remote = pair
    for n, topic in enumerate(TOPICS[4:], start=10):
        for context, observed in _steps(n, topic):
            assert _calls(await remote.predict(context)) == _calls(await local.predict(context))
            local.observe(context, observed)
            remote.observe(context, observed)  # returns at once; the next predict sees it
    assert remote.failed_observations == 0 and remote.restarts == 0


async def test_each_prediction_reports_the_workers_cpu_for_it(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    """What a prediction costs the machine is the worker's CPU for it, not its round trip (the MCP proxy's
    payoff of predicting counts this)."""
    _, remote = pair
    assert remote.last_predict_cpu_s is None
    seen = []
    for context, _ in _steps(20, TOPICS[4]):
        await remote.predict(context)
        assert isinstance(remote.last_predict_cpu_s, float)
        seen.append(remote.last_predict_cpu_s)
    assert all(0.0 <= s < 5.0 for s in seen) and any(s > 0.0 for s in seen)


async def test_a_killed_worker_is_replaced_with_every_observation_replayed(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    local, remote = pair
    steps = _steps(20, "glaciers")
    for context, observed in steps[:2]:
        local.observe(context, observed)
        remote.observe(context, observed)
    await remote.predict(steps[0][0])
    worker = remote.worker_pid()
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    context = steps[2][0]
    for _ in range(50):  # the pool notices the death asynchronously: a prediction either fails clearly or works
        try:
            got = await remote.predict(context)
        except PredictorError as exc:
            assert "died" in str(exc)
            continue
        if remote.restarts:
            break
        await asyncio.sleep(0.05)
    assert remote.restarts == 1
    assert remote.worker_pid() not in (None, worker)
    assert _calls(got) == _calls(await local.predict(context))


class _Unpicklable:
    name = "closure"

    def __init__(self) -> None:
        self.rule = lambda x: x

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def test_an_unpicklable_predictor_is_refused_with_its_name() -> None:
    predictor: Predictor = _Unpicklable()
    with pytest.raises(PredictorError, match="'closure' cannot run in a worker process: it is not picklable"):
        OffloadedPredictor(predictor)


async def test_a_closed_predictor_says_so() -> None:
    remote = OffloadedPredictor(PatternPredictor())
    await remote.start()
    await remote.close()
    context = _steps(1, "otters")[0][0]
    with pytest.raises(PredictorError, match="was closed"):
        await remote.predict(context)
    with pytest.raises(PredictorError, match="was closed"):
        remote.observe(context, _steps(1, "otters")[0][1])


async def test_a_bad_observation_is_counted_and_skipped_not_raised() -> None:
    remote = OffloadedPredictor(_trained())
    await remote.start()
    try:
        context, observed = _steps(30, "rain")[0]
        bad = ObservedCall(ToolCall("search", {"query": lambda: 0}), "x")  # cannot even be pickled
        remote.observe(context, bad)
        remote.observe(context, observed)
        await remote.predict(context)
        for _ in range(100):
            if remote.failed_observations:
                break
            await asyncio.sleep(0.01)
        assert remote.failed_observations == 1
        assert remote.restarts == 0
    finally:
        await remote.close()


def test_a_pattern_predictor_round_trips_through_pickle_with_what_it_learned() -> None:
    import pickle

    trained = _trained()
    local = trained.copy()
    clone = pickle.loads(pickle.dumps(trained))
    assert clone.store is None
    for context, _ in _steps(40, "ferns"):
        assert _calls(clone.predict_now(context)) == _calls(local.predict_now(context))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 2), st.booleans()), min_size=1, max_size=12))
async def test_any_interleaving_of_observe_and_predict_matches_in_process(
        pair: tuple[PatternPredictor, OffloadedPredictor], ops: list[tuple[str, int, bool]]) -> None:
    local, remote = pair
    for topic, index, learn in ops:
        context, observed = _steps(TOPICS.index(topic), topic)[index]
        if learn:
            local.observe(context, observed)
            remote.observe(context, observed)
        else:
            assert _calls(await remote.predict(context)) == _calls(await local.predict(context))


async def test_workers_from_one_snapshot_are_independent_copies() -> None:
    trained = _trained()
    snapshot = OffloadedPredictor.pickled(trained)
    first, second = (OffloadedPredictor.from_pickle(snapshot, trained.name) for _ in range(2))
    await asyncio.gather(first.start(), second.start())
    try:
        local = trained.copy()
        context, observed = _steps(60, "basalt")[0]
        first.observe(context, observed)  # only the first learns
        local.observe(context, observed)
        later = _steps(60, "basalt")[1][0]
        assert _calls(await first.predict(later)) == _calls(await local.predict(later))
        assert _calls(await second.predict(later)) == _calls(await trained.copy().predict(later))
        assert first.worker_pid() != second.worker_pid()
    finally:
        await asyncio.gather(first.close(), second.close())


async def _kill_and_wait_broken(remote: OffloadedPredictor) -> None:
    pool = remote._pool
    pid = remote.worker_pid()
    assert pool is not None and pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        if getattr(pool, "_broken", False):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the pool never noticed its worker died")


async def test_a_prediction_on_an_already_broken_worker_sees_every_observation(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    local, remote = pair
    steps = _steps(70, "glaciers")
    for context, observed in steps[:2]:
        local.observe(context, observed)
        remote.observe(context, observed)
    await remote.predict(steps[0][0])
    await _kill_and_wait_broken(remote)
    got = await remote.predict(steps[2][0])  # the submit finds the pool broken: restart, replay, then this
    assert remote.restarts == 1
    assert _calls(got) == _calls(await local.predict(steps[2][0]))


async def test_an_observation_on_an_already_broken_worker_restarts_it_and_replays(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    local, remote = pair
    steps = _steps(71, "glaciers")
    local.observe(*steps[0])
    remote.observe(*steps[0])
    await remote.predict(steps[0][0])
    await _kill_and_wait_broken(remote)
    local.observe(*steps[1])
    remote.observe(*steps[1])  # the restart happens here
    assert remote.restarts == 1
    assert _calls(await remote.predict(steps[2][0])) == _calls(await local.predict(steps[2][0]))


async def test_one_death_with_many_predictions_in_flight_restarts_the_worker_once(
        pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    local, remote = pair
    context = _steps(72, "glaciers")[0][0]
    await remote.predict(context)
    tasks = [asyncio.create_task(remote.predict(context)) for _ in range(4)]
    await asyncio.sleep(0)
    pid = remote.worker_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert remote.restarts == 1
    for result in results:  # each either made it before the death or failed clearly
        assert isinstance(result, PredictorError) or _calls(result) == _calls(await local.predict(context))  # type: ignore[arg-type]
    assert _calls(await remote.predict(context)) == _calls(await local.predict(context))


class _Unloadable:
    """Pickles fine, but loading it raises (as a class the worker cannot import would)."""

    name = "unloadable"

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (int, ("not a number",))

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


async def test_a_predictor_the_worker_cannot_load_fails_clearly_and_is_not_respawned() -> None:
    remote = OffloadedPredictor(_Unloadable())
    try:
        with pytest.raises(PredictorError, match="could not load it"):
            await remote.start()
        context, observed = _steps(80, "otters")[0]
        remote.observe(context, observed)  # never raises: the predictor simply takes no more
        for _ in range(3):
            with pytest.raises(PredictorError, match="could not load it"):
                await remote.predict(context)
        assert remote.restarts == UNPROVEN_DEATHS - 1 and remote.worker_pid() is None  # tried twice, then never
    finally:
        await remote.close()


async def test_checkpoints_shorten_the_replay_and_lose_nothing() -> None:
    trained = _trained()
    local = trained.copy()
    remote = OffloadedPredictor(trained, checkpoint_every=3)
    await remote.start()
    try:
        steps = [s for n, t in enumerate(TOPICS) for s in _steps(90 + n, t)][:8]
        for context, observed in steps:
            local.observe(context, observed)
            remote.observe(context, observed)
        await remote.predict(steps[0][0])  # after both checkpoints in the queue
        for _ in range(200):
            if remote.checkpoints >= 2:
                break
            await asyncio.sleep(0.01)
        assert remote.checkpoints >= 2 and len(remote._log) <= 8 - 6
        await _kill_and_wait_broken(remote)
        later = _steps(99, "quartz")[1][0]
        assert _calls(await remote.predict(later)) == _calls(await local.predict(later))
        assert remote.restarts == 1
    finally:
        await remote.close()


async def test_chained_predictions_come_from_the_worker(pair: tuple[PatternPredictor, OffloadedPredictor]) -> None:
    from forethought.agent.feed import AsyncChainingPredictor

    local, remote = pair
    assert isinstance(remote, AsyncChainingPredictor)
    context, observed = _steps(100, "tides")[0]
    assert _calls(await remote.predict_after_async(context, observed)) == _calls(local.predict_after(context, observed))


async def test_the_worker_runs_at_a_lower_cpu_priority_than_its_parent() -> None:
    """Speculative work never takes CPU from the agent: the predictor's worker process is niced."""
    from forethought.predictors.offload import WORKER_NICENESS

    remote = OffloadedPredictor(_trained())
    await remote.start()
    try:
        pid = remote.worker_pid()
        assert pid is not None
        parent = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, parent + WORKER_NICENESS)
    finally:
        await remote.close()


async def test_killing_a_worker_with_cancelled_calls_queued_raises_nothing_anywhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A caller that gives up cancels its queued call; if the worker then dies, Python 3.11's pool fails
    # every queued call in its own thread and raised there on a cancelled one. kill() lets the pool drop
    # what is queued first.
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    for _ in range(3):
        remote = OffloadedPredictor(_trained())
        await remote.start()
        context = _steps(5, "kelp")[0][0]
        tasks = [asyncio.create_task(remote.predict(context)) for _ in range(24)]
        await asyncio.sleep(0)
        for task in tasks[4:]:
            task.cancel()
        for _ in range(3):
            await asyncio.sleep(0)  # the cancellations reach the pool's futures
        remote.kill()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await remote.close()
        assert all(isinstance(r, PredictorError | asyncio.CancelledError | list) for r in results), results
        assert remote.worker_pid() is None
        with pytest.raises(PredictorError, match="was closed"):
            await remote.predict(context)
    assert raised == []
