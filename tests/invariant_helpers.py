"""Shared by the invariant tests (tests/test_invariants_*.py): a tool that counts its runs, and the runtime's events.

A counting tool logs every execution in an :class:`~conftest.ExecLog`, which knows (via ``conftest.PHASE``)
whether it ran speculatively; ``events_of`` records every telemetry event of a runtime.
"""

from __future__ import annotations

from typing import Any

from conftest import ExecLog
from forethought import BreakerPolicy, Effect, Runtime, Tool, tool
from forethought.telemetry import Event, EventKind

OPEN_BREAKER = BreakerPolicy(max_waste_rate=1.0, max_error_rate=1.0)


def counting_tool(log: ExecLog, name: str, effect: Effect | None = None, **kwargs: Any) -> Tool:
    async def fn(x: int = 0) -> str:
        log.add(name, {"x": x})
        return f"{name}:{x}"

    fn.__name__ = name
    if effect is None:
        return tool(fn, **kwargs)  # effect left undeclared
    return tool(fn, effect=effect, **kwargs)


def events_of(runtime: Runtime) -> list[Event]:
    seen: list[Event] = []
    runtime.telemetry.subscribe(seen.append)
    return seen


def kinds(events: list[Event], tool_name: str | None = None) -> list[EventKind]:
    return [e.kind for e in events if tool_name is None or e.tool == tool_name]
