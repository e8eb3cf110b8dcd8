"""Random interleavings of speculations and authoritative calls never make live state diverge from serial.

Hypothesis state machines drive a real :class:`~forethought._core.runtime.Session` over both sandbox kinds: an
:class:`ObjectState` holding a dict (eager and lazy snapshots, async tools that yield before touching state)
and a :class:`FileWorkspace` (write / append / delete / read file tools). Speculations are right (the call
about to be executed), wrong (another call) and overlapping (several in flight, claimed queued, running or
done). After every step the live state equals a serial model's, and every authoritative output equals the
model's output.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from forethought import Effect, Runtime, Session, Tool, ToolCall
from forethought._core.policy import BreakerPolicy, Policy
from forethought.sandbox.files import FileWorkspace
from forethought.sandbox.objects import ObjectState, resolve_target

POLICY = Policy(max_calls_per_turn=10_000, max_cost_per_turn=1e9, claim_wait_floor_s=5.0,
                breaker=BreakerPolicy(max_waste_rate=1.0, max_error_rate=1.0))
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow], report_multiple_bugs=False)

SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
"""Workspaces live in memory where the machine has a tmpfs: the commit rules are the same, the thousands of
copies and removals per run are not disk-bound."""

KEYS = st.sampled_from(["a", "b"])
VALUES = st.integers(0, 2)


# --- object state ----------------------------------------------------------------------------------


def dict_tools(cell: ObjectState) -> list[Tool]:
    async def put(target: Any, key: str, value: int) -> int | None:
        await asyncio.sleep(0)
        d = resolve_target(target)
        old: int | None = d.get(key)
        d[key] = value
        return old

    async def incr(target: Any, key: str) -> int:
        await asyncio.sleep(0)
        d = resolve_target(target)
        d[key] = d.get(key, 0) + 1
        return int(d[key])

    def get(target: Any, key: str) -> int | None:
        value: int | None = resolve_target(target).get(key)
        return value

    def pop(target: Any, key: str) -> int | None:
        value: int | None = resolve_target(target).pop(key, None)
        return value

    schema = {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
              "required": ["key"]}
    return [Tool(name=f.__name__, fn=f, parameters=schema, effect=Effect.ISOLATED_WRITE, state=cell)
            for f in (put, incr, get, pop)]


def apply_dict(model: dict[str, int], call: ToolCall) -> Any:
    key = call.arguments["key"]
    if call.name == "put":
        old = model.get(key)
        model[key] = call.arguments["value"]
        return old
    if call.name == "incr":
        model[key] = model.get(key, 0) + 1
        return model[key]
    if call.name == "get":
        return model.get(key)
    return model.pop(key, None)


DICT_CALLS = st.one_of(
    st.builds(lambda k, v: ToolCall("put", {"key": k, "value": v}), KEYS, VALUES),
    st.builds(lambda n, k: ToolCall(n, {"key": k}), st.sampled_from(["incr", "get", "pop"]), KEYS),
)


# --- file workspace ---------------------------------------------------------------------------------


def file_tools(cell: FileWorkspace, threaded: bool = False) -> list[Tool]:
    def write(root: Path, path: str, text: str) -> int:
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        return p.write_text(text)

    def append(root: Path, path: str, text: str) -> int:
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(text)
        return p.stat().st_size

    def delete(root: Path, path: str) -> bool:
        p = root / path
        existed = p.exists()
        p.unlink(missing_ok=True)
        return existed

    def read(root: Path, path: str) -> str | None:
        p = root / path
        return p.read_text() if p.exists() else None

    schema = {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
              "required": ["path"]}
    return [Tool(name=f.__name__, fn=f, parameters=schema, effect=Effect.ISOLATED_WRITE,
                 state=cell, threaded=threaded) for f in (write, append, delete, read)]


def apply_files(model: dict[str, str], call: ToolCall) -> Any:
    path = call.arguments["path"]
    if call.name == "write":
        model[path] = call.arguments["text"]
        return len(call.arguments["text"])
    if call.name == "append":
        model[path] = model.get(path, "") + call.arguments["text"]
        return len(model[path].encode())
    if call.name == "delete":
        return model.pop(path, None) is not None
    return model.get(path)


PATHS = st.sampled_from(["a.txt", "d/b.txt"])
TEXTS = st.sampled_from(["x", "yz", ""])
FILE_CALLS = st.one_of(
    st.builds(lambda n, p, t: ToolCall(n, {"path": p, "text": t}), st.sampled_from(["write", "append"]), PATHS,
              TEXTS),
    st.builds(lambda n, p: ToolCall(n, {"path": p}), st.sampled_from(["delete", "read"]), PATHS),
)


def live_files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


# --- the machine -------------------------------------------------------------------------------------


class SpeculationMachine(RuleBasedStateMachine):
    """Shared rules; subclasses supply the tools, the model and how to read live state."""

    calls: st.SearchStrategy[ToolCall]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.model: dict[str, Any] = {}
        self.runtime = Runtime(policy=POLICY)
        self.session: Session = self.run(self._open())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> Session:
        return self.runtime.session(tools=self.tools())

    def tools(self) -> list[Tool]:
        raise AssertionError("subclasses provide tools")

    def apply(self, call: ToolCall) -> Any:
        raise AssertionError("subclasses provide the model")

    def live(self) -> dict[str, Any]:
        raise AssertionError("subclasses read live state")

    async def _speculate(self, calls: list[ToolCall]) -> None:
        for call in calls:
            self.session.speculate(call, source="hypothesis")

    async def _execute(self, call: ToolCall, spin: int) -> Any:
        for _ in range(spin):
            await asyncio.sleep(0)
        return await self.session.execute(call)

    def check_execute(self, call: ToolCall, spin: int) -> None:
        value = self.run(self._execute(call, spin))
        assert value == self.apply(call), call

    def teardown(self) -> None:
        self.run(self.session.close())
        self.runtime.close(wait=True)  # a dropped speculation's worker thread may still be running its tool
        self.loop.close()

    @invariant()
    def live_equals_serial_model(self) -> None:
        assert self.live() == self.model


class RulesMixin:
    """The rules both machines share, parameterised by their call strategy."""

    @staticmethod
    def make(calls: st.SearchStrategy[ToolCall]) -> dict[str, Any]:
        @rule(call=calls, spin=st.integers(0, 3))
        def execute(self: SpeculationMachine, call: ToolCall, spin: int) -> None:
            self.check_execute(call, spin)

        @rule(call=calls, others=st.lists(calls, max_size=2), spin=st.integers(0, 3))
        def speculate_right_then_execute(self: SpeculationMachine, call: ToolCall, others: list[ToolCall],
                                         spin: int) -> None:
            self.run(self._speculate([call, *others]))
            self.check_execute(call, spin)

        @rule(guesses=st.lists(calls, min_size=1, max_size=3))
        def speculate(self: SpeculationMachine, guesses: list[ToolCall]) -> None:
            self.run(self._speculate(guesses))

        @rule(spin=st.integers(1, 4))
        def let_speculations_run(self: SpeculationMachine, spin: int) -> None:
            async def spin_loop() -> None:
                for _ in range(spin):
                    await asyncio.sleep(0)

            self.run(spin_loop())

        @precondition(lambda self: self.session.speculation_count() > 0)
        @rule()
        def end_turn(self: SpeculationMachine) -> None:
            self.session.end_turn()

        return {"execute": execute, "speculate_right_then_execute": speculate_right_then_execute,
                "speculate": speculate, "let_speculations_run": let_speculations_run, "end_turn": end_turn}


class DictMachine(SpeculationMachine):
    lazy = False

    def tools(self) -> list[Tool]:
        self.cell = ObjectState({}, lazy=self.lazy)
        return dict_tools(self.cell)

    def apply(self, call: ToolCall) -> Any:
        return apply_dict(self.model, call)

    def live(self) -> dict[str, Any]:
        return dict(self.cell.live)

    locals().update(RulesMixin.make(DICT_CALLS))


class LazyDictMachine(DictMachine):
    lazy = True


class FileMachine(SpeculationMachine):
    threaded = False

    def tools(self) -> list[Tool]:
        self.tmp = tempfile.TemporaryDirectory(prefix="forethought-test-", dir=SCRATCH, ignore_cleanup_errors=True)
        root = Path(self.tmp.name) / "live"
        root.mkdir()
        self.spare = Path(self.tmp.name) / "snapshots"
        self.spare.mkdir()
        self.cell = FileWorkspace(root, temp_dir=self.spare)
        return file_tools(self.cell, self.threaded)

    def apply(self, call: ToolCall) -> Any:
        return apply_files(self.model, call)

    def live(self) -> dict[str, Any]:
        return live_files(self.cell.root)

    def teardown(self) -> None:
        super().teardown()  # closes the runtime and waits for its tool threads: none is still writing
        self.cell.sweep()
        leftover = self.cell.copies()
        self.cell.close()
        leftover += list(self.spare.iterdir())
        self.tmp.cleanup()
        assert leftover == [], f"snapshot directories left behind: {leftover}"

    locals().update(RulesMixin.make(FILE_CALLS))


class ThreadedFileMachine(FileMachine):
    """File tools on worker threads: snapshots are copied while authoritative writes may be running."""

    threaded = True


TestDictMachine = DictMachine.TestCase
TestDictMachine.settings = SETTINGS
TestLazyDictMachine = LazyDictMachine.TestCase
TestLazyDictMachine.settings = SETTINGS
TestFileMachine = FileMachine.TestCase
TestFileMachine.settings = SETTINGS
TestThreadedFileMachine = ThreadedFileMachine.TestCase
TestThreadedFileMachine.settings = SETTINGS
