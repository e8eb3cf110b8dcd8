"""The benchmark runner: every arm over the same trajectories, against the simulated engine over HTTP.

For each arm it opens one :class:`~forethought._core.runtime.Runtime` (shared by the arm's concurrent agents),
runs each trajectory's turns through an :class:`~forethought.agent.loop.Agent` talking to ``serve-model`` on a
loopback port, and records wall time, tool outputs, final state and speculation counts. Arms run one
after another over identical trajectories with identical injected latencies; the serial arm is the
reference for time saved and for equivalence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.policy import Policy
from forethought._core.pricing import ReliabilityRow
from forethought._core.runtime import Runtime, SessionStats
from forethought.agent.loop import Agent, StepTiming, ToolRecord
from forethought.bench.arms import Arm
from forethought.bench.workloads.base import Workload
from forethought.bench.workloads.latency import LatencyModel
from forethought.llm.chat import OpenAIChatClient
from forethought.predictors.base import Predictor
from forethought.predictors.model import ModelSpeculator
from forethought.predictors.offload import OffloadedPredictor
from forethought.predictors.trajectory import Trajectory
from forethought.telemetry import EventKind

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
    reliability: tuple[ReliabilityRow, ...] = ()
    """Predicted against observed hit rates of the arm's guess sources (its runtime's calibration)."""
    backoffs: int = 0
    """How often the arm's runtime changed load state (normal, reduced, off)."""
    wasted_by_source: Mapping[str, float] = field(default_factory=dict)
    """Wasted tool seconds per guess source (its runtime's telemetry)."""


def _request_extra(trajectory: Trajectory, arm: Arm, repeat: int) -> dict[str, Any]:
    conversation = f"{arm.name}/{trajectory.id}/{repeat}"
    return {"metadata": {"trajectory_id": trajectory.id, "conversation_id": conversation}}


async def run_trajectory(arm: Arm, trajectory: Trajectory, workload: Workload, client: OpenAIChatClient,
                         runtime: Runtime, predictors: Sequence[Predictor], latency: LatencyModel | None,
                         repeat: int = 0, chain_depth: int = 1) -> TrajectoryRun:
    """Run every turn of ``trajectory`` with ``arm``'s agent; never raises for a failed conversation."""
    session_tools = workload.session_tools(trajectory, latency)
    agent = Agent(client, MAIN_MODEL, session_tools.tools, runtime, speculate=arm.speculate,
                  predictors=predictors, early_dispatch=arm.early_dispatch,
                  request_extra=_request_extra(trajectory, arm, repeat),
                  session_id=f"{arm.name}/{trajectory.id}/{repeat}", chain_depth=chain_depth)
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


@dataclass(slots=True)
class ArmContext:
    """One arm's long-lived parts for a run: its client, runtime and predictors (shared by its batches)."""

    arm: Arm
    client: OpenAIChatClient
    runtime: Runtime
    predictors: list[Predictor]
    speculator: ModelSpeculator | None
    runs: list[TrajectoryRun] = field(default_factory=list)
    elapsed_s: float = 0.0
    chain_depth: int = 1

    def result(self) -> ArmRun:
        """The arm's runs so far (in trajectory order of their batches) as one :class:`ArmRun`."""
        speculator = self.speculator
        return ArmRun(self.arm, tuple(self.runs), self.elapsed_s,
                      speculator_tokens=speculator.stats.tokens if speculator else 0,
                      speculator_first_close_s=speculator.stats.mean_first_close_s if speculator else 0.0,
                      runtime_stats=self.runtime.stats(),
                      reliability=tuple(self.runtime.calibration.table()),
                      backoffs=self.runtime.telemetry.counts.get(EventKind.BACKOFF, 0),
                      wasted_by_source=dict(self.runtime.telemetry.wasted_by_source))

    async def start(self) -> None:
        """Start the predictors that run in worker processes (before anything is timed)."""
        await asyncio.gather(*(p.start() for p in self.predictors if isinstance(p, OffloadedPredictor)))

    async def aclose(self) -> None:
        self.runtime.close()
        await self.client.aclose()
        for predictor in self.predictors:
            if isinstance(predictor, OffloadedPredictor):
                await predictor.close()


def open_arm(arm: Arm, base_url: str, *, policy: Policy, samples: int,
             pattern_factory: Callable[[], Predictor] | None,
             oracle: Callable[[], Predictor] | None = None, chain_depth: int = 1) -> ArmContext:
    """Build ``arm``'s client, runtime and predictors (its pattern predictor a fresh trained copy)."""
    client = OpenAIChatClient(base_url + "/v1")
    runtime = Runtime(policy=policy)
    predictors: list[Predictor] = []
    speculator: ModelSpeculator | None = None
    if arm.oracle and oracle is not None:
        predictors.append(oracle())
    if arm.patterns and pattern_factory is not None:
        predictors.append(pattern_factory())
    if arm.model:
        speculator = ModelSpeculator(client, SPECULATOR_MODEL, samples=samples)
        predictors.append(speculator)
    return ArmContext(arm, client, runtime, predictors, speculator, chain_depth=chain_depth)


async def run_batch(context: ArmContext, trajectories: Sequence[Trajectory], workload: Workload, *,
                    agents: int, latency: LatencyModel | None,
                    progress: Callable[[str], None] | None = None, repeat: int = 0) -> None:
    """Run ``trajectories`` with at most ``agents`` concurrent agents under the arm's runtime."""
    gate = asyncio.Semaphore(max(1, agents))
    arm = context.arm

    async def one(trajectory: Trajectory) -> TrajectoryRun:
        async with gate:
            run = await run_trajectory(arm, trajectory, workload, context.client, context.runtime,
                                       context.predictors, latency, repeat, context.chain_depth)
            if progress is not None:
                progress(arm.name)
            return run

    started = time.monotonic()
    runs = await asyncio.gather(*(one(t) for t in trajectories))
    context.elapsed_s += time.monotonic() - started
    context.runs.extend(runs)


async def run_arm(arm: Arm, trajectories: Sequence[Trajectory], workload: Workload, base_url: str, *,
                  agents: int, latency: LatencyModel | None, policy: Policy, samples: int,
                  pattern_factory: Callable[[], Predictor] | None,
                  progress: Callable[[str], None] | None = None, repeat: int = 0,
                  oracle: Callable[[], Predictor] | None = None) -> ArmRun:
    """Run ``trajectories`` with at most ``agents`` concurrent agents under one runtime."""
    context = open_arm(arm, base_url, policy=policy, samples=samples, pattern_factory=pattern_factory,
                       oracle=oracle)
    try:
        await context.start()
        await run_batch(context, trajectories, workload, agents=agents, latency=latency, progress=progress,
                        repeat=repeat)
    finally:
        await context.aclose()
    return context.result()
