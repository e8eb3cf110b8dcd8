"""A predictor in a worker process: the same guesses as in process, in order, nothing lost when the worker
dies, clear errors for what cannot work (what it saves on the caller's loop is measured by the bench:
``forethought bench --offload`` vs ``--in-process``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import OffloadedPredictor, PredictorError
from forethought._calls import ToolCall
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
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
