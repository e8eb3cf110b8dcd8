"""Multi-worker benchmark: agents in several worker processes, each learning alone vs sharing Redis.

``forethought bench --workers W --agents A --store redis`` runs A agents spread over W worker processes. Every
agent does ``tasks_per_agent`` tasks; a task is a short chain of calls of public lookup tools (each call's
argument comes from the user's words or the previous output), drawn from ``task_types`` kinds of chain and
``topics`` topics, so tasks overlap across workers. The model is simulated: each step "generates" for
``gen_s`` while the pattern predictor's guesses run; each tool takes ``tool_s``. At the start of each task an
agent starts its predictor's sync in the background (``sync_async``: save, then take the others' learning)
and does not wait for it; the last save is awaited when the agent ends. Arms, run interleaved
``repeats`` times:

* ``serial``: no speculation (the reference outputs);
* ``alone``: pattern speculation, each worker learning into its own in-memory store;
* ``shared-patterns``: pattern speculation learning into one Redis model, results not shared;
* ``shared``: pattern speculation learning into one Redis model (:class:`RedisPatternStore` behind
  :class:`FallbackPatternStore`), and shared speculative results (:class:`SharedSpeculation` on Redis);
* ``shared-outage`` (``--outage``, with a server the bench started): ``shared`` with the server stopped
  mid-run and started again empty.

Reported per arm (medians over repeats, with min and max): wall time, time saved against serial, hits,
misses, values served from the shared store, equivalence (every task's outputs equal serial's); for the
Redis arms: round trip p50/p99 of shared-result operations as the workers saw them, claim latency
p50/p99 of hits (to compare with ``alone``; it includes waiting for a speculation still running), the claim
path p50/p99 (the same less that wait: what claiming itself costs), and Redis operations per authoritative
call. The load
average is recorded beside them.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.policy import Policy
from forethought._core.runtime import Runtime, Session
from forethought._core.tools import Effect, Tool, tool
from forethought.bench.report import document
from forethought.predictors.base import ObservedCall, PredictionContext
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.store import MemoryPatternStore, PatternStore
from forethought.stores.fallback import FallbackPatternStore
from forethought.stores.redis_patterns import RedisPatternStore
from forethought.stores.redis_results import RedisSharedResults
from forethought.stores.server import RedisServer
from forethought.stores.shared_tools import SharedPolicy, SharedSpeculation, SharedTool

TOOL_NAMES = ("search", "fetch", "define", "cite", "stats", "news", "wiki", "code", "price", "weather", "map", "quote")
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
ARMS = ("serial", "alone", "shared-patterns", "shared")
RESULT_SHARING_ARMS = frozenset({"shared", "shared-outage"})
BENCH_SECRET = b"forethought-bench-secret-not-for-production"


@dataclass(frozen=True, slots=True)
class WorkersConfig:
    """Shape and timing of the multi-worker benchmark."""

    workers: int = 4
    agents: int = 8
    tasks_per_agent: int = 4
    task_types: int = 8
    topics: int = 4
    steps: int = 3
    gen_s: float = 0.2
    tool_s: float = 0.3
    repeats: int = 3
    seed: int = 0
    outage: bool = False


def _output(name: str, q: str) -> dict[str, Any]:
    return {"tool": name, "q": q, "items": [f"{q}.{name}{i}" for i in range(2)]}


def _tools() -> list[Tool]:
    def make(name: str, tool_s: float) -> Tool:
        async def fn(q: str) -> dict[str, Any]:
            await asyncio.sleep(tool_s)
            return _output(name, q)

        return tool(fn, name=name, effect=Effect.READ_ONLY, threaded=False, parameters=SCHEMA)

    return [make(name, 0.0) for name in TOOL_NAMES]


def tasks(config: WorkersConfig) -> list[tuple[int, str]]:
    """Every task of the run as (chain kind, topic), overlapping across agents and workers."""
    rng = random.Random(config.seed)
    return [(rng.randrange(config.task_types), f"topic{rng.randrange(config.topics)}")
            for _ in range(config.agents * config.tasks_per_agent)]


def chain(kind: int, steps: int) -> list[str]:
    """The tools a task of ``kind`` calls, in order."""
    return random.Random(1000 + kind).sample(TOOL_NAMES, steps)


def _calls(kind: int, topic: str, steps: int) -> list[ToolCall]:
    calls, q = [], topic
    for i, name in enumerate(chain(kind, steps)):
        calls.append(ToolCall(name, {"q": q}))
        q = _output(name, q)["items"][0] if i % 2 == 0 else topic
    return calls


@dataclass
class _Tally:
    outputs: dict[int, list[str]]
    hits: int = 0
    partial: int = 0
    misses: int = 0
    claims_s: list[float] | None = None
    claim_paths_s: list[float] | None = None
    """Each hit's claim less the time it waited for its speculation to finish (``CallOutcome.waited_s``)."""
    shared_served: int = 0
    shared_ops: int = 0
    pattern_round_trips: int = 0
    calls: int = 0
    rtt_s: list[float] | None = None
    degraded: int = 0


async def _agent(arm: str, session_of: Any, predictor: PatternPredictor | None, shared: SharedSpeculation | None,
                 my_tasks: Sequence[tuple[int, tuple[int, str]]], config: WorkersConfig, tally: _Tally) -> None:
    schemas = {name: SCHEMA for name in TOOL_NAMES}
    claims = tally.claims_s if tally.claims_s is not None else []
    paths = tally.claim_paths_s if tally.claim_paths_s is not None else []
    syncing: asyncio.Task[None] | None = None
    for index, (kind, topic) in my_tasks:
        session: Session = session_of()
        message = f"Please look into {topic} (task kind {kind})"
        history: list[ObservedCall] = []
        if predictor is not None:
            if syncing is not None:
                await syncing
            # Save the last task's learning and take the other agents', in the background: the task starts
            # with what the predictor knows now, and what the sync brings counts from when it arrives.
            syncing = asyncio.create_task(predictor.sync_async())
        outputs = []
        for call in _calls(kind, topic, config.steps):
            context = PredictionContext(f"{index}", [{"role": "user", "content": message}], message, tuple(history),
                                        schemas)
            if predictor is not None:
                for p in predictor.predict_now(context):
                    if p.executable:
                        if shared is not None:
                            shared.speculate(session, p.call, "pattern", p.confidence)
                        else:
                            session.speculate(p.call, source="pattern", confidence=p.confidence)
            await asyncio.sleep(config.gen_s)  # the model generates meanwhile
            started = time.perf_counter()
            outcome = await (shared.execute_detailed(session, call) if shared is not None
                             else session.execute_detailed(call))
            if outcome.kind == "hit":
                tally.hits += 1
                claimed = time.perf_counter() - started
                claims.append(claimed)
                paths.append(max(0.0, claimed - outcome.waited_s))
            elif outcome.kind == "partial_hit":
                tally.partial += 1
            else:
                tally.misses += 1
            tally.calls += 1
            text = json.dumps(outcome.value, sort_keys=True)
            outputs.append(text)
            observed = ObservedCall(call, text)
            history.append(observed)
            if predictor is not None:
                predictor.observe(context, observed)
            session.end_turn()
        tally.outputs[index] = outputs
        await session.close()
    if predictor is not None:
        if syncing is not None:
            await syncing
        await asyncio.to_thread(predictor.flush)


async def _worker(arm: str, config: WorkersConfig, my_agents: Sequence[Sequence[tuple[int, tuple[int, str]]]],
                  redis_url: str | None, prefix: str) -> _Tally:
    tally = _Tally({}, claims_s=[], claim_paths_s=[], rtt_s=[])
    slow_tools = [_with_latency(t, config.tool_s) for t in _tools()]
    shared: SharedSpeculation | None = None
    stores: list[PatternStore] = []
    if arm in RESULT_SHARING_ARMS:
        assert redis_url is not None
        policy = SharedPolicy({name: SharedTool(ttl_s=300.0, wait_s=config.tool_s) for name in TOOL_NAMES},
                              op_timeout_s=0.25, retry_after_s=0.5)
        shared = SharedSpeculation(RedisSharedResults.from_url(redis_url), BENCH_SECRET, "bench", policy,
                                   prefix=f"{prefix}:res", on_event=lambda e: _count_degraded(tally, e.kind))
        slow_tools = [shared.wrap(t) for t in slow_tools]
    runtime = Runtime(slow_tools, Policy())
    local = MemoryPatternStore()
    predictors: list[PatternPredictor | None] = []
    for _ in my_agents:
        if arm == "serial":
            predictors.append(None)
            continue
        store: PatternStore = local
        if arm.startswith("shared"):
            redis_store = RedisPatternStore.from_url(redis_url or "", socket_timeout_s=0.25, prefix=f"{prefix}:pat")
            store = FallbackPatternStore(redis_store, lambda e: _count_degraded(tally, e.kind), retry_after_s=0.5)
            stores.append(redis_store)
        predictors.append(PatternPredictor(store, "bench"))
    await asyncio.gather(*(_agent(arm, runtime.session, predictor, shared, agent_tasks, config, tally)
                           for predictor, agent_tasks in zip(predictors, my_agents, strict=True)))
    if shared is not None:
        await shared.close()
        tally.shared_served = shared.stats.served + shared.stats.waited_served
        tally.shared_ops = shared.stats.operations
        tally.rtt_s = list(shared.stats.rtt_s)
    tally.pattern_round_trips = sum(s.round_trips for s in stores if isinstance(s, RedisPatternStore))
    runtime.close()
    return tally


def _count_degraded(tally: _Tally, kind: str) -> None:
    if kind == "degraded":
        tally.degraded += 1


def _with_latency(t: Tool, seconds: float) -> Tool:
    async def fn(q: str) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        return _output(t.name, q)

    return tool(fn, name=t.name, effect=Effect.READ_ONLY, threaded=False, parameters=SCHEMA)


def _worker_main(arm: str, config: WorkersConfig, my_agents: Any, redis_url: str | None, prefix: str,
                 out: Any) -> None:
    tally = asyncio.run(_worker(arm, config, my_agents, redis_url, prefix))
    out.put(asdict(tally))


def _split(config: WorkersConfig) -> list[list[list[tuple[int, tuple[int, str]]]]]:
    """Tasks per agent (round-robin), agents per worker (round-robin)."""
    all_tasks = list(enumerate(tasks(config)))
    per_agent: list[list[tuple[int, tuple[int, str]]]] = [all_tasks[a::config.agents] for a in range(config.agents)]
    return [per_agent[w::config.workers] for w in range(config.workers)]


def run_arm(arm: str, config: WorkersConfig, redis_url: str | None, server: RedisServer | None = None
            ) -> dict[str, Any]:
    """One run of ``arm``: W worker processes; returns the merged tallies and the wall time."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    prefix = f"ft:bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    procs = [ctx.Process(target=_worker_main, args=(arm, config, agents, redis_url, prefix, out))
             for agents in _split(config) if agents]
    for p in procs:
        p.start()
    if arm == "shared-outage" and server is not None:
        time.sleep(config.tasks_per_agent * config.steps * (config.gen_s + config.tool_s) / 3)
        server.stop()
        time.sleep(config.steps * (config.gen_s + config.tool_s))
        server.start()
    tallies = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(30)
    wall = time.perf_counter() - started
    merged: dict[str, Any] = {"wall_s": wall, "outputs": {}}
    for key in ("hits", "partial", "misses", "shared_served", "shared_ops", "pattern_round_trips", "calls",
                "degraded"):
        merged[key] = sum(t[key] for t in tallies)
    merged["claims_s"] = [x for t in tallies for x in t["claims_s"]]
    merged["claim_paths_s"] = [x for t in tallies for x in t["claim_paths_s"]]
    merged["rtt_s"] = [x for t in tallies for x in t["rtt_s"]]
    for t in tallies:
        merged["outputs"].update({int(k): v for k, v in t["outputs"].items()})
    return merged


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """Medians (with spread) per arm, equivalence to serial, and the Redis figures."""
    serial = runs["serial"]
    reference = serial[0]["outputs"]
    arms: dict[str, Any] = {}
    for arm, arm_runs in runs.items():
        walls = [r["wall_s"] for r in arm_runs]
        saved = [1.0 - r["wall_s"] / s["wall_s"] for r, s in zip(arm_runs, serial, strict=False)]
        claims = [x for r in arm_runs for x in r["claims_s"]]
        paths = [x for r in arm_runs for x in r.get("claim_paths_s", ())]
        rtt = [x for r in arm_runs for x in r["rtt_s"]]
        calls = sum(r["calls"] for r in arm_runs)
        ops = sum(r["shared_ops"] + r["pattern_round_trips"] for r in arm_runs)
        arms[arm] = {
            "wall_s": _spread(walls), "time_saved": _spread(saved),
            "hits": _spread([r["hits"] for r in arm_runs]), "partial_hits": _spread([r["partial"] for r in arm_runs]),
            "misses": _spread([r["misses"] for r in arm_runs]),
            "shared_served": _spread([r["shared_served"] for r in arm_runs]),
            "equivalent": all(r["outputs"] == reference for r in arm_runs),
            "claim_p50_ms": _ms(_pct(claims, 0.5)), "claim_p99_ms": _ms(_pct(claims, 0.99)),
            "claim_path_p50_ms": _ms(_pct(paths, 0.5)), "claim_path_p99_ms": _ms(_pct(paths, 0.99)),
            "redis_rtt_p50_ms": _ms(_pct(rtt, 0.5)), "redis_rtt_p99_ms": _ms(_pct(rtt, 0.99)),
            "redis_ops_per_call": ops / calls if calls else 0.0,
            "degraded_events": sum(r["degraded"] for r in arm_runs),
        }
    return {"arms": arms, "equivalent": all(a["equivalent"] for a in arms.values())}


async def probe(redis_url: str, rounds: int = 300) -> dict[str, Any]:
    """Quiet, sequential figures on loopback: a speculation's Redis round trip (``get_or_lead``), and the claim
    of a finished speculation whose value came from Redis against one computed locally (same claim code)."""
    backend = RedisSharedResults.from_url(redis_url)
    rtts = []
    for i in range(rounds):
        started = time.perf_counter()
        await backend.get_or_lead(f"ft:probe:{{{i}}}:v", "probe", 1.0)
        rtts.append(time.perf_counter() - started)
    await backend.close()
    shared = SharedSpeculation(RedisSharedResults.from_url(redis_url), BENCH_SECRET, "probe",
                               SharedPolicy({"search": SharedTool()}, op_timeout_s=1.0), prefix="ft:probe:res")
    plain_tools = [_with_latency(t, 0.0) for t in _tools() if t.name == "search"]
    arms = {"redis": Runtime([shared.wrap(plain_tools[0])]), "local": Runtime(plain_tools)}
    claims: dict[str, list[float]] = {"redis": [], "local": []}
    for i in range(rounds):
        call = ToolCall("search", {"q": f"probe{i}"})
        await shared.execute(arms["redis"].session(), call)  # publish it first
        await shared.drain()
        for arm, runtime in arms.items():
            session = runtime.session()
            if arm == "redis":
                shared.speculate(session, call)
            else:
                session.speculate(call)
            await session.wait_speculations(1.0)
            started = time.perf_counter()
            outcome = await session.execute_detailed(call)
            claims[arm].append(time.perf_counter() - started)
            assert outcome.kind == "hit"
            await session.close()
    served = shared.stats.served
    await shared.close()
    for runtime in arms.values():
        runtime.close()
    return {"rounds": rounds, "rtt_p50_ms": _ms(_pct(rtts, 0.5)), "rtt_p99_ms": _ms(_pct(rtts, 0.99)),
            "claim_served_from_redis_p50_ms": _ms(_pct(claims["redis"], 0.5)),
            "claim_served_from_redis_p99_ms": _ms(_pct(claims["redis"], 0.99)),
            "claim_local_p50_ms": _ms(_pct(claims["local"], 0.5)),
            "claim_local_p99_ms": _ms(_pct(claims["local"], 0.99)), "served_from_redis": served}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def run_workers_bench(config: WorkersConfig, redis_url: str | None = None,
                      json_path: str | Path | None = None) -> dict[str, Any]:
    """Run the arms interleaved ``repeats`` times (starting a local redis-server unless ``redis_url``)."""
    import redis.asyncio  # noqa: F401  (imported once here: forked workers inherit it instead of each paying it)

    server: RedisServer | None = None
    workdir = None
    if redis_url is None:
        workdir = tempfile.TemporaryDirectory(prefix="forethought-redis-")
        server = RedisServer(Path(workdir.name))
        server.start()
        redis_url = server.url
    arms = [*ARMS, *(("shared-outage",) if config.outage and server is not None else ())]
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    load_before = os.getloadavg()
    try:
        for _ in range(config.repeats):
            for arm in arms:
                runs[arm].append(run_arm(arm, config, redis_url, server))
        quiet = asyncio.run(probe(redis_url))
    finally:
        if server is not None:
            server.stop()
        if workdir is not None:
            workdir.cleanup()
    results = summarize(runs)
    results["probe"] = quiet
    results["machine"] = {"cpus": os.cpu_count(), "load_before": list(load_before), "load_after": list(os.getloadavg())}
    doc = document("bench-workers", asdict(config) | {"store": "redis", "redis_url_given": server is None}, results)
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2))
    return doc


def format_table(doc: Mapping[str, Any]) -> str:
    """A plain-text table of the medians."""
    lines = [f"{'arm':14} {'wall s':>7} {'saved':>6} {'hits':>5} {'miss':>5} {'shared':>6} {'equal':>5} "
             f"{'claim p99 ms':>12} {'path p99 ms':>11} {'rtt p50/p99 ms':>15} {'ops/call':>8}"]
    for arm, a in doc["results"]["arms"].items():
        rtt = "-" if a["redis_rtt_p50_ms"] is None else f"{a['redis_rtt_p50_ms']:.2f}/{a['redis_rtt_p99_ms']:.2f}"
        claim = "-" if a["claim_p99_ms"] is None else f"{a['claim_p99_ms']:.2f}"
        path = "-" if a.get("claim_path_p99_ms") is None else f"{a['claim_path_p99_ms']:.2f}"
        lines.append(f"{arm:14} {a['wall_s']['median']:7.2f} {a['time_saved']['median']:6.1%} "
                     f"{a['hits']['median']:5.0f} {a['misses']['median']:5.0f} {a['shared_served']['median']:6.0f} "
                     f"{a['equivalent']!s:>5} {claim:>12} {path:>11} {rtt:>15} {a['redis_ops_per_call']:8.2f}")
    p = doc["results"]["probe"]
    lines.append(f"probe ({p['rounds']} sequential rounds): get_or_lead p50/p99 {p['rtt_p50_ms']}/"
                 f"{p['rtt_p99_ms']} ms; "
                 f"claim of a hit served from Redis p50/p99 {p['claim_served_from_redis_p50_ms']}/"
                 f"{p['claim_served_from_redis_p99_ms']} ms vs local {p['claim_local_p50_ms']}/"
                 f"{p['claim_local_p99_ms']} ms")
    machine = doc["results"]["machine"]
    lines.append(f"load average before {machine['load_before'][0]:.2f}, after {machine['load_after'][0]:.2f} "
                 f"on {machine['cpus']} CPUs")
    return "\n".join(lines)


def run_cli(workers: int, agents: int, tasks_per_agent: int, repeats: int, seed: int, store: str,
            redis_url: str | None, json_path: str | Path | None, outage: bool = True) -> dict[str, Any]:
    """``forethought bench --workers W --store redis``: run, print the table, return the document."""
    from forethought.errors import PolicyError

    if store != "redis":
        raise PolicyError(f"--workers needs --store redis (got {store!r})")
    config = WorkersConfig(workers=workers, agents=max(agents, workers), tasks_per_agent=max(tasks_per_agent, 2),
                           repeats=repeats, seed=seed, outage=outage)
    doc = run_workers_bench(config, redis_url, json_path)
    print(format_table(doc))
    return doc
