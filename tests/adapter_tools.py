"""The two tools every framework-adapter test gives its framework: a slow read and a write that logs."""

from __future__ import annotations

import asyncio
from typing import Any

from forethought import Effect, Runtime, Session, tool


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
