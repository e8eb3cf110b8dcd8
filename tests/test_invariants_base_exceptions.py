"""Invariant 5 of docs/design.md ("a speculation that raises ... never surfaces; the authoritative call then
runs normally") for what a tool, a validator or a hint's hook raises outside the ``Exception`` family:
``SystemExit`` (an argparse-based tool given bad flags), ``KeyboardInterrupt``, ``GeneratorExit`` and a
library's own ``BaseException`` (``gevent.Timeout``, ``trio.Cancelled`` are built so).

Each case is counted: the event loop survives, the speculation is counted as failed (never as a hit), and the
model's own call runs the tool for real and gets what a plain call gives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from forethought import Effect, Runtime, ToolCall, tool
from forethought.telemetry import EventKind


class TransportTimeout(BaseException):
    """A library's timeout built on BaseException (as ``gevent.Timeout`` is)."""


RAISED: list[type[BaseException]] = [SystemExit, KeyboardInterrupt, GeneratorExit, TransportTimeout]


def _raise(kind: type[BaseException]) -> None:
    raise kind(2) if kind is SystemExit else kind("from a speculation")


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("kind", RAISED)
async def test_a_speculation_raising_a_base_exception_fails_quietly_and_the_call_runs(
        kind: type[BaseException], threaded: bool) -> None:
    up = {"ok": False}
    runs: list[str] = []

    @tool(effect=Effect.READ_ONLY, threaded=threaded)
    def fetch(url: str) -> str:
        runs.append("authoritative" if up["ok"] else "speculative")
        if not up["ok"]:
            _raise(kind)
        return f"body of {url}"

    runtime = Runtime([fetch])
    session = runtime.session()
    assert session.speculate(ToolCall("fetch", {"url": "u"}), source="p", confidence=0.9).status == "launched"
    await session.wait_speculations(timeout=5)
    up["ok"] = True
    outcome = await session.execute_detailed(ToolCall("fetch", {"url": "u"}))
    assert (outcome.value, outcome.kind) == ("body of u", "miss")
    assert runs == ["speculative", "authoritative"]
    stats = session.stats()
    assert (stats.hits, stats.failed, stats.misses) == (0, 1, 1)
    await session.close()
    runtime.close()


@pytest.mark.parametrize("kind", RAISED)
async def test_a_wrong_guess_raising_a_base_exception_leaves_the_loop_and_other_calls_alone(
        kind: type[BaseException]) -> None:
    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def cli(flags: str) -> str:
        if flags.startswith("--bogus"):
            _raise(kind)
        return f"ran {flags}"

    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def other() -> str:
        return "other"

    runtime = Runtime([cli, other])
    session = runtime.session()
    for i in range(5):
        session.speculate(ToolCall("cli", {"flags": f"--bogus{i}"}), source="p", confidence=0.9)
    await session.wait_speculations(timeout=5)
    await asyncio.sleep(0)  # the tasks' ends have been seen by the loop: none of them escaped it
    assert await session.execute(ToolCall("other", {})) == "other"
    assert await session.execute(ToolCall("cli", {"flags": "--n 3"})) == "ran --n 3"
    session.end_turn()
    assert (session.stats().failed, session.stats().hits) == (5, 0)
    await session.close()
    runtime.close()


@pytest.mark.parametrize("when", ["start", "claim"])
@pytest.mark.parametrize("kind", RAISED)
async def test_a_validator_raising_a_base_exception_counts_as_changed(kind: type[BaseException], when: str) -> None:
    phase = {"claiming": False}
    runs: list[int] = []

    def etag(call: ToolCall) -> str:
        if phase["claiming"] == (when == "claim"):
            _raise(kind)
        return "v1"

    @tool(effect=Effect.READ_ONLY, threaded=False, validator=etag)
    async def page(n: int) -> str:
        runs.append(n)
        return f"page {n}"

    runtime = Runtime([page])
    session = runtime.session()
    session.speculate(ToolCall("page", {"n": 1}), source="p", confidence=0.9)
    await session.wait_speculations(timeout=5)
    phase["claiming"] = True
    outcome = await session.execute_detailed(ToolCall("page", {"n": 1}))
    assert (outcome.value, outcome.kind) == ("page 1", "miss")
    assert runs == ([1, 1] if when == "claim" else [1])  # a validator failing at start: the tool never ran early
    await session.close()
    runtime.close()


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("kind", RAISED)
async def test_a_prepare_hook_raising_a_base_exception_is_counted_never_raised(
        kind: type[BaseException], threaded: bool) -> None:
    seen: list[Any] = []

    if threaded:
        def hook(known: Any) -> None:
            seen.append(dict(known))
            _raise(kind)
    else:
        async def hook(known: Any) -> None:  # type: ignore[misc]
            seen.append(dict(known))
            _raise(kind)

    @tool(effect=Effect.READ_ONLY, threaded=False, prepare=hook)
    async def query(sql: str, db: str) -> str:
        return f"{db}: {sql}"

    runtime = Runtime([query])
    session = runtime.session()
    events: list[Any] = []
    runtime.telemetry.subscribe(events.append)
    assert session.prepare("query", {"db": "main"}, source="p")
    for _ in range(200):
        if any(e.kind is EventKind.PREPARED for e in events):
            break
        await asyncio.sleep(0.005)
    prepared = [e for e in events if e.kind is EventKind.PREPARED]
    assert [e.detail for e in prepared] == [kind.__name__]
    assert seen == [{"db": "main"}]
    assert await session.execute(ToolCall("query", {"sql": "select 1", "db": "main"})) == "main: select 1"
    await session.close()
    runtime.close()
