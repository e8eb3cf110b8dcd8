"""Injected latency: deterministic per call, the same in every arm, and applied before any state is touched."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

import pytest

from forethought import Effect, Runtime, Tool
from forethought.bench.workloads.bfcl import build_session, load_bfcl, state_fingerprint
from forethought.bench.workloads.latency import LatencyModel, call_key_text, with_latency
from forethought.sandbox.objects import ObjectState


def test_delay_is_deterministic_and_depends_on_the_call() -> None:
    model = LatencyModel(mean_s=1.0, jitter=0.3, seed=7)
    assert model.delay("cd", "k") == LatencyModel(mean_s=1.0, jitter=0.3, seed=7).delay("cd", "k")
    assert model.delay("cd", "k") != model.delay("cd", "other")
    assert model.delay("cd", "k") != model.delay("ls", "k")
    assert model.delay("cd", "k", 1) != model.delay("cd", "k", 0)
    assert model.delay("cd", "k") != LatencyModel(mean_s=1.0, jitter=0.3, seed=8).delay("cd", "k")


def test_delays_are_normal_around_the_mean_and_never_negative() -> None:
    model = LatencyModel(mean_s=1.0, jitter=0.3, seed=1)
    draws = [model.delay("t", str(i)) for i in range(4000)]
    assert abs(statistics.fmean(draws) - 1.0) < 0.03
    assert 0.25 < statistics.stdev(draws) < 0.35
    wide = LatencyModel(mean_s=1.0, jitter=2.0, seed=1)
    assert min(wide.delay("t", str(i)) for i in range(500)) == 0.0


def test_per_tool_means_scale_and_zero() -> None:
    model = LatencyModel(mean_s=1.0, jitter=0.0, per_tool={"slow": 3.0, "free": 0.0}, time_scale=0.5)
    assert model.delay("slow", "k") == pytest.approx(1.5)
    assert model.delay("other", "k") == pytest.approx(0.5)
    assert model.delay("free", "k") == 0.0
    assert model.scaled(0.0).delay("slow", "k") == 0.0
    with pytest.raises(ValueError):
        LatencyModel(mean_s=-1.0)
    with pytest.raises(ValueError):
        LatencyModel(per_tool={"x": -1.0})


def test_call_key_text_is_order_independent() -> None:
    assert call_key_text({"a": 1, "b": [2]}) == call_key_text({"b": [2], "a": 1})


async def test_with_latency_wraps_async_and_sync_tools() -> None:
    model = LatencyModel(mean_s=0.02, jitter=0.0)

    async def double(x: int) -> int:
        return 2 * x

    def triple(x: int) -> int:
        return 3 * x

    async_tool = with_latency(Tool(name="double", fn=double, effect=Effect.PURE), model)
    sync_tool = with_latency(Tool(name="triple", fn=triple, effect=Effect.PURE), model)
    assert not async_tool.threaded and not sync_tool.threaded
    start = time.monotonic()
    assert await async_tool.fn(x=2) == 4
    assert await sync_tool.fn(x=2) == 6
    assert time.monotonic() - start >= 0.03


def test_with_latency_keeps_threaded_tools_in_their_thread() -> None:
    seen: list[str] = []

    def work(x: int) -> int:
        seen.append(threading.current_thread().name)
        return x

    t = with_latency(Tool(name="work", fn=work, effect=Effect.PURE, threaded=True),
                     LatencyModel(mean_s=0.01, jitter=0.0))
    assert t.threaded and t.fn(x=5) == 5 and seen


class Gate:
    """A latency wait that holds each tool until released, recording the delay asked for (no clock involved)."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.waiting.set()
        await self.release.wait()


async def test_with_latency_passes_state_through_and_waits_before_touching_it() -> None:
    cell = ObjectState({"n": 0})

    def bump(target: Any) -> int:
        target["n"] += 1
        return int(target["n"])

    gate = Gate()
    t = with_latency(Tool(name="bump", fn=bump, effect=Effect.ISOLATED_WRITE, state=cell),
                     LatencyModel(mean_s=0.05, jitter=0.0), sleep=gate)
    task = asyncio.ensure_future(t.fn(cell.live))
    await gate.waiting.wait()
    assert cell.live == {"n": 0} and gate.asked == [0.05]  # held at its wait, the state untouched
    gate.release.set()
    assert await task == 1 and cell.live == {"n": 1}


async def test_same_latency_in_serial_and_speculative_arms() -> None:
    """A speculation's delay is the one the authoritative call would have had: arms wait alike."""
    entry = load_bfcl()[0]
    model = LatencyModel(mean_s=0.02, jitter=0.5, seed=3)
    call = entry.calls[0]
    speculative_gate, serial_gate = Gate(), Gate()
    tools, state = build_session(entry, model, sleep=speculative_gate)
    key_args = next(t for t in tools if t.name == call.name).arguments.canonical_arguments(call)
    expected = model.delay(call.name, call_key_text(key_args))
    runtime = Runtime()
    session = runtime.session(tools=tools)
    session.speculate(call)
    await speculative_gate.waiting.wait()
    assert speculative_gate.asked == [expected]  # the speculation waits the call's own delay
    speculative_gate.release.set()
    await session.wait_speculations()
    outcome = await session.execute_detailed(call)
    assert outcome.kind == "hit" and speculative_gate.asked == [expected]  # served: no second wait
    serial_tools, serial_state = build_session(entry, model, sleep=serial_gate)
    serial = runtime.session(tools=serial_tools)
    serial_gate.release.set()
    assert await serial.execute(call) == outcome.value
    assert serial_gate.asked == [expected]  # the serial arm waited exactly as long
    assert state_fingerprint(state) == state_fingerprint(serial_state)
    await session.close()
    await serial.close()
    runtime.close()


@pytest.mark.parametrize(("lazy", "kind"), [(True, "hit"), (False, "miss")])
async def test_lazy_snapshot_lets_a_parallel_call_commit_after_the_earlier_one(lazy: bool, kind: str) -> None:
    """Two calls of one turn: the second, speculated while the first runs, commits only if its snapshot
    is taken after the first finished (lazy); an eager snapshot predates the first call's write. Each tool is
    held at its latency wait until released, so the order is the test's, not the machine's speed."""
    entry = next(e for e in load_bfcl() if e.id == "multi_turn_base_0")
    first, second = entry.ground_truth[0][0], entry.ground_truth[0][1]  # cd(document), mkdir(temp)
    model = LatencyModel(mean_s=0.0, per_tool={"cd": 0.01, "mkdir": 0.08}, jitter=0.0)
    gates = {0.01: Gate(), 0.08: Gate()}  # by the delay asked for: cd's, mkdir's

    async def sleep(seconds: float) -> None:
        await gates[seconds](seconds)

    tools, state = build_session(entry, model, lazy=lazy, sleep=sleep)
    runtime = Runtime()
    session = runtime.session(tools=tools)
    authoritative = asyncio.ensure_future(session.execute_detailed(first))
    await gates[0.01].waiting.wait()  # cd is running, held before its write
    session.speculate(second)
    await gates[0.08].waiting.wait()  # mkdir's guess is running too, held before it touches state
    gates[0.01].release.set()
    one = await authoritative  # cd has written
    gates[0.08].release.set()
    two = await session.execute_detailed(second)
    assert one.kind == "miss" and two.kind == kind
    serial_tools, serial_state = build_session(entry)
    serial = runtime.session(tools=serial_tools)
    await serial.execute(first)
    assert await serial.execute(second) == two.value
    assert state_fingerprint(state) == state_fingerprint(serial_state)
    await session.close()
    await serial.close()
    runtime.close()
