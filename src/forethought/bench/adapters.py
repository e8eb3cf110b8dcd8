"""Direct, forethought and oracle side by side through each adapter: the tap, the Agent, the OpenAI Agents SDK,
LangGraph and pydantic-ai.

The task (:mod:`forethought.bench.adapter_task`): a research agent with two READ_ONLY tools of ``tool_s``
seconds each (``search``, ``fetch``) over four tool steps, one call per step, the model thinking for
``think_s`` before each call; every run is a new variant (its own topic and document ids). Each adapter
runs the same framework code in three modes:

* ``direct``: ``speculate=False`` (the framework as it is, nothing started early);
* ``forethought``: the adapter's defaults: the model's own streamed calls start as their arguments close,
  and the pattern predictor (:class:`~forethought.integrations.foresight.Foresight`, learning online,
  saved to a SQLite file) guesses each step's calls at step start;
* ``oracle``: the same, with perfect prediction at step start instead of the pattern predictor.

Warm: each adapter first runs ``warmup`` variants in the forethought mode (the predictor learns; not
timed); then ``repeats`` rounds, each on a fresh variant, run the three modes one after another, the order
rotating from round to round. The report gives per adapter and mode the median wall time and its spread
(min-max), the time saved against direct, the share of the oracle's saving that forethought achieved, the
hits by source, and whether every run's tool outputs and final text equal the direct run's.

Run: ``python -m forethought.bench.adapters --repeats 5 --json reports/adapters.json``. An adapter whose
framework is not installed is skipped with that reason.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import openai

from forethought._core.runtime import Runtime, Session
from forethought.agent.loop import Agent
from forethought.bench.adapter_task import OraclePredictor, Variant, serve_variants, task_tools, variants
from forethought.bench.report import document, write_json
from forethought.integrations.foresight import Foresight
from forethought.integrations.tap import tap
from forethought.telemetry import Event, EventKind

MODES = ("direct", "forethought", "oracle")
Outcome = tuple[Any, ...]
"""What a run produced, compared across modes: tool outputs in order and the final text."""


@dataclass(frozen=True, slots=True)
class Run:
    """How one adapter run is set up: where its model is, its question, and what guesses step starts."""

    url: str
    question: str
    speculate: bool
    foresight: Foresight | None


Adapter = Callable[[Run, Session], Awaitable[Outcome]]


def _client(run: Run) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=run.url + "/v1", api_key="-", max_retries=0)


def _predict(run: Run) -> Foresight | bool:
    return run.foresight if run.foresight is not None else False


async def _tap(run: Run, session: Session) -> Outcome:
    client = _client(run)
    schemas: Any = [t.openai_schema() for t in session.tools.values()]
    messages: list[Any] = [{"role": "user", "content": run.question}]
    outputs: list[Any] = []
    try:
        while True:
            stream = await client.chat.completions.create(model="m", messages=messages, tools=schemas, stream=True)
            tapped = tap(stream, session, speculate=run.speculate, messages=messages, predict=_predict(run))
            async for _ in tapped:
                pass
            calls = tapped.tool_calls
            messages.append({"role": "assistant", "content": tapped.text or None, **({"tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}} for c in calls]}
                if calls else {})})
            if not calls:
                return (*outputs, tapped.text)
            for c in calls:
                assert c.call is not None
                result = await session.execute(c.call)
                outputs.append(result)
                messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(result)})
    finally:
        await client.close()


async def _agent(run: Run, session: Session) -> Outcome:
    client = _client(run)
    predictors: list[Any] = []
    if run.foresight is not None:
        predictors = list(run.foresight.predictors_for(session))
    agent = Agent(client, "m", list(session.tools.values()), cast(Runtime, session.runtime), speculate=run.speculate,
                  predictors=predictors)
    try:
        result = await agent.run([{"role": "user", "content": run.question}])
    finally:
        await agent.close()
        await client.close()
    return (*(r.output for r in result.tool_records), result.final_text)


async def _openai_agents(run: Run, session: Session) -> Outcome:
    import agents
    from agents.models.openai_responses import OpenAIResponsesModel

    from forethought.integrations.openai_agents import ForethoughtModel, agents_tools

    agents.set_tracing_disabled(True)
    client = _client(run)
    model = ForethoughtModel(OpenAIResponsesModel("m", client), session, speculate=run.speculate,
                             predict=_predict(run))
    agent = agents.Agent(name="research", tools=agents_tools(session), model=model)
    try:
        result = await agents.Runner.run(agent, run.question, max_turns=20)
    finally:
        await client.close()
    return (*(i.output for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)), result.final_output)


async def _langgraph(run: Run, session: Session) -> Outcome:
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from forethought.integrations.langgraph import ForethoughtToolNode

    client = _client(run)
    schemas: Any = [t.openai_schema() for t in session.tools.values()]

    async def model(state: MessagesState) -> dict[str, Any]:
        messages: Any = convert_to_openai_messages(state["messages"])
        stream: Any = await client.chat.completions.create(model="m", messages=messages, tools=schemas, stream=True)
        tapped = tap(stream, session, speculate=run.speculate, messages=messages, predict=_predict(run))
        async for _ in tapped:
            pass
        calls = [{"name": c.name, "args": dict(c.call.arguments) if c.call else {}, "id": c.id}
                 for c in tapped.tool_calls]
        return {"messages": [AIMessage(content=tapped.text, tool_calls=calls)]}

    graph: Any = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ForethoughtToolNode(session))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    try:
        state = await graph.compile().ainvoke({"messages": [("user", run.question)]}, {"recursion_limit": 40})
    finally:
        await client.close()
    tool_messages = [str(m.content) for m in state["messages"][1:] if type(m).__name__ == "ToolMessage"]
    return (*tool_messages, str(state["messages"][-1].content))


async def _pydantic_ai(run: Run, session: Session) -> Outcome:
    import pydantic_ai
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from forethought.integrations.pydantic_ai import ForethoughtToolset, TappedModel

    client = _client(run)
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=run.speculate, predict=_predict(run))
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    try:
        result = await agent.run(run.question)
    finally:
        await client.close()
    returns = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    return (*returns, result.output)


ADAPTERS: dict[str, Adapter] = {"tap": _tap, "agent": _agent, "openai-agents": _openai_agents,
                                "langgraph": _langgraph, "pydantic-ai": _pydantic_ai}
_NEEDS = {"openai-agents": "agents", "langgraph": "langgraph", "pydantic-ai": "pydantic_ai"}


def skipped_reason(adapter: str) -> str | None:
    """Why ``adapter`` cannot run here (its framework is not installed), or ``None``."""
    module = _NEEDS.get(adapter)
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed (pip install 'forethought[integrations]')"
    return None


@dataclass(frozen=True)
class TaskParams:
    """The task's timing and the benchmark's shape."""

    repeats: int = 5
    warmup: int = 4
    tool_s: float = 0.5
    think_s: float = 0.5
    ttft_s: float = 0.1
    chunk_s: float = 0.02


class _Hits:
    """Counts HIT events by source (what served each claimed call)."""

    def __init__(self) -> None:
        self.by_source: collections.Counter[str] = collections.Counter()

    def __call__(self, event: Event) -> None:
        if event.kind is EventKind.HIT:
            self.by_source[event.source] += 1


async def timed(adapter: Adapter, run: Run, runtime: Runtime, all_variants: list[Variant],
                params: TaskParams) -> tuple[float, Outcome]:
    """One run of ``adapter`` in a new session of ``runtime`` (tools over ``all_variants``): its wall time
    and what it produced."""
    session = runtime.session(tools=task_tools(all_variants, params.tool_s))
    started = time.perf_counter()
    try:
        outcome = await adapter(run, session)
    finally:
        elapsed = time.perf_counter() - started
        await session.close()
    return elapsed, outcome


def _spread(values: list[float]) -> list[float]:
    return [round(min(values), 3), round(max(values), 3)]


async def run_adapter(name: str, params: TaskParams, store: Path) -> dict[str, Any]:
    """One adapter: warm-up, then ``repeats`` rounds of the three modes (see the module docstring)."""
    all_variants = variants(params.warmup + params.repeats + 1, ttft_s=params.ttft_s, chunk_s=params.chunk_s,
                            think_s=params.think_s)
    adapter = ADAPTERS[name]
    foresight = Foresight(store)
    runtimes = {mode: Runtime() for mode in MODES}
    hits = {mode: _Hits() for mode in MODES}
    for mode, runtime in runtimes.items():
        runtime.telemetry.subscribe(hits[mode])
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    equal = True
    async with serve_variants(all_variants) as urls:
        first = all_variants[0]
        await timed(adapter, Run(urls[0], first.question, False, None), Runtime(), all_variants, params)  # imports
        for n in range(params.warmup):
            variant = all_variants[1 + n]
            await timed(adapter, Run(urls[1 + n], variant.question, True, foresight), runtimes["forethought"],
                         all_variants, params)
        for mode in MODES:
            hits[mode].by_source.clear()
        for r in range(params.repeats):
            index = 1 + params.warmup + r
            variant = all_variants[index]
            order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
            outcomes: dict[str, Outcome] = {}
            for mode in order:
                chosen = {"direct": None, "forethought": foresight,
                          "oracle": Foresight(with_patterns=False, speculators=[OraclePredictor(variant)])}[mode]
                run = Run(urls[index], variant.question, mode != "direct", chosen)
                wall, outcomes[mode] = await timed(adapter, run, runtimes[mode], all_variants, params)
                walls[mode].append(wall)
            equal = equal and outcomes["forethought"] == outcomes["direct"] == outcomes["oracle"]
    foresight.close()
    medians = {mode: statistics.median(walls[mode]) for mode in MODES}
    saved = {mode: 1 - medians[mode] / medians["direct"] for mode in MODES}
    return {
        **{f"{mode}_s": round(medians[mode], 3) for mode in MODES},
        **{f"{mode}_spread_s": _spread(walls[mode]) for mode in MODES},
        "forethought_saved": round(saved["forethought"], 3), "oracle_saved": round(saved["oracle"], 3),
        "of_oracle": round(saved["forethought"] / saved["oracle"], 3) if saved["oracle"] > 0 else None,
        "hits": {mode: dict(hits[mode].by_source) for mode in MODES},
        "equivalent": equal, "runs": params.repeats, "warmup": params.warmup}


async def run_adapters(names: list[str], params: TaskParams) -> dict[str, Any]:
    """Every adapter in ``names`` (see the module docstring), one after another."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="forethought-adapters-") as tmp:
        for name in names:
            skipped = skipped_reason(name)
            if skipped is not None:
                results[name] = {"skipped": skipped}
                continue
            results[name] = await run_adapter(name, params, Path(tmp) / f"{name}.sqlite")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m forethought.bench.adapters", description=__doc__.split("\n")[0])
    parser.add_argument("--adapters", default=",".join(ADAPTERS), help="comma-separated: " + ", ".join(ADAPTERS))
    parser.add_argument("--repeats", type=int, default=TaskParams.repeats)
    parser.add_argument("--warmup", type=int, default=TaskParams.warmup, help="learning runs before timing")
    parser.add_argument("--tool-s", type=float, default=TaskParams.tool_s, help="seconds per tool call")
    parser.add_argument("--think-s", type=float, default=TaskParams.think_s, help="model text before each call")
    parser.add_argument("--ttft-s", type=float, default=TaskParams.ttft_s)
    parser.add_argument("--chunk-s", type=float, default=TaskParams.chunk_s, help="seconds between streamed pieces")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    names = [a for a in args.adapters.split(",") if a]
    unknown = sorted(set(names) - set(ADAPTERS))
    if unknown:
        parser.error(f"unknown adapters {unknown}")
    params = TaskParams(args.repeats, args.warmup, args.tool_s, args.think_s, args.ttft_s, args.chunk_s)
    results = asyncio.run(run_adapters(names, params))
    print(f"{'adapter':<14} {'direct s':>9} {'forethought s':>14} {'oracle s':>9} {'saved':>6} {'oracle':>7} "
          f"{'of oracle':>9}  equal  spreads (direct | forethought | oracle)")
    for name, row in results.items():
        if "skipped" in row:
            print(f"{name:<14} skipped: {row['skipped']}")
            continue
        share = "-" if row["of_oracle"] is None else f"{row['of_oracle']:.2f}"
        spreads = " | ".join(f"{row[f'{m}_spread_s'][0]:.2f}-{row[f'{m}_spread_s'][1]:.2f}" for m in MODES)
        print(f"{name:<14} {row['direct_s']:>9.3f} {row['forethought_s']:>14.3f} {row['oracle_s']:>9.3f} "
              f"{row['forethought_saved']:>6.0%} {row['oracle_saved']:>7.0%} {share:>9}  {row['equivalent']!s:<5}  "
              f"{spreads}")
    if args.json_path:
        write_json(args.json_path, document("bench-adapters", {"adapters": names, **asdict(params)},
                                            {"adapters": results}))


if __name__ == "__main__":
    main()
