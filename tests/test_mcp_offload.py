"""The proxy's pattern predictor in a worker process (:mod:`forethought.mcp.patterns`).

Through the proxy, with learning and prediction in a worker, results stay byte-identical to a direct
client and guesses still hit. What the worker learned reaches the store, and it is the same as what the
in-process predictor stores for the same calls. A killed worker fails no call, and a worker that cannot
start stops speculation and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import ToolCall
from forethought.mcp.effects import McpPolicy
from forethought.mcp.patterns import SAVE_SESSION, StoredPatterns, WorkerPatterns
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns import PatternPredictor
from forethought.predictors.patterns.store import SqlitePatternStore
from test_mcp_proxy import _dump, _probe, direct, proxied

TRUST = McpPolicy().trusting()
KEYS = ("a", "b") * 5
SCHEMAS: dict[str, Any] = {"lookup": {"type": "object", "properties": {"key": {"type": "string"}},
                                      "required": ["key"]}}


async def _lookups(session: Any, keys: tuple[str, ...] = KEYS) -> list[str]:
    out = [_dump(await session.list_tools())]
    for key in keys:
        out.append(_dump(await session.call_tool("lookup", {"key": key})))
        await asyncio.sleep(0.05)  # think time: the worker predicts and the guess runs
    return out


def _worker(handle: Any) -> WorkerPatterns:
    predictor = handle.proxy.speculators[-1].guesser.predictor
    assert isinstance(predictor, WorkerPatterns)
    return predictor


async def test_offloaded_results_identical_to_direct_and_guesses_hit(tmp_path: Path) -> None:
    async with direct(_probe(tmp_path / "direct.log")) as session:
        expected = await _lookups(session)
    async with proxied(_probe(tmp_path / "proxy.log"), TRUST, store=tmp_path / "s.sqlite",
                       settle=True) as (session, handle):
        got = [_dump(await session.list_tools())]
        worker = _worker(handle)
        pid = worker.worker.worker_pid()
        assert pid is not None and pid != os.getpid()  # the predictor lives in another process
        got += (await _lookups(session))[1:]
    assert got == expected
    assert handle.stats.hits > 0  # the worker's guesses were served
    assert handle.stats.calls == len(KEYS)


def _context(history: list[ObservedCall], tools: Any = SCHEMAS) -> PredictionContext:
    return PredictionContext(session_id="mcp", messages=(), user_message="", history=tuple(history), tools=tools)


def _stored(path: Path, fingerprint: str) -> dict[str, float]:
    store = SqlitePatternStore(path)
    try:
        return dict(store.load(fingerprint).values)
    finally:
        store.close()


async def test_the_worker_stores_what_the_in_process_predictor_stores(tmp_path: Path) -> None:
    """The same calls, learned in a worker and in process, leave the same counters in the store."""
    calls = [ObservedCall(ToolCall("lookup", {"key": k}), f"value-of-{k}") for k in KEYS]
    offloaded_path, local_path = tmp_path / "worker.sqlite", tmp_path / "local.sqlite"
    worker = WorkerPatterns(offloaded_path, SCHEMAS)
    assert await worker.ready()
    local = PatternPredictor.for_tools(SCHEMAS, store=SqlitePatternStore(local_path))
    history: list[ObservedCall] = []
    for call in calls:
        context = _context(history)
        assert [p.call for p in await worker.predict(context)] == [p.call for p in await local.predict(context)]
        worker.observe(context, call)
        local.observe(context, call)
        history.append(call)
    await worker.close()
    local.close()
    assert worker.fingerprint == local.fingerprint
    saved = _stored(offloaded_path, worker.fingerprint)
    assert saved and saved == _stored(local_path, local.fingerprint)


async def test_the_store_round_trips_between_offloaded_sessions(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    async with proxied(_probe(tmp_path / "log"), TRUST, store=store) as (session, _):
        await _lookups(session)
    fingerprint = _fingerprint(store)
    learned = _stored(store, fingerprint)
    assert learned  # the first session's worker saved what it learned
    async with proxied(_probe(tmp_path / "log2"), TRUST, store=store, settle=True) as (session, second):
        await session.list_tools()
        await session.call_tool("lookup", {"key": "a"})  # returns once the worker's guess of b is out
        await session.call_tool("lookup", {"key": "b"})  # a -> b: known from the first session only
    # b from the first session's patterns; a too, now: sessions of this tool set and client began with it
    assert second.stats.hits == 2
    after = _stored(store, fingerprint)
    assert set(learned) <= set(after) and after != learned  # the second session added to it


def _fingerprint(store: Path) -> str:
    import sqlite3

    with contextlib.closing(sqlite3.connect(store)) as conn:
        rows = conn.execute("SELECT DISTINCT fingerprint FROM mcp_proxy_stats").fetchall()
    assert len(rows) == 1
    return str(rows[0][0])


async def test_a_killed_worker_fails_no_call(tmp_path: Path) -> None:
    keys = KEYS * 2
    async with direct(_probe(tmp_path / "direct.log")) as session:
        expected = await _lookups(session, keys)
    async with proxied(_probe(tmp_path / "proxy.log"), TRUST, store=tmp_path / "s.sqlite") as (session, handle):
        got = [_dump(await session.list_tools())]
        worker = _worker(handle)
        speculator = handle.proxy.speculators[-1]
        for i, key in enumerate(keys):
            if i in (2, len(KEYS)):  # twice: each death replaces the worker once
                pid = worker.worker.worker_pid()
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
            if i == len(KEYS) + 2:
                await worker.worker.start()  # the replacement has loaded: speculation goes on
                hits = speculator.stats().hits
            got.append(_dump(await session.call_tool("lookup", {"key": key})))
            await asyncio.sleep(0.05)
        restarts = worker.worker.restarts
    assert got == expected  # every call answered as directly, the deaths notwithstanding
    assert restarts == 2
    assert handle.stats.calls == len(keys)
    assert handle.stats.hits > hits  # the replacement's guesses were served


async def test_a_worker_that_cannot_start_stops_speculation_only(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    worker = WorkerPatterns(blocker / "patterns.sqlite", SCHEMAS)  # the worker cannot open its store
    assert not await worker.ready()
    context = _context([])
    assert list(await worker.predict(context)) == []
    worker.observe(context, ObservedCall(ToolCall("lookup", {"key": "a"}), "value-of-a"))  # never raises
    await worker.close()


async def test_a_short_session_still_saves_and_a_late_worker_is_stopped(tmp_path: Path) -> None:
    call = ObservedCall(ToolCall("lookup", {"key": "a"}), "value-of-a")
    quick = WorkerPatterns(tmp_path / "quick.sqlite", SCHEMAS)
    quick.observe(_context([]), call)
    await quick.close(timeout_s=60)  # ends before its worker has started: waits for it, then saves
    assert _stored(tmp_path / "quick.sqlite", quick.fingerprint)
    late = WorkerPatterns(tmp_path / "late.sqlite", SCHEMAS)
    late.observe(_context([]), call)
    await late.close(timeout_s=0.0)  # no time to start: stopped at once, nothing saved, nothing raised
    assert late.worker.worker_pid() is None
    assert not _stored(tmp_path / "late.sqlite", late.fingerprint)


def test_pickling_saves_and_a_save_session_saves(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    patterns = StoredPatterns(str(path), SCHEMAS)
    patterns.open()
    fingerprint = patterns.fingerprint
    call = ObservedCall(ToolCall("lookup", {"key": "a"}), "value-of-a")
    patterns.observe(_context([], tools={}), call)  # the worker gets contexts without tools: it holds them
    assert not _stored(path, fingerprint)  # nothing is saved by learning alone
    restored = pickle.loads(pickle.dumps(patterns))  # a checkpoint
    first = _stored(path, fingerprint)
    assert first  # pickling saved first
    assert dict(restored.open().counts.state().values) == first  # the copy loads what was saved
    patterns.observe(_context([call], tools={}), ObservedCall(ToolCall("lookup", {"key": "b"}), "value-of-b"))
    assert asyncio.run(patterns.predict(PredictionContext(session_id=SAVE_SESSION, messages=(), user_message="")
                                        )) == []
    assert _stored(path, fingerprint) != first


async def test_in_process_keeps_the_predictor_on_the_loop(tmp_path: Path) -> None:
    async with direct(_probe(tmp_path / "direct.log")) as session:
        expected = await _lookups(session)
    async with proxied(_probe(tmp_path / "proxy.log"), TRUST, store=tmp_path / "s.sqlite",
                       in_process=True) as (session, handle):
        got = [_dump(await session.list_tools())]
        assert isinstance(handle.proxy.speculators[-1].guesser.predictor, PatternPredictor)
        got += (await _lookups(session))[1:]
    assert got == expected and handle.stats.hits > 0
