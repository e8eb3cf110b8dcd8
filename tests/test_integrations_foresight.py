"""Adapters and the tap predict at step start: what they learn, what they start, and what they never change.

Every adapter (the tap, the OpenAI Agents SDK, LangGraph's tapped model node, pydantic-ai) runs the
benchmark's research task (:mod:`forethought.bench.adapter_task`: ``search`` then three ``fetch`` steps,
new ids every variant) on a loopback scripted model. After a few conversations the pattern predictor
guesses each step's call at step start, and the model's own call claims it; guesses that are wrong, odd or
of tools that write never change a result; what was learned is saved and a new Foresight starts warm.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter_tools import patterns_in_tmp  # noqa: F401 - a fixture
from forethought import Effect, Runtime, ToolCall, tool
from forethought.bench.adapter_task import OraclePredictor, Variant, serve_variants, task_tools, variants
from forethought.bench.adapters import ADAPTERS, Run, TaskParams, run_adapters, skipped_reason, timed
from forethought.integrations import tap
from forethought.integrations.foresight import Foresight, default_store_path, foresight_for
from forethought.integrations.transcripts import from_anthropic, from_responses, to_chat
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.telemetry import Event, EventKind

FAST = TaskParams(repeats=1, warmup=3, tool_s=0.05, think_s=0.05, ttft_s=0.0, chunk_s=0.005)
NAMES = [name for name in ("tap", "openai-agents", "langgraph", "pydantic-ai") if skipped_reason(name) is None]
GUESSED = {"pattern", "chain"}


class _Sources:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.launched: Counter[str] = Counter()

    def __call__(self, event: Event) -> None:
        if event.kind is EventKind.HIT:
            self.hits[event.source] += 1
        elif event.kind is EventKind.LAUNCHED:
            self.launched[event.source] += 1


async def _conversations(name: str, count: int, foresight: Foresight | None, speculate: bool = True,
                         of: list[Variant] | None = None) -> tuple[list[Any], _Sources, list[Variant]]:
    """``count`` conversations of the task through adapter ``name``, one runtime; outcomes and sources of
    the last one."""
    chosen = of or variants(count, ttft_s=FAST.ttft_s, chunk_s=FAST.chunk_s, think_s=FAST.think_s)
    runtime = Runtime()
    outcomes: list[Any] = []
    sources = _Sources()
    async with serve_variants(chosen) as urls:
        for n, variant in enumerate(chosen):
            if n == len(chosen) - 1:
                runtime.telemetry.subscribe(sources)
            run = Run(urls[n], variant.question, speculate, foresight)
            outcomes.append((await timed(ADAPTERS[name], run, runtime, chosen, FAST))[1])
    return outcomes, sources, chosen


@pytest.mark.parametrize("name", NAMES)
async def test_after_a_few_conversations_every_step_is_guessed_at_its_start(name: str) -> None:
    foresight = Foresight()
    _, sources, _ = await _conversations(name, FAST.warmup + 1, foresight)
    assert sum(sources.hits.values()) == 4  # search and three fetches, each claimed ...
    assert set(sources.hits) <= GUESSED  # ... from a guess made at step start, not from the stream
    foresight.close()


@pytest.mark.parametrize("name", NAMES)
async def test_a_cold_predictor_learning_as_it_goes_changes_nothing(name: str) -> None:
    foresight = Foresight()
    outcomes, sources, chosen = await _conversations(name, 1, foresight)
    serial, _, _ = await _conversations(name, 1, None, speculate=False, of=chosen)
    assert outcomes == serial
    assert "search" not in json.dumps(sources.hits)  # the first step had nothing to learn from
    foresight.close()


class Hostile:
    """A predictor whose guesses are all wrong, odd or dangerous, with full confidence."""

    name = "hostile"

    def __init__(self) -> None:
        self.asked = 0

    async def predict(self, context: PredictionContext) -> list[Prediction]:
        self.asked += 1
        odd: list[Any] = [{"id": "doc-00000"}, {"id": 7}, {"id": None}, {"query": "x" * 5000}, {}, {"id": ["a"]},
                          {"id": "doc-1", "extra": True}, {"query": "\ud800"}]
        calls = [ToolCall("fetch", a) for a in odd] + [ToolCall("search", {"query": "nothing"}),
                                                       ToolCall("nope", {}), ToolCall("note", {"text": "early"})]
        return [Prediction(c, 1.0, self.name) for c in calls]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Learns nothing."""


@pytest.mark.parametrize("name", NAMES)
async def test_wrong_odd_and_hostile_guesses_never_change_a_result(name: str) -> None:
    hostile = Hostile()
    foresight = Foresight(with_patterns=False, speculators=[hostile])
    chosen = variants(2, ttft_s=FAST.ttft_s, chunk_s=FAST.chunk_s, think_s=FAST.think_s)
    guessed, _, _ = await _conversations(name, 2, foresight, of=chosen)
    serial, _, _ = await _conversations(name, 2, None, speculate=False, of=chosen)
    assert guessed == serial
    assert hostile.asked >= 10  # asked at every step of both conversations


async def test_a_guessed_write_never_runs_before_the_model_calls_it() -> None:
    ran: list[str] = []

    @tool(effect=Effect.READ_ONLY)
    async def lookup(city: str) -> str:
        """A read."""
        ran.append(f"lookup:{city}")
        return city

    @tool
    def note(text: str) -> str:
        """A write (undeclared: DESTRUCTIVE)."""
        ran.append(f"note:{text}")
        return "ok"

    class GuessesTheWrite:
        name = "writer"

        async def predict(self, context: PredictionContext) -> list[Prediction]:
            return [Prediction(ToolCall("note", {"text": "early"}), 1.0, self.name),
                    Prediction(ToolCall("lookup", {"city": "Oslo"}), 1.0, self.name)]

        def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
            """Learns nothing."""

    session = Runtime().session(tools=[lookup, note])
    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c0", "function": {"name": "note", "arguments": '{"text": "early"}'}}]}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]

    async def stream() -> Any:
        for chunk in chunks:
            await asyncio.sleep(0.01)
            yield chunk

    foresight = Foresight(with_patterns=False, speculators=[GuessesTheWrite()])
    tapped = tap(stream(), session, messages=[{"role": "user", "content": "note it"}], predict=foresight)
    async for _ in tapped:
        pass
    assert "note:early" not in ran  # guessed with full confidence, streamed: still not run before its turn
    assert await session.execute(tapped.calls[0]) == "ok"
    assert ran.count("note:early") == 1
    await session.close()


async def test_what_was_learned_is_saved_and_a_new_foresight_starts_warm(tmp_path: Path) -> None:
    store = tmp_path / "patterns.sqlite"
    chosen = variants(FAST.warmup + 1, ttft_s=FAST.ttft_s, chunk_s=FAST.chunk_s, think_s=FAST.think_s)
    first = Foresight(store)
    await _conversations("tap", FAST.warmup, first, of=chosen[: FAST.warmup])
    first.close()
    second = Foresight(store)  # as a new process would: nothing in memory, the store loaded
    _, sources, _ = await _conversations("tap", 1, second, of=chosen[FAST.warmup:])
    assert sum(sources.hits.values()) == 4 and set(sources.hits) <= GUESSED
    second.close()


async def test_the_oracle_guesses_every_step_exactly() -> None:
    chosen = variants(1, ttft_s=FAST.ttft_s, chunk_s=FAST.chunk_s, think_s=FAST.think_s)
    oracle = Foresight(with_patterns=False, speculators=[OraclePredictor(chosen[0])])
    _, sources, _ = await _conversations("tap", 1, oracle, of=chosen)
    assert sources.hits == Counter({"oracle": 4})


async def test_the_benchmark_reports_every_mode_side_by_side() -> None:
    params = TaskParams(repeats=2, warmup=1, tool_s=0.01, think_s=0.01, ttft_s=0.0, chunk_s=0.002)
    results = await run_adapters(["tap"], params)
    row = results["tap"]
    assert row["equivalent"] is True and row["runs"] == 2
    assert set(row) >= {"direct_s", "forethought_s", "oracle_s", "direct_spread_s", "forethought_saved",
                        "oracle_saved", "of_oracle", "hits"}
    assert row["hits"]["direct"] == {} and row["hits"]["oracle"] == {"oracle": 8}


# --- the pieces ---------------------------------------------------------------------------------------------


def test_default_foresight_lives_in_the_users_cache_and_is_one_per_store(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a"))
    first = Foresight.default()
    assert default_store_path() == tmp_path / "a" / "forethought" / "adapter-patterns.sqlite"
    assert Foresight.default() is first and default_store_path().exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert Foresight.default() is not first
    assert foresight_for(True, speculate=False) is None and foresight_for(False, speculate=True) is None
    assert foresight_for(first, speculate=True) is first


async def test_a_step_never_ended_is_stopped_by_the_next_and_sessions_are_not_kept() -> None:
    foresight = Foresight()
    session = Runtime().session(tools=task_tools(variants(1), 0.0))
    foresight.end(session)  # no step: nothing to end
    foresight.begin(session, [{"role": "user", "content": "a"}])
    foresight.begin(session, [{"role": "user", "content": "b"}])  # the first never ended
    foresight.end(session)
    foresight.end(session)
    await session.close()
    del session
    gc.collect()
    assert len(foresight._sessions) == 0


def test_responses_items_become_chat_messages_one_turn_each() -> None:
    items = [{"role": "user", "content": "q"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
             {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"query": "x"}'},
             {"type": "function_call", "call_id": "c2", "name": "fetch", "arguments": '{"id": "d"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "one"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
             {"type": "reasoning", "summary": []}]
    assert from_responses(items) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}},
            {"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": '{"id": "d"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"}]
    assert to_chat(items) == from_responses(items) and to_chat("hi") == [{"role": "user", "content": "hi"}]


def test_anthropic_turns_become_chat_messages() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "search", "input": {"query": "x"}}
    turns = [{"role": "user", "content": "q"},
             {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, use]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]}]
    assert from_anthropic(turns, system="s") == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "found"}]
    assert to_chat(turns) == from_anthropic(turns)


JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["role", "type", "content", "call_id", "name", "arguments", "output",
                                         "tool_calls", "id", "input", "tool_use_id", "text"]), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=400)
@given(JUNK)
def test_no_conversation_makes_the_converters_raise(messages: Any) -> None:
    for convert in (to_chat, lambda m: from_responses(m if isinstance(m, list) else [m]),
                    lambda m: from_anthropic(m if isinstance(m, list) else [m])):
        out = convert(messages)
        assert all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in out)
        json.dumps(out, default=str)


@settings(max_examples=60, deadline=None)
@given(JUNK)
async def test_no_conversation_makes_a_step_start_raise(messages: Any) -> None:
    foresight = Foresight()
    session = Runtime().session(tools=task_tools(variants(1), 0.0))
    foresight.begin(session, messages if isinstance(messages, list) else [messages])
    foresight.end(session)
    await session.close()
