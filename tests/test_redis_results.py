"""Shared speculative results on a real redis-server: across processes, under faults, against forgery."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path
from typing import Any

import redis

import redis_fixture
from forethought import Effect, Policy, Runtime, ToolCall, tool
from forethought.stores.events import StoreEvent
from forethought.stores.redis_results import RedisSharedResults
from forethought.stores.shared_tools import SharedPolicy, SharedSpeculation, SharedTool
from redis_fixture import RedisServer, free_port

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
SECRET = b"deployment-secret-for-tests-0123"
QUERIES = [f"topic {i}" for i in range(6)]
WORKERS = 4
TOOL_S = 0.15


def _answer(q: str) -> dict[str, Any]:
    return {"q": q, "pages": [len(q), q[::-1]]}


def _make(url: str, log: Path | None, events: list[StoreEvent] | None = None,
          policy: SharedPolicy | None = None) -> tuple[SharedSpeculation, Any]:
    async def search(q: str) -> dict[str, Any]:
        if log is not None:
            with log.open("a") as f:
                f.write(q + "\n")
        await asyncio.sleep(TOOL_S)
        return _answer(q)

    shared = SharedSpeculation(RedisSharedResults.from_url(url, socket_timeout_s=2.0), SECRET, "acme",
                               policy or SharedPolicy({"search": SharedTool(ttl_s=60, wait_s=5.0)}, op_timeout_s=2.0),
                               on_event=None if events is None else events.append)
    t = tool(search, name="search", effect=Effect.READ_ONLY, threaded=False)
    return shared, Runtime([shared.wrap(t)], Policy()).session()


async def _round(shared: SharedSpeculation, session: Any, queries: list[str]) -> list[Any]:
    calls = [ToolCall("search", {"q": q}) for q in queries]
    for call in calls:
        shared.speculate(session, call)
    await session.wait_speculations(10.0)  # the model is still generating meanwhile
    outputs = [await session.execute(call) for call in calls]
    await shared.close()
    return outputs


def _worker(url: str, log: str, start_at: float, out: Any) -> None:
    shared, session = _make(url, Path(log))
    time.sleep(max(0.0, start_at - time.time()))
    outputs = asyncio.run(_round(shared, session, QUERIES))
    out.put((outputs == [_answer(q) for q in QUERIES], shared.stats.served + shared.stats.waited_served,
             shared.stats.unavailable))


def test_four_worker_processes_run_each_shared_call_once_and_all_equal_serial(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start_at = time.time() + 0.5  # all workers guess the same calls at about the same moment
    procs = [ctx.Process(target=_worker, args=(redis_url, str(log), start_at, out)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(10)
    assert all(equal for equal, _, _ in results)
    assert sum(unavailable for _, _, unavailable in results) == 0, "Redis timed out (machine overloaded?)"
    runs = log.read_text().split("\n")[:-1]
    assert sorted(runs) == sorted(QUERIES)  # single flight across processes: one real run per call
    assert sum(shared for _, shared, _ in results) == len(QUERIES) * (WORKERS - 1)


async def test_redis_keys_never_carry_arguments_and_values_carry_a_mac(redis_url: str) -> None:
    shared, session = _make(redis_url, None)
    assert await _round(shared, session, ["very secret words"]) == [_answer("very secret words")]
    client = redis.Redis.from_url(redis_url)
    keys = client.keys("*")
    assert len(keys) == 1
    assert b"secret" not in keys[0]
    sealed = client.get(keys[0])
    # MAC (32 bytes), sealed expiry (8), when its run began (8), then the value with its keys in the tool's order
    assert isinstance(sealed, bytes) and sealed[48:] == b'{"q":"very secret words","pages":[17,"sdrow terces yrev"]}'
    assert keys[0].startswith(b"ft:res:{") and keys[0].endswith(b"}:v2")
    client.close()


async def test_a_value_forged_in_redis_is_refused(redis_url: str) -> None:
    first, session = _make(redis_url, None)
    await _round(first, session, ["q"])
    client = redis.Redis.from_url(redis_url)
    (key,) = client.keys("*")
    client.set(key, b"\0" * 32 + b'{"q":"q","pages":["forged"]}')
    client.close()
    events: list[StoreEvent] = []
    second, session = _make(redis_url, None, events)
    assert await _round(second, session, ["q"]) == [_answer("q")]
    assert [e.kind for e in events] == ["rejected"]


async def test_redis_restarted_mid_run_changes_no_output(redis_server: RedisServer, redis_url: str) -> None:
    events: list[StoreEvent] = []
    shared, session = _make(redis_url, None, events,
                            SharedPolicy({"search": SharedTool()}, op_timeout_s=0.3, retry_after_s=0.0))
    calls = [ToolCall("search", {"q": q}) for q in QUERIES]
    outputs = []
    for i, call in enumerate(calls):
        if i == 2:
            redis_server.stop()
        if i == 4:
            redis_server.start()
        shared.speculate(session, call)
        await session.wait_speculations(10.0)
        outputs.append(await session.execute(call))
        await shared.drain()
    assert outputs == [_answer(q) for q in QUERIES]
    kinds = [e.kind for e in events]
    assert kinds[0] == "degraded" and "recovered" in kinds
    await shared.close()


async def test_unreachable_redis_changes_no_output_and_says_so() -> None:
    events: list[StoreEvent] = []
    url = f"redis://127.0.0.1:{free_port()}/0"
    shared, session = _make(url, None, events)
    assert await _round(shared, session, QUERIES) == [_answer(q) for q in QUERIES]
    assert [e.kind for e in events] == ["degraded"]
    assert shared.stats.local == len(QUERIES)
    assert shared.stats.unavailable <= len(QUERIES)  # the guesses already in flight each try once
    operations = shared.stats.operations
    session = Runtime([shared.wrap(tool(lambda q: _answer(q), name="search", effect=Effect.READ_ONLY,
                                        threaded=False))]).session()
    for q in QUERIES:
        call = ToolCall("search", {"q": q})
        shared.speculate(session, call)
        await session.wait_speculations(10.0)
        assert await session.execute(call) == _answer(q)
    assert shared.stats.operations == operations  # within the retry period Redis is not tried again


async def test_a_slow_redis_never_delays_authoritative_calls(redis_url: str) -> None:
    events: list[StoreEvent] = []
    shared, session = _make(redis_url, None, events,
                            SharedPolicy({"search": SharedTool()}, op_timeout_s=0.05, retry_after_s=60.0))
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("CLIENT", "PAUSE", "1000", "ALL")
    try:
        started = time.monotonic()
        plain = await shared.execute(session, ToolCall("search", {"q": "auth"}))  # publishes in the background
        authoritative_s = time.monotonic() - started
        outputs = await _round(shared, session, QUERIES[:3])
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    assert plain == _answer("auth") and outputs == [_answer(q) for q in QUERIES[:3]]
    assert authoritative_s < TOOL_S + 0.5  # the tool's own time; not the 1 s pause
    assert [e.kind for e in events] == ["degraded"]
