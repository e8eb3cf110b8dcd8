"""The benchmark runner: every arm over the same trajectories, against the simulated engine over HTTP.

For each arm it opens one :class:`~forethought._runtime.Runtime` (shared by the arm's concurrent agents),
runs each trajectory's turns through an :class:`~forethought.agent.Agent` talking to ``serve-model`` on a
loopback port, and records wall time, tool outputs, final state and speculation counts. Arms run one
after another over identical trajectories with identical injected latencies; the serial arm is the
reference for time saved and for equivalence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._policy import Policy
from forethought._runtime import Runtime, SessionStats
from forethought._trajectory import Trajectory
from forethought.agent import Agent, StepTiming, ToolRecord
from forethought.bench.arms import Arm
from forethought.llm.chat import OpenAIChatClient
from forethought.predictors.base import Predictor
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.workloads.base import Workload
from forethought.workloads.latency import LatencyModel

MAIN_MODEL = "main"
SPECULATOR_MODEL = "speculator"


@dataclass(frozen=True, slots=True)
class TrajectoryRun:
    """One arm's run of one trajectory."""

    arm: str
    trajectory_id: str
    domain: str
    wall_s: float
    records: tuple[ToolRecord, ...]
    steps: tuple[StepTiming, ...]
    fingerprint: str
    stats: SessionStats
    error: str | None = None

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(r.output for r in self.records)


@dataclass(frozen=True, slots=True)
class ArmRun:
    """All trajectories of one arm, plus what its predictors cost."""

    arm: Arm
    runs: tuple[TrajectoryRun, ...]
    elapsed_s: float
    speculator_tokens: int = 0
    speculator_first_close_s: float = 0.0
    runtime_stats: SessionStats = field(default_factory=SessionStats)


def _request_extra(trajectory: Trajectory, arm: Arm, repeat: int) -> dict[str, Any]:
    conversation = f"{arm.name}/{trajectory.id}/{repeat}"
    return {"metadata": {"trajectory_id": trajectory.id, "conversation_id": conversation}}


async def run_trajectory(arm: Arm, trajectory: Trajectory, workload: Workload, client: OpenAIChatClient,
                         runtime: Runtime, predictors: Sequence[Predictor], latency: LatencyModel | None,
                         repeat: int = 0) -> TrajectoryRun:
    """Run every turn of ``trajectory`` with ``arm``'s agent; never raises for a failed conversation."""
    session_tools = workload.session_tools(trajectory, latency)
    agent = Agent(client, MAIN_MODEL, session_tools.tools, runtime, speculate=arm.speculate,
                  predictors=predictors, early_dispatch=arm.early_dispatch,
                  request_extra=_request_extra(trajectory, arm, repeat),
                  session_id=f"{arm.name}/{trajectory.id}/{repeat}")
    return await converse(arm.name, agent, trajectory, session_tools.fingerprint)


async def converse(arm: str, agent: Agent, trajectory: Trajectory,
                   fingerprint: Callable[[], str]) -> TrajectoryRun:
    """Play every user turn of ``trajectory`` through ``agent``, then close it; a failure is recorded."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": trajectory.system}] if trajectory.system else []
    records: list[ToolRecord] = []
    steps: list[StepTiming] = []
    error: str | None = None
    started = time.monotonic()
    try:
        for turn in trajectory.turns:
            messages.append({"role": "user", "content": turn.user})
            result = await agent.run(messages)
            messages.extend(result.messages)
            records.extend(result.tool_records)
            steps.extend(result.steps)
    except Exception as exc:  # recorded, compared, reported: one bad conversation never stops the bench
        error = f"{type(exc).__name__}: {exc}"
    wall = time.monotonic() - started
    stats = agent.session.stats()
    await agent.close()
    return TrajectoryRun(arm, trajectory.id, trajectory.domain, wall, tuple(records), tuple(steps),
                         fingerprint(), stats, error)


async def run_arm(arm: Arm, trajectories: Sequence[Trajectory], workload: Workload, base_url: str, *,
                  agents: int, latency: LatencyModel | None, policy: Policy, samples: int,
                  pattern_factory: Callable[[], PatternPredictor] | None,
                  progress: Callable[[str], None] | None = None, repeat: int = 0) -> ArmRun:
    """Run ``trajectories`` with at most ``agents`` concurrent agents under one runtime."""
    client = OpenAIChatClient(base_url + "/v1")
    runtime = Runtime(policy=policy)
    predictors: list[Predictor] = []
    speculator: ModelSpeculator | None = None
    if arm.patterns and pattern_factory is not None:
        predictors.append(pattern_factory())
    if arm.model:
        speculator = ModelSpeculator(client, SPECULATOR_MODEL, samples=samples)
        predictors.append(speculator)
    gate = asyncio.Semaphore(max(1, agents))

    async def one(trajectory: Trajectory) -> TrajectoryRun:
        async with gate:
            run = await run_trajectory(arm, trajectory, workload, client, runtime, predictors, latency, repeat)
            if progress is not None:
                progress(arm.name)
            return run

    started = time.monotonic()
    try:
        runs = await asyncio.gather(*(one(t) for t in trajectories))
    finally:
        runtime.close()
        await client.aclose()
    elapsed = time.monotonic() - started
    return ArmRun(arm, tuple(runs), elapsed,
                  speculator_tokens=speculator.stats.tokens if speculator else 0,
                  speculator_first_close_s=speculator.stats.mean_first_close_s if speculator else 0.0,
                  runtime_stats=runtime.stats())
