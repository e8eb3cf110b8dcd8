"""The runtime's shared-results seam: any caller's speculations of shared tools reuse other workers' values,
authoritative runs publish theirs, and nothing else changes (equivalence, isolation, privacy)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from forethought import Agent, Effect, FakeClock, FakeLLMClient, Runtime, ToolCall, scripted_message, tool
from forethought._core.shared import MemoryShared
from forethought.llm.fake import FakeRequest
from forethought.predictors.base import Prediction, PredictionContext
from forethought.stores.results import MemorySharedResults
from forethought.stores.shared_tools import SharedPolicy, SharedSpeculation, SharedTool

SECRET = b"k" * 32


def search_tools(runs: list[str]) -> list[Any]:
    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def search(q: str) -> dict[str, Any]:
        runs.append(q)
        return {"q": q, "hits": [q.upper()]}

    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def secret(q: str) -> str:
        runs.append("secret " + q)
        return q

    return [search, tool(secret.fn, name="secret", effect=Effect.READ_ONLY, threaded=False)]


async def test_a_worker_speculation_is_served_what_another_worker_ran_authoritatively() -> None:
    backend = MemorySharedResults()
    runs_a: list[str] = []
    runs_b: list[str] = []
    worker_a = SharedSpeculation(backend, SECRET, "acme", SharedPolicy({"search": SharedTool()}), clock=FakeClock())
    worker_b = SharedSpeculation(backend, SECRET, "acme", SharedPolicy({"search": SharedTool()}), clock=FakeClock())
    a = Runtime(search_tools(runs_a), shared=worker_a.runs()).session()
    b = Runtime(search_tools(runs_b), shared=worker_b.runs()).session()
    first = await a.execute(ToolCall("search", {"q": "kv"}))  # a miss in worker a: run, published
    first["hits"].append("changed by the caller")  # after publication was encoded: nothing leaks
    await worker_a.drain()
    call = ToolCall("search", {"q": "kv"})
    assert b.speculate(call, source="pattern", confidence=0.9).launched
    await b.wait_speculations(5)
    outcome = await b.execute_detailed(call)
    assert outcome.kind == "hit" and outcome.value == {"q": "kv", "hits": ["KV"]}
    assert runs_a == ["kv"] and runs_b == []  # worker b never ran it
    assert worker_b.stats.served == 1
    # Unshared tools are untouched by the seam.
    assert b.speculate(ToolCall("secret", {"q": "x"}), source="p", confidence=0.9).launched
    await b.wait_speculations(5)
    assert runs_b == ["secret x"]
    await a.close()
    await b.close()


async def test_agents_share_through_the_runtime_without_knowing_it() -> None:
    shared = MemoryShared(["search"])
    runs: list[list[str]] = [[], []]

    def respond(request: FakeRequest) -> Any:
        if not any(m["role"] == "tool" for m in request.messages):
            return scripted_message("", [ToolCall("search", {"q": "paris"})])
        return scripted_message("done")

    class Guess:
        name = "guess"

        async def predict(self, context: PredictionContext) -> list[Prediction]:
            return [Prediction(ToolCall("search", {"q": "paris"}), 0.9, "guess")]

        def observe(self, context: PredictionContext, observed: Any) -> None:
            pass

    results = []
    for i in range(2):
        tools = search_tools(runs[i])
        runtime = Runtime(tools, shared=shared)
        agent = Agent(FakeLLMClient(respond=respond), "m", tools, runtime, predictors=[Guess()])
        results.append(await agent.run([{"role": "user", "content": "paris?"}]))
        await agent.close()
    assert runs == [["paris"], []]  # the second agent's guess was served from the first's run
    assert results[1].tool_records[0].outcome == "hit" and shared.ran == 1  # run once, by the first agent's guess
    assert [r.final_text for r in results] == ["done", "done"]
    assert results[0].messages[1]["content"] == results[1].messages[1]["content"]  # same tool output


async def test_private_tools_never_share_and_shared_ones_publish_their_authoritative_values() -> None:
    shared = MemoryShared(["search", "secret"])
    runs: list[str] = []
    tools = search_tools(runs)
    private = dataclasses.replace(tools[1], private=True)
    session = Runtime([tools[0], private], shared=shared).session()
    assert not shared.shares(private)
    await session.execute(ToolCall("secret", {"q": "pin"}))
    assert shared.values == {}  # a private value is never published
    await session.execute(ToolCall("search", {"q": "x"}))
    assert len(shared.values) == 1
    await session.close()


async def test_a_failing_shared_run_is_never_served_and_the_call_runs_normally() -> None:
    shared = MemoryShared(["search"])
    calls = 0

    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def search(q: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("backend hiccup")
        return q

    session = Runtime([search], shared=shared).session()
    call = ToolCall("search", {"q": "a"})
    assert session.speculate(call, source="p", confidence=0.9).launched
    await asyncio.wait_for(session.wait_speculations(), 5)
    outcome = await session.execute_detailed(call)
    assert (outcome.kind, outcome.value) == ("miss", "a")
    await session.close()


def _document_tools(db: dict[str, str]) -> list[Any]:
    @tool(effect=Effect.READ_ONLY, threaded=False)
    async def read_doc(q: str) -> dict[str, str]:
        return {"q": q, "text": db[q]}

    @tool(effect=Effect.DESTRUCTIVE, threaded=False)
    async def write_doc(q: str, text: str) -> str:
        db[q] = text
        return "ok"

    return [read_doc, write_doc]


def _seams() -> dict[str, Any]:
    policy = SharedPolicy({"read_doc": SharedTool()})
    return {"memory-shared": MemoryShared(["read_doc"]),
            "shared-speculation": SharedSpeculation(MemorySharedResults(), SECRET, "acme", policy, clock=FakeClock())}


async def test_a_value_computed_before_the_session_s_own_write_is_never_served_after_it() -> None:
    """A READ_ONLY shared tool's published value predates the session's write: a guess after the write gets a
    value computed after it (here: its own run), so the model's call sees what serial execution gives."""
    for name, seam in _seams().items():
        for write_again in (False, True):
            db = {"doc": "v0"}
            session = Runtime(_document_tools(db), shared=seam.runs() if hasattr(seam, "runs") else seam).session()
            read = ToolCall("read_doc", {"q": "doc"})
            assert await session.execute(read) == {"q": "doc", "text": "v0"}  # run, and published
            if hasattr(seam, "drain"):
                await seam.drain()
            assert await session.execute(ToolCall("write_doc", {"q": "doc", "text": "v1"})) == "ok"
            session.end_turn()
            assert session.speculate(read, source="pattern", confidence=0.9).launched
            await session.wait_speculations(5)
            if write_again:  # a write after the guess ran: the local rule (stale) still holds
                await session.execute(ToolCall("write_doc", {"q": "doc", "text": "v2"}))
            outcome = await session.execute_detailed(read)
            expected = "v2" if write_again else "v1"
            assert outcome.value == {"q": "doc", "text": expected}, (name, write_again, outcome)
            assert outcome.kind == ("miss" if write_again else "hit"), (name, write_again, outcome)
            await session.close()
