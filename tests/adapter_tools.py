"""What the framework-adapter tests share: a slow read and a write that logs, a recorder of what the model was
sent, a rendezvous that tells concurrent calls from serial ones, and a tool whose arguments a framework turns
into Python values (an enum member, a pydantic model, a date)."""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
from typing import Any

import pydantic
import pytest

from forethought import Effect, Runtime, Session, tool
from forethought.serve.http import buffered_request


@pytest.fixture(autouse=True)
def patterns_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The adapters predict by default, learning into the user's cache directory: a test's goes to its own
    temporary directory instead (import this fixture into a test module to use it there)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def lookup_and_note_session() -> tuple[Session, list[str]]:
    """A session with ``lookup`` (READ_ONLY, 5 ms) and ``note`` (undeclared: DESTRUCTIVE) and the run log."""
    ran: list[str] = []

    @tool(effect=Effect.READ_ONLY)
    async def lookup(city: str) -> dict[str, Any]:
        """Temperature of a city."""
        ran.append(city)
        await asyncio.sleep(0.005)
        return {"city": city, "temp": 20 + len(city)}

    @tool
    def note(text: str) -> str:
        """Write a note."""
        ran.append(f"note:{text}")
        return "ok"

    return Runtime().session(tools=[lookup, note]), ran


class RecordingApp:
    """An ASGI app that passes every request to ``app`` and keeps the JSON bodies it received: what the
    model was sent, step by step (tool outputs and errors as the framework rendered them)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, replay = await buffered_request(receive)
        if body:
            self.bodies.append(json.loads(body))
        await self.app(scope, replay, send)


class Rendezvous:
    """Calls that wait for each other: ``meet()`` returns once ``expected`` calls are inside it (True), or
    after ``patience_s`` (False: the calls did not run at the same time). Concurrent calls never wait."""

    def __init__(self, expected: int, patience_s: float = 2.0) -> None:
        self.expected = expected
        self.patience_s = patience_s
        self.arrived = 0
        self._all = asyncio.Event()
        self.met: list[bool] = []

    async def meet(self) -> bool:
        self.arrived += 1
        if self.arrived >= self.expected:
            self._all.set()
        try:
            await asyncio.wait_for(self._all.wait(), self.patience_s)
            met = True
        except TimeoutError:
            met = False
        self.met.append(met)
        return met


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: int


def paint(colour: Colour, at: Point, on: datetime.date) -> str:
    """Paint a point on a day (a framework hands it an enum member, a model and a date)."""
    return f"{colour!r} at {at!r} on {on!r}"
