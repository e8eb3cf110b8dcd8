"""End to end over real HTTP: the agent against the simulated engine, serial and speculative alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from forethought import Runtime, Tool, ToolCall
from forethought.agent.loop import Agent, AgentResult
from forethought.bench.engine_sim.model_server import SpeculatorConfig, TimingConfig, create_model_server
from forethought.bench.main import BenchConfig, run_bench
from forethought.bench.verdict import oracle_saved
from forethought.bench.workloads.bfcl import build_session, load_bfcl, state_fingerprint, to_trajectory
from forethought.bench.workloads.synthetic import lookup_tool
from forethought.errors import StreamDroppedError
from forethought.llm.chat import OpenAIChatClient
from forethought.llm.events import LLMEvent, MessageDone
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.trajectory import Trajectory, Turn
from forethought.serve.http import serve_in_process

FAST = TimingConfig(ttft_s=0.0, decode_tokens_per_s=20000.0, reasoning_tokens=8)
ENTRIES = [e for e in load_bfcl() if e.index in (1, 51, 101, 151)]  # one per domain


async def _conversation(base_url: str, entry_index: int, speculate: bool, alpha_speculator: bool = False,
                        **metadata: Any) -> tuple[list[dict[str, Any]], str]:
    entry = ENTRIES[entry_index]
    trajectory = to_trajectory(entry)
    tools, state = build_session(entry)
    async with OpenAIChatClient(base_url + "/v1") as client:
        predictors = [ModelSpeculator(client, "speculator", samples=2)] if alpha_speculator else []
        agent = Agent(client, "main", tools, Runtime(), speculate=speculate, predictors=predictors,
                      request_extra={"metadata": {"trajectory_id": trajectory.id, **metadata}})
        messages: list[dict[str, Any]] = []
        for turn in trajectory.turns:
            messages.append({"role": "user", "content": turn.user})
            result = await agent.run(messages)
            messages.extend(result.messages)
        await agent.close()
    return messages, state_fingerprint(state)


@pytest.fixture
async def engine() -> AsyncIterator[str]:
    trajectories = [to_trajectory(e) for e in ENTRIES]
    app = create_model_server(trajectories, timing=FAST, speculator=SpeculatorConfig(alpha=0.7, timing=FAST))
    async with serve_in_process(app) as url:
        yield url


@pytest.mark.parametrize("index", range(len(ENTRIES)))
async def test_serial_and_speculative_transcripts_are_identical(engine: str, index: int) -> None:
    serial = await _conversation(engine, index, speculate=False)
    speculative = await _conversation(engine, index, speculate=True, alpha_speculator=True)
    assert serial == speculative
    assert any(m["role"] == "tool" for m in serial[0])


async def test_alpha_zero_speculation_does_not_change_results() -> None:
    trajectories = [to_trajectory(e) for e in ENTRIES[:2]]
    app = create_model_server(trajectories, timing=FAST, speculator=SpeculatorConfig(alpha=0.0, timing=FAST))
    async with serve_in_process(app) as url:
        for index in range(2):
            assert await _conversation(url, index, speculate=False) == await _conversation(
                url, index, speculate=True, alpha_speculator=True)


async def test_malformed_arguments_are_reported_as_a_tool_error(engine: str) -> None:
    messages, _ = await _conversation(engine, 0, speculate=True, fault="malformed_arguments")
    errors = [json.loads(m["content"])["error"] for m in messages
              if m["role"] == "tool" and m["content"].startswith('{"error"')]
    assert errors and all("JSON" in e or "arguments" in e for e in errors)


async def test_dropped_stream_is_a_typed_error(engine: str) -> None:
    with pytest.raises(StreamDroppedError):
        await _conversation(engine, 0, speculate=True, fault="drop_stream")


class EndLoggingClient(OpenAIChatClient):
    """Logs the end of each streamed message into a shared list."""

    def __init__(self, base_url: str, log: list[str]) -> None:
        super().__init__(base_url)
        self.log = log

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[LLMEvent]:
        async for event in super().stream(model, messages, tools, **extra):
            if isinstance(event, MessageDone):
                self.log.append("message done")
            yield event


async def test_early_dispatch_happens_before_the_message_ends() -> None:
    log: list[str] = []
    slow = TimingConfig(ttft_s=0.0, decode_tokens_per_s=400.0, reasoning_tokens=4)
    parallel = (ToolCall("lookup", {"item": "a"}), ToolCall("lookup", {"item": "b"}), ToolCall("lookup", {"item": "c"}))
    trajectory = Trajectory("parallel", (Turn("look up a, b and c", (parallel,)),), (lookup_tool().openai_schema(),))
    base = lookup_tool()

    def logged(item: str) -> str:
        log.append(f"run {item}")
        return str(base.fn(item))

    tool = Tool(base.name, logged, base.parameters, base.description, base.effect)
    async with serve_in_process(create_model_server([trajectory], timing=slow)) as url:
        client = EndLoggingClient(url + "/v1", log)
        agent = Agent(client, "main", [tool], Runtime(), request_extra={"metadata": {"trajectory_id": "parallel"}})
        result: AgentResult = await agent.run([{"role": "user", "content": "go"}])
        await agent.close()
        await client.aclose()
    first_end = log.index("message done")
    assert log.index("run a") < first_end and log.index("run b") < first_end
    assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["value of a", "value of b",
                                                                              "value of c"]


async def test_bench_runs_every_arm_and_checks_equivalence(tmp_path: Path) -> None:
    config = BenchConfig(trajectories=2, agents=2, time_scale=0.01, tool_latency_s=0.5, out_dir=str(tmp_path),
                         repeats=2, offload=False)  # the worker-process path: the next test
    doc = await run_bench(config, console=None, json_path=str(tmp_path / "bench.json"))
    results = doc["results"]
    assert results["equivalent"] is True
    for arm in ("serial", "spec-model", "spec-stream", "spec-pattern", "pattern+stream", "all"):
        fields = results["arms"][arm]
        assert {"wall_s", "time_saved", "speedup", "hits", "partial_hits", "misses", "wasted_tool_s", "alpha",
                "efficiency"} <= fields.keys()
    # How many guesses hit is a figure of the benchmark, not of this test: at time scale 0.01 it depends on the
    # machine's speed. What holds whatever the speed: the oracle's guesses are registered before the model's
    # answer can be read (its predictor answers without awaiting), so it never misses; a claim finds each
    # guess finished (a hit) or still running (a partial hit).
    oracle = results["arms"]["oracle"]
    assert oracle["misses"] == 0 and oracle["hits"] + oracle["partial_hits"] == results["arms"]["serial"]["misses"]
    for name, arm in results["arms"].items():  # added in wave 2: spread over repeats, lag, oracle share
        low, high = arm["time_saved_spread"]
        assert low <= arm["time_saved"] <= high and arm["repeats"] == 2 and arm["lag_p99_ms"] >= 0.0
        assert (arm["oracle_share"] is None) == (name == "serial" or not oracle_saved(oracle))
    assert results["repeats"] == 2 and results["machine"]["cores"] >= 1 and results["verdict"]
    assert json.loads((tmp_path / "bench.json").read_text())["command"] == "bench"
    assert (tmp_path / "report.html").exists() and (tmp_path / "outcomes.png").exists()


async def test_bench_with_the_pattern_predictor_in_a_worker_process(tmp_path: Path) -> None:
    """The default (``--offload``): the same guesses from a worker process, still equivalent to serial."""
    config = BenchConfig(arms="spec-pattern", trajectories=2, agents=2, time_scale=0.01, tool_latency_s=0.5,
                         out_dir=str(tmp_path), repeats=1)
    assert config.offload
    doc = await run_bench(config, console=None, json_path=str(tmp_path / "bench.json"))
    results = doc["results"]
    assert results["equivalent"] is True  # whether the worker's guesses came in time is the benchmark's figure;
    # that they are the in-process predictor's own guesses is tests/test_offload.py's (no clock involved)
