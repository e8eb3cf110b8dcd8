"""ObjectState: deep-copy snapshots, the base-version commit rule, lazy copies, thread safety."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from forethought import Effect, Runtime, Tool, ToolCall
from forethought._core.tools import Snapshot, StateCell
from forethought.errors import SnapshotError
from forethought.sandbox.objects import LazyTarget, ObjectState, resolve_target


def test_implements_the_protocols() -> None:
    cell = ObjectState({})
    assert isinstance(cell, StateCell)
    assert isinstance(cell.snapshot(), Snapshot)


def test_snapshot_is_a_deep_copy_and_commit_makes_it_live() -> None:
    cell = ObjectState({"items": [1]})
    snap = cell.snapshot()
    snap.target["items"].append(2)
    assert cell.live == {"items": [1]}
    assert snap.commit() is True
    assert cell.live == {"items": [1, 2]} and cell.version == 1
    assert snap.commit() is False  # at most one commit


def test_commit_refused_after_an_authoritative_write() -> None:
    cell = ObjectState({"n": 0})
    snap = cell.snapshot()
    snap.target["n"] = 5
    cell.live["n"] = 1
    cell.mark_changed()
    assert snap.commit() is False
    assert cell.live == {"n": 1}


def test_only_the_first_of_two_snapshots_at_one_base_commits() -> None:
    cell = ObjectState([])
    first, second = cell.snapshot(), cell.snapshot()
    first.target.append("first")
    second.target.append("second")
    assert first.commit() is True
    assert second.commit() is False
    assert cell.live == ["first"]


def test_discard_leaves_live_untouched_and_blocks_use() -> None:
    cell = ObjectState({"a": 1})
    snap = cell.snapshot()
    snap.target["a"] = 2
    snap.discard()
    assert cell.live == {"a": 1} and cell.version == 0
    assert snap.commit() is False
    with pytest.raises(SnapshotError):
        snap.materialize()


def test_random_generator_state_travels_with_the_copy() -> None:
    cell = ObjectState({"rng": random.Random(7)})
    expected = random.Random(7)
    expected.random()
    snap = cell.snapshot()
    snap.target["rng"].random()
    assert snap.commit()
    assert cell.live["rng"].random() == expected.random()


def test_lazy_snapshot_takes_its_base_when_first_used() -> None:
    cell = ObjectState({"n": 0}, lazy=True)
    snap = cell.snapshot()
    target = snap.target
    assert isinstance(target, LazyTarget) and not snap.materialized
    cell.live["n"] = 1
    cell.mark_changed()  # an earlier authoritative call finishes before the speculation reads
    copy = resolve_target(target)
    assert copy == {"n": 1} and snap.base_version == 1
    copy["n"] += 10
    assert snap.commit() is True
    assert cell.live == {"n": 11}


def test_untouched_lazy_snapshot_commits_without_change() -> None:
    cell = ObjectState({"n": 0}, lazy=True)
    snap = cell.snapshot()
    cell.mark_changed()
    assert snap.commit() is True
    assert cell.live == {"n": 0} and cell.version == 1
    assert resolve_target(5) == 5


def test_uncopyable_state_raises_a_snapshot_error() -> None:
    cell = ObjectState({"lock": threading.Lock()})
    with pytest.raises(SnapshotError):
        cell.snapshot()


def test_concurrent_commits_from_threads_admit_exactly_one() -> None:
    cell = ObjectState({"n": 0})
    snaps = [cell.snapshot() for _ in range(16)]
    for i, snap in enumerate(snaps):
        snap.target["n"] = i + 1
    barrier = threading.Barrier(len(snaps))
    results: list[bool] = []

    def commit(snap: Any) -> None:
        barrier.wait()
        results.append(snap.commit())

    threads = [threading.Thread(target=commit, args=(s,)) for s in snaps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    assert cell.version == 1 and cell.live["n"] in range(1, 17)


async def test_runtime_commits_a_claimed_speculation_and_reruns_a_stale_one() -> None:
    cell = ObjectState({"log": []})

    def add(target: Any, item: str) -> int:
        log = resolve_target(target)["log"]
        log.append(item)
        return len(log)

    t = Tool(name="add", fn=add, effect=Effect.ISOLATED_WRITE, state=cell,
             parameters={"type": "object", "properties": {"item": {"type": "string"}}})
    runtime = Runtime([t])
    session = runtime.session()
    session.speculate(ToolCall("add", {"item": "x"}))
    session.speculate(ToolCall("add", {"item": "y"}))
    await asyncio.wait([e.task for e in session._store if e.task is not None])  # both ran on snapshots
    outcome = await session.execute_detailed(ToolCall("add", {"item": "x"}))
    assert outcome.kind == "hit" and outcome.value == 1
    outcome = await session.execute_detailed(ToolCall("add", {"item": "y"}))
    assert outcome.kind == "miss" and outcome.value == 2  # its snapshot predates "x": re-run
    assert cell.live == {"log": ["x", "y"]}
    stats = session.stats()
    assert stats.committed == 1 and stats.conflicts == 1
    await session.close()
    runtime.close()
