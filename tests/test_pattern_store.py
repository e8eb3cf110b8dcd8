"""Decayed counters and the pattern stores: round trips, concurrent writers, rebasing."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns.counts import PLAIN_PREFIX, Counts, CountsState, wilson_lower
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train
from forethought.predictors.patterns.store import (
    MemoryPatternStore,
    PatternStore,
    SqlitePatternStore,
    tool_set_fingerprint,
)

TOOLS = {"open": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
         "read": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
         "close": {"type": "object", "properties": {}}}


def _session(n: int) -> RecordedSession:
    path = f"/tmp/file_{n}.txt"
    calls = (ObservedCall(ToolCall("open", {"path": path}), f'{{"handle": {n}}}'),
             ObservedCall(ToolCall("read", {"path": path}), "data"),
             ObservedCall(ToolCall("close"), "ok"))
    return RecordedSession(f"s{n}", (RecordedTurn(f"Show me '{path}'", calls),), TOOLS)


def _exact_counts(values: dict[str, float]) -> dict[str, float]:
    """Counters that do not depend on what else a process had learned (sequence counts)."""
    return {k: v for k, v in values.items() if k == "N" or k.split("\x1f")[0] in ("n", "t", "T", "tt")}


# --- counters ---------------------------------------------------------------------------------------


def test_counts_decay_by_half_life() -> None:
    counts = Counts(half_life=10)
    counts.add("x", 8)
    counts.tick(10)
    assert counts.get("x") == pytest.approx(4)
    counts.add(PLAIN_PREFIX + "w", 2)
    counts.tick(100)
    assert counts.get(PLAIN_PREFIX + "w") == 2
    assert counts.get("missing") == 0


def test_counts_rebase_keeps_values() -> None:
    counts = Counts(half_life=1)
    counts.add("x", 1)
    counts.tick(10)
    before = counts.get("x")
    counts.tick(60)
    counts.add("y", 1)
    counts.tick(5)  # passes the rebase threshold: numbers are rescaled, values stay
    assert counts.epoch > 0
    assert counts.get("x") == pytest.approx(before * 2.0 ** -65)
    assert counts.get("y") == pytest.approx(2.0 ** -5)


def test_pending_additions_are_taken_once_and_can_be_restored() -> None:
    counts = Counts()
    counts.add("a", 2)
    counts.tick()
    pending, ticks = counts.take_pending()
    assert (pending, ticks) == ({"a": 2.0}, 1.0)
    assert counts.take_pending() == ({}, 0.0)
    counts.restore_pending(pending, ticks)
    assert counts.take_pending() == ({"a": 2.0}, 1.0)


@given(st.integers(0, 50), st.integers(0, 50))
def test_wilson_lower_bound_is_a_conservative_rate(successes: int, extra: int) -> None:
    trials = successes + extra
    low = wilson_lower(successes, trials)
    assert 0.0 <= low <= (successes / trials if trials else 0.0) + 1e-12
    assert wilson_lower(successes + 1, trials + 1) >= low - 1e-12


# --- stores ----------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> PatternStore:
    if request.param == "memory":
        return MemoryPatternStore()
    return SqlitePatternStore(tmp_path / "patterns.db")


def test_store_merges_add_up_per_fingerprint(store: PatternStore) -> None:
    store.merge("fp", {"a": 1.0, PLAIN_PREFIX + "w": 0.5}, ticks=3, epoch=0.0, half_life=None)
    store.merge("fp", {"a": 2.0}, ticks=1, epoch=0.0, half_life=None)
    store.merge("other", {"a": 7.0}, ticks=1, epoch=0.0, half_life=None)
    state = store.load("fp")
    assert state.clock == 4
    assert state.values == {"a": 3.0, PLAIN_PREFIX + "w": 0.5}
    assert store.load("nothing") == CountsState(0.0, 0.0, {})
    store.close()


def test_store_converts_deltas_between_epochs(store: PatternStore) -> None:
    store.merge("fp", {"a": 1.0}, ticks=0, epoch=0.0, half_life=2.0)
    store.merge("fp", {"a": 4.0, PLAIN_PREFIX + "w": 1.0}, ticks=0, epoch=4.0, half_life=2.0)
    state = store.load("fp")
    assert state.epoch == 0.0
    assert state.values["a"] == pytest.approx(1.0 + 4.0 * 2.0 ** 2)
    assert state.values[PLAIN_PREFIX + "w"] == 1.0
    store.close()


def test_store_rebases_when_numbers_grow(store: PatternStore) -> None:
    store.merge("fp", {"a": 1.0, PLAIN_PREFIX + "w": 1.0}, ticks=200, epoch=0.0, half_life=1.0)
    state = store.load("fp")
    assert state.epoch == 200
    assert state.values["a"] == pytest.approx(2.0 ** -200)
    assert state.values[PLAIN_PREFIX + "w"] == 1.0
    store.close()


def test_sqlite_store_uses_wal(tmp_path: Path) -> None:
    store = SqlitePatternStore(tmp_path / "p.db")
    store.close()
    with sqlite3.connect(tmp_path / "p.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fingerprint_ignores_order_but_not_schemas() -> None:
    a = tool_set_fingerprint({"x": {"type": "object"}, "y": {}})
    assert a == tool_set_fingerprint({"y": {}, "x": {"type": "object"}})
    assert a != tool_set_fingerprint({"y": {}, "x": {"type": "object", "properties": {"q": {}}}})


# --- predictor persistence ---------------------------------------------------------------------------


def test_predictor_round_trip_through_sqlite(tmp_path: Path) -> None:
    config = PatternConfig(flush_every=4)
    first = PatternPredictor(SqlitePatternStore(tmp_path / "p.db"), "fp", config)
    train(first, [_session(n) for n in range(6)])
    probe = [c for c, _, _ in contexts(_session(99))]
    expected = [first.predict_now(c) for c in probe]
    first.close()
    second = PatternPredictor(SqlitePatternStore(tmp_path / "p.db"), "fp", config)
    got = [second.predict_now(c) for c in probe]
    assert [[p.call for p in ps] for ps in got] == [[p.call for p in ps] for ps in expected]
    assert [[p.confidence for p in ps] for ps in got] == [pytest.approx([p.confidence for p in ps])
                                                          for ps in expected]
    assert got[1][0].call == ToolCall("read", {"path": "/tmp/file_99.txt"})
    second.close()


def test_failed_saves_keep_learning_in_memory() -> None:
    class Flaky(MemoryPatternStore):
        fail = True

        def merge(self, fingerprint: str, deltas: dict[str, float], ticks: float, epoch: float,  # type: ignore[override]
                  half_life: float | None) -> None:
            if self.fail:
                raise sqlite3.OperationalError("database is locked")
            super().merge(fingerprint, deltas, ticks, epoch, half_life)

    store = Flaky()
    predictor = PatternPredictor(store, "fp", PatternConfig(flush_every=1))
    train(predictor, [_session(1)])
    assert store.load("fp").clock == 0
    store.fail = False
    predictor.flush()
    assert store.load("fp").clock == 3
    assert store.load("fp").values == predictor.counts.state().values


def _learn_in_process(path: str, first: int, count: int, start: multiprocessing.synchronize.Event) -> None:
    start.wait(30)
    predictor = PatternPredictor(SqlitePatternStore(path, busy_timeout_s=60), "shared",
                                 PatternConfig(half_life=None, flush_every=2))
    train(predictor, [_session(n) for n in range(first, first + count)])
    predictor.close()


def test_two_processes_learn_into_one_sqlite_store(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    SqlitePatternStore(path).close()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    workers = [ctx.Process(target=_learn_in_process, args=(path, first, 15, start)) for first in (0, 100)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    merged = SqlitePatternStore(path).load("shared")
    alone = PatternPredictor(config=PatternConfig(half_life=None))
    train(alone, [_session(n) for n in (*range(15), *range(100, 115))])
    assert merged.clock == 90
    assert _exact_counts(dict(merged.values)) == _exact_counts(dict(alone.counts.state().values))


LONE_SURROGATE = "smile \ud83d"  # what json.loads gives for a model's "smile \\ud83d": no UTF-8 encodes it


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_value_no_utf8_encodes_is_never_stored_and_blocks_no_save(kind: str, tmp_path: Path) -> None:
    """A learnt value holding a lone surrogate stays in memory only: every save (the periodic one inside
    ``observe`` too) stores everything else, and nothing raises."""
    tools = {"search": {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}}}
    store: PatternStore = SqlitePatternStore(tmp_path / "p.sqlite") if kind == "sqlite" else MemoryPatternStore()
    predictor = PatternPredictor(store, "fp", PatternConfig(flush_every=4))

    def learn(n: int, value: str) -> None:
        context = PredictionContext(f"s{n}", [{"role": "user", "content": f"search {value}"}], f"search {value}",
                                    (), tools)
        predictor.observe(context, ObservedCall(ToolCall("search", {"q": value}), "ok"))

    learn(0, LONE_SURROGATE)
    for n in range(1, 10):  # passes two periodic saves
        learn(n, f"cats {n}")
    predictor.flush()
    stored = store.load("fp")
    assert stored.clock == 10
    assert any("cats 9" in key for key in stored.values)
    assert not any("\ud83d" in key for key in stored.values)
    assert any("\ud83d" in key for key in predictor.counts.state().values)  # learnt, in memory
    predictor.close()


def test_sqlite_merge_leaves_out_what_it_cannot_hold(tmp_path: Path) -> None:
    store = SqlitePatternStore(tmp_path / "p.sqlite")
    store.merge("fp", {"a": 1.0, "b\ud800": 2.0, "c": float("nan"), "d": float("inf")}, 1.0, 0.0, None)
    store.discard("fp", ["b\ud800", "zz"])
    assert store.load("fp") == CountsState(1.0, 0.0, {"a": 1.0})
    store.close()


@pytest.mark.parametrize(("written", "kind"), [(10, "number"), (10.0, "integer"), (3.0, "number")])
def test_the_learnt_number_spelling_is_saved_and_loaded(written: float, kind: str, tmp_path: Path) -> None:
    """How a parameter's calls spell whole numbers (10 or 10.0: their canonical keys differ) is learnt into
    the store with everything else: a predictor loading it spells guesses as the learner does."""
    tools = {"set": {"type": "object", "required": ["n"], "properties": {"n": {"type": kind}}}}

    def context(sid: str) -> PredictionContext:
        return PredictionContext(sid, [{"role": "user", "content": "raise the limit"}], "raise the limit", (), tools)

    learner = PatternPredictor.for_tools(tools, SqlitePatternStore(tmp_path / "p.sqlite"))
    for i in range(6):
        learner.observe(context(f"s{i}"), ObservedCall(ToolCall("set", {"n": written}), "ok"))
    learner.flush()
    guessed = learner.predict_now(context("new"))[0].call.arguments["n"]
    assert guessed == written and type(guessed) is type(written)
    loaded = PatternPredictor.for_tools(tools, SqlitePatternStore(tmp_path / "p.sqlite"))
    for other in (loaded, learner.copy()):
        again = other.predict_now(context("new"))[0].call.arguments["n"]
        assert again == written and type(again) is type(written)
    loaded.close()
    learner.close()
