"""`Relay.settled`: it returns once every guess owed to the answers already sent is made, including work
spawned while it waits, and a caller that gives up waiting never cancels that work."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.mcp.relay import Relay


def _relay() -> Relay:
    unused: Any = None  # settled() touches none of the streams, the link or the speculator
    return Relay(unused, unused, unused, unused, unused)


async def test_settled_returns_at_once_with_nothing_owed() -> None:
    await asyncio.wait_for(_relay().settled(), 1)


async def test_settled_waits_for_work_spawned_while_it_waits() -> None:
    relay, first, second = _relay(), asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def later() -> None:
        await second.wait()
        done.append("second")

    async def job() -> None:
        await first.wait()
        relay._spawn(later())  # more work owed, spawned before the first ends
        done.append("first")

    relay._spawn(job())
    waiting = asyncio.create_task(relay.settled())
    first.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert done == ["first"] and not waiting.done()
    second.set()
    await asyncio.wait_for(waiting, 1)
    assert done == ["first", "second"]


async def test_giving_up_on_settled_leaves_the_work_running() -> None:
    relay, go = _relay(), asyncio.Event()
    done: list[bool] = []

    async def job() -> None:
        await go.wait()
        done.append(True)

    relay._spawn(job())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(relay.settled(), 0.01)
    go.set()
    await asyncio.wait_for(relay.settled(), 1)
    assert done == [True]


async def test_a_failing_job_still_settles() -> None:
    relay = _relay()

    async def job() -> None:
        raise RuntimeError("a guess failed")

    relay._spawn(job())
    await asyncio.wait_for(relay.settled(), 1)
