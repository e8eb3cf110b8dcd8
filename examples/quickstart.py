"""Quickstart: speculate two tool calls early, then let the authoritative calls claim them.

One READ_ONLY tool (a slow search) and one ISOLATED_WRITE tool (adding a note to an in-memory notebook
held by an ``ObjectState``). The "predictor" here is us: we guess both calls while pretending the model is
still generating. The write runs on a snapshot; the notebook changes only when the authoritative call with
the same canonical key claims it. A third guess is wrong: it is never seen, and the real call just runs.

Run: ``.venv/bin/python examples/quickstart.py`` (about one second, no network).
"""

from __future__ import annotations

import asyncio
import time

from forethought import Effect, ObjectState, Runtime, ToolCall, tool

TOOL_S = 0.3
"""How long each tool takes: a slow backend."""

notebook = ObjectState({"notes": []})


@tool(effect=Effect.READ_ONLY)
async def search(query: str, limit: int = 3) -> list[str]:
    """Search the documentation."""
    await asyncio.sleep(TOOL_S)
    return [f"{query} result {i}" for i in range(limit)]


@tool(effect=Effect.ISOLATED_WRITE, state=notebook)
async def add_note(book: dict[str, list[str]], text: str) -> int:
    """Add a note; returns how many notes there are. ``book`` is the live notebook or a snapshot copy."""
    await asyncio.sleep(TOOL_S)
    book["notes"].append(text)
    return len(book["notes"])


async def main() -> None:
    runtime = Runtime([search, add_note])
    session = runtime.session()

    # While the model generates, guess its next calls (a predictor would do this).
    for guess in (ToolCall("search", {"query": "kv cache"}), ToolCall("add_note", {"text": "read about kv cache"}),
                  ToolCall("search", {"query": "something the model never asks"})):
        ticket = session.speculate(guess, source="quickstart", confidence=0.9)
        print(f"speculate {guess.name}({dict(guess.arguments)}): {ticket.status}")
    await asyncio.sleep(TOOL_S + 0.1)  # ... the model is still generating ...
    print(f"before the authoritative calls the notebook holds {notebook.live['notes']}")

    # The model's own calls. Argument order and defaults spelled out or left off do not matter: keys are canonical.
    start = time.perf_counter()
    found = await session.execute_detailed(ToolCall("search", {"limit": 3, "query": "kv cache"}))
    noted = await session.execute_detailed(ToolCall("add_note", {"text": "read about kv cache"}))
    other = await session.execute_detailed(ToolCall("search", {"query": "flash attention"}))
    elapsed = time.perf_counter() - start
    for name, outcome in (("search", found), ("add_note", noted), ("search", other)):
        print(f"execute {name}: {outcome.kind}, waited {outcome.waited_s:.2f}s, saved {outcome.saved_s:.2f}s"
              f" -> {outcome.value}")
    print(f"after: the notebook holds {notebook.live['notes']}")
    print(f"three authoritative calls took {elapsed:.2f}s; serially they take about {3 * TOOL_S:.1f}s")

    session.end_turn()  # the wrong guess is discarded here (it was never seen)
    stats = session.stats()
    print(f"stats: hits={stats.hits} misses={stats.misses} committed={stats.committed} "
          f"wasted={stats.wasted} alpha={stats.alpha:.2f} saved={stats.saved_s:.2f}s")
    assert found.kind == "hit" and noted.kind == "hit" and other.kind == "miss"
    assert notebook.live["notes"] == ["read about kv cache"]
    await session.close()
    runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
