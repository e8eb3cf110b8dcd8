"""A deterministic discrete-event simulator of M tool-using agents sharing one inference engine.

The engine has ``slots`` batch slots and runs iteration-level (continuous) batching: every step prefills
the uncached tokens of newly admitted or continued sequences (at ``prefill_tokens_per_s``) and decodes one
token for each running sequence; a step's decode time grows with the batch size
(``(1 + batch_slowdown * (b - 1)) / decode_tokens_per_s``). A prefix cache of ``cache_tokens`` holds the
tokens of running sequences (pinned) and, LRU-evictable, the prompts of sequences that left. Each agent
runs ``tasks_per_agent`` tasks of ``turns`` tool turns. Arms:

* ``serial``: the response ends at each tool call, the tool runs, the client sends the conversation back
  (API overhead ``o``, then re-prefill of whatever the cache cannot serve: the re-rendered call, the
  resubmitted reasoning, evicted context).
* ``client-side``: a speculator (off-engine, ``speculator_s``) starts with each request and, with
  probability ``alpha``, launches the right tool; a wrong guess wastes one tool run.
* ``engine-side``: as client-side, and the speculator posts its result to the gateway (``o`` later); when
  the call closes and a matching result is posted, the sequence continues in the engine: it keeps its slot
  and its KV, prefills only the tool result, and pays no API overhead.

Guesses and tool durations are drawn from ``random.Random`` seeded by (seed, agent, task, turn), so every
arm sees the same workload. Simplification: a client resubmission always matches the engine's cached prompt
prefix (exact when reasoning is resubmitted). The speculator's own load is not simulated.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum

from forethought.bench.perfmodel._checks import finite_nonnegative, finite_positive, positive_int, probability, require
from forethought.bench.perfmodel.engine import EngineParams, engine_params_of


class Arm(StrEnum):
    """How tool calls are handled."""

    SERIAL = "serial"
    CLIENT = "client-side"
    ENGINE = "engine-side"


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Workload and engine parameters (seconds, tokens, tokens per second)."""

    agents: int = 8
    tasks_per_agent: int = 2
    turns: int = 10
    slots: int = 16
    decode_tokens_per_s: float = 50.0
    batch_slowdown: float = 0.01
    prefill_tokens_per_s: float = 5000.0
    cache_tokens: int = 200_000
    prompt_tokens: int = 1000
    reasoning_tokens: int = 60
    call_tokens: int = 40
    result_tokens: int = 200
    reasoning_resubmitted: bool = True
    tool_s: float = 1.0
    tool_jitter: float = 0.0
    speculator_s: float = 0.3
    alpha: float = 0.7
    api_overhead_s: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("agents", "tasks_per_agent", "turns", "slots", "call_tokens", "cache_tokens"):
            positive_int(name, getattr(self, name))
        for name in ("prompt_tokens", "reasoning_tokens", "result_tokens"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, f"{name} must be an integer >= 0, got {value!r}")
        finite_positive("decode_tokens_per_s", self.decode_tokens_per_s)
        finite_positive("prefill_tokens_per_s", self.prefill_tokens_per_s)
        for name in ("batch_slowdown", "tool_s", "speculator_s", "api_overhead_s"):
            finite_nonnegative(name, getattr(self, name))
        probability("alpha", self.alpha)
        probability("tool_jitter", self.tool_jitter)
        per_turn = self.reasoning_tokens + self.call_tokens + self.result_tokens
        longest = self.prompt_tokens + self.turns * per_turn + self.decoded_per_turn
        require(
            self.cache_tokens >= longest,
            f"cache_tokens={self.cache_tokens} cannot hold one conversation ({longest} tokens)",
        )

    @property
    def decoded_per_turn(self) -> int:
        return self.reasoning_tokens + self.call_tokens

    def engine_params(self) -> EngineParams:
        """The single-agent closed-form counterpart (see :mod:`forethought.bench.perfmodel.engine`)."""
        return engine_params_of(self)


@dataclass(frozen=True, slots=True)
class ArmResult:
    """What one arm measured. ``slot_occupancy`` is the time-average of busy slots over ``slots``."""

    arm: str
    agents: int
    makespan_s: float
    mean_agent_s: float
    output_tokens: int
    prefill_tokens: int
    prefill_tokens_recomputed: int
    slot_occupancy: float
    tool_calls: int
    engine_continuations: int
    client_hits: int
    misses: int
    wasted_tool_s: float

    @property
    def tokens_per_s(self) -> float:
        """Aggregate output throughput: decoded tokens over the makespan."""
        return self.output_tokens / self.makespan_s if self.makespan_s > 0 else 0.0

    def as_dict(self) -> dict[str, float | int | str]:
        out: dict[str, float | int | str] = asdict(self)
        out["tokens_per_s"] = self.tokens_per_s
        return out


def time_saved(result: ArmResult, baseline: ArmResult) -> float:
    """Fraction of the baseline's mean per-agent time that ``result`` saves."""
    return 1.0 - result.mean_agent_s / baseline.mean_agent_s


class _Clock:
    """A heap of (time, order, callback); ties run in scheduling order, so runs are deterministic."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (when, next(self._order), callback))

    def run(self) -> None:
        while self._heap:
            self.now, _, callback = heapq.heappop(self._heap)
            callback()


@dataclass(slots=True)
class _Stats:
    output_tokens: int = 0
    prefill_tokens: int = 0
    recomputed: int = 0
    busy_slot_s: float = 0.0
    tool_calls: int = 0
    continuations: int = 0
    client_hits: int = 0
    misses: int = 0
    wasted_tool_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Request:
    agent: _Agent
    conv: int
    context: int  # tokens of the conversation sent
    reusable: int  # leading tokens the prefix cache may serve
    new_tokens: int  # tokens never computed before (prompt or tool result)


@dataclass(slots=True)
class _Seq:
    agent: _Agent
    conv: int
    context: int  # tokens with KV in this sequence
    prompt: int  # context when the current generation started
    remaining: int  # tokens left to decode
    pending_prefill: int
    reserved: int  # cache tokens pinned for this sequence


@dataclass(frozen=True, slots=True)
class _Guess:
    correct: bool
    tool_s: float
    ready: float  # when the client holds the speculative result (inf: no speculation)
    posted: float  # when the gateway holds it (inf: not posted)


class _Engine:
    """Continuous batching over ``slots`` with an LRU prefix cache of ``cache_tokens``."""

    def __init__(self, cfg: SimConfig, clock: _Clock, stats: _Stats) -> None:
        self.cfg = cfg
        self.clock = clock
        self.stats = stats
        self.running: list[_Seq] = []
        self.waiting: deque[_Request] = deque()
        self.cache: OrderedDict[int, int] = OrderedDict()  # conversation -> evictable cached prefix
        self.cached = 0
        self.pinned = 0
        self.busy = False

    def submit(self, request: _Request) -> None:
        self.waiting.append(request)
        if not self.busy:
            self._start_step()

    def _make_room(self, need: int) -> bool:
        capacity = self.cfg.cache_tokens
        if self.pinned + need > capacity:
            return False
        while self.pinned + self.cached + need > capacity:
            conv, size = next(iter(self.cache.items()))
            excess = self.pinned + self.cached + need - capacity
            if size <= excess:
                del self.cache[conv]
                self.cached -= size
            else:
                self.cache[conv] = size - excess
                self.cached -= excess
        return True

    def _admit(self) -> None:
        decode = self.cfg.decoded_per_turn
        while self.waiting and len(self.running) < self.cfg.slots:
            req = self.waiting[0]
            need = req.context + decode
            if self.pinned + need > self.cfg.cache_tokens:
                return  # head-of-line: wait for running sequences to leave
            self.waiting.popleft()
            cached = self.cache.pop(req.conv, 0)
            self.cached -= cached
            self._make_room(need)
            reused = min(cached, req.reusable)
            uncached = req.context - reused
            self.stats.prefill_tokens += uncached
            self.stats.recomputed += uncached - req.new_tokens
            self.pinned += need
            self.running.append(_Seq(req.agent, req.conv, req.context, req.context, decode, uncached, need))

    def _start_step(self) -> None:
        self._admit()
        if not self.running:
            self.busy = False
            return
        self.busy = True
        batch = len(self.running)
        prefill = 0
        for seq in self.running:
            prefill += seq.pending_prefill
            seq.pending_prefill = 0
        cfg = self.cfg
        decode_s = (1.0 + cfg.batch_slowdown * (batch - 1)) / cfg.decode_tokens_per_s
        duration = prefill / cfg.prefill_tokens_per_s + decode_s
        self.stats.busy_slot_s += batch * duration
        self.clock.at(self.clock.now + duration, self._end_step)

    def _end_step(self) -> None:
        closed = []
        for seq in self.running:
            seq.remaining -= 1
            seq.context += 1
            self.stats.output_tokens += 1
            if seq.remaining == 0:
                closed.append(seq)
        for seq in closed:
            if not seq.agent.on_call_closed(seq):
                self._release(seq)
        self._start_step()

    def try_continue(self, seq: _Seq) -> bool:
        """Append the tool result to a live sequence and decode the next turn; False if the cache is full."""
        cfg = self.cfg
        extra = cfg.result_tokens + cfg.decoded_per_turn
        if not self._make_room(extra):
            return False
        self.pinned += extra
        seq.reserved += extra
        seq.context += cfg.result_tokens
        seq.prompt = seq.context
        seq.remaining = cfg.decoded_per_turn
        seq.pending_prefill = cfg.result_tokens
        self.stats.prefill_tokens += cfg.result_tokens
        return True

    def _release(self, seq: _Seq) -> None:
        self.running.remove(seq)
        self.pinned -= seq.reserved
        self.cache[seq.conv] = seq.prompt
        self.cached += seq.prompt


class _Agent:
    """Runs its tasks turn by turn; the engine calls :meth:`on_call_closed` when a tool call is complete."""

    def __init__(
        self, index: int, cfg: SimConfig, arm: Arm, engine: _Engine, clock: _Clock, stats: _Stats, convs: Iterable[int]
    ) -> None:
        self.index = index
        self.cfg = cfg
        self.arm = arm
        self.engine = engine
        self.clock = clock
        self.stats = stats
        self._convs = iter(convs)
        self.task = 0
        self.turn = 0
        self.guess = _Guess(False, 0.0, float("inf"), float("inf"))
        self.finished_at = 0.0

    def start(self) -> None:
        self._start_task(0.0)

    def _start_task(self, now: float) -> None:
        self.turn = 0
        prompt = self.cfg.prompt_tokens
        self._send(now, _Request(self, next(self._convs), prompt, 0, prompt))

    def _send(self, now: float, request: _Request) -> None:
        self.guess = self._speculate(now)
        self.clock.at(now + self.cfg.api_overhead_s, lambda: self.engine.submit(request))

    def _speculate(self, now: float) -> _Guess:
        cfg = self.cfg
        rng = random.Random(f"{cfg.seed}:{self.index}:{self.task}:{self.turn}")
        tool_s = cfg.tool_s * (1.0 + cfg.tool_jitter * (2.0 * rng.random() - 1.0))
        correct = rng.random() < cfg.alpha
        self.stats.tool_calls += 1
        if self.arm is Arm.SERIAL:
            return _Guess(correct, tool_s, float("inf"), float("inf"))
        if not correct:
            self.stats.wasted_tool_s += tool_s
        ready = now + cfg.speculator_s + tool_s
        posted = ready + cfg.api_overhead_s if self.arm is Arm.ENGINE and correct else float("inf")
        return _Guess(correct, tool_s, ready, posted)

    def on_call_closed(self, seq: _Seq) -> bool:
        """Decide what happens to ``seq``; True keeps it running (server-side continuation)."""
        now = self.clock.now
        guess = self.guess
        last = self.turn == self.cfg.turns - 1
        if guess.posted <= now and (last or self.engine.try_continue(seq)):
            self.stats.continuations += 1
            if last:
                self._finish_task(now)
                return False
            self.turn += 1
            self.guess = self._speculate(now)
            return True
        if guess.correct and self.arm is not Arm.SERIAL:
            self.stats.client_hits += 1
            done = max(now, guess.ready)
        else:
            self.stats.misses += 1
            done = now + guess.tool_s
        if last:
            self.clock.at(done, lambda: self._finish_task(done))
            return False
        cfg = self.cfg
        resubmitted = cfg.call_tokens + (cfg.reasoning_tokens if cfg.reasoning_resubmitted else 0)
        request = _Request(self, seq.conv, seq.prompt + resubmitted + cfg.result_tokens, seq.prompt, cfg.result_tokens)
        self.clock.at(done, lambda: self._next_turn(done, request))
        return False

    def _next_turn(self, now: float, request: _Request) -> None:
        self.turn += 1
        self._send(now, request)

    def _finish_task(self, now: float) -> None:
        self.task += 1
        if self.task < self.cfg.tasks_per_agent:
            self._start_task(now)
        else:
            self.finished_at = now


def simulate(config: SimConfig, arm: Arm) -> ArmResult:
    """Run every agent's tasks under ``arm`` and report what the engine and the agents saw."""
    clock = _Clock()
    stats = _Stats()
    engine = _Engine(config, clock, stats)
    conv_ids = itertools.count()
    agents = [_Agent(i, config, arm, engine, clock, stats, conv_ids) for i in range(config.agents)]
    for agent in agents:
        agent.start()
    clock.run()
    makespan = max(agent.finished_at for agent in agents)
    return ArmResult(
        arm=arm.value,
        agents=config.agents,
        makespan_s=makespan,
        mean_agent_s=sum(agent.finished_at for agent in agents) / len(agents),
        output_tokens=stats.output_tokens,
        prefill_tokens=stats.prefill_tokens,
        prefill_tokens_recomputed=stats.recomputed,
        slot_occupancy=stats.busy_slot_s / (config.slots * makespan) if makespan > 0 else 0.0,
        tool_calls=stats.tool_calls,
        engine_continuations=stats.continuations,
        client_hits=stats.client_hits,
        misses=stats.misses,
        wasted_tool_s=stats.wasted_tool_s,
    )


def simulate_arms(config: SimConfig, arms: Iterable[Arm] = tuple(Arm)) -> dict[Arm, ArmResult]:
    """:func:`simulate` for each arm on the same seeded workload."""
    return {arm: simulate(config, arm) for arm in arms}
