"""Serial vs speculative through each adapter: the tap, the Agent, OpenAI Agents SDK, LangGraph, pydantic-ai.

One scripted multi-step task with slow tools (a scripted model on loopback, :mod:`forethought.serve.scripted`):
two tool steps, each with three lookups (READ_ONLY, ``tool_s`` each) and a long note (a write, never run
early), then the answer. Every arm runs the same framework code twice, ``speculate=False`` and ``True``,
interleaved for ``repeats`` rounds; the report gives median wall times, their spread (min-max), the time
saved, and whether every run's tool outputs and final text were identical to the serial run's.

Run: ``python -m forethought.bench.adapters --repeats 5 --json reports/adapters.json``. An arm whose
framework is not installed is skipped with that reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import openai

from forethought._core.runtime import Runtime, Session
from forethought._core.tools import Effect, Tool, tool
from forethought.agent.loop import Agent
from forethought.bench.report import document, write_json
from forethought.integrations.tap import tap
from forethought.serve.scripted import serve_scripted

NOTE = "Oslo 24 C, Lima 24 C, Cairo 25 C: Cairo is the warmest of the three cities today, Oslo and Lima tie."
Outcome = tuple[Any, ...]
"""What a run produced, compared across arms and modes: tool outputs in order and the final text."""


def task_script(ttft_s: float = 0.1, chunk_s: float = 0.02) -> dict[str, Any]:
    """The scripted task: two steps of three lookups and a note, then the answer."""
    def step(cities: tuple[str, ...]) -> dict[str, Any]:
        return {"text": "Looking up.", "calls": [*({"name": "lookup", "arguments": {"city": c}} for c in cities),
                                                 {"name": "note", "arguments": {"text": NOTE}}]}

    return {"ttft_s": ttft_s, "chunk_s": chunk_s, "fragment_chars": 5,
            "responses": [step(("Oslo", "Lima", "Cairo")), step(("Quito", "Perth", "Hanoi")),
                          {"text": "Cairo is the warmest."}]}


def task_tools(tool_s: float) -> list[Tool]:
    """Fresh tools for one run: a slow read and a quick write."""
    @tool(effect=Effect.READ_ONLY)
    async def lookup(city: str) -> dict[str, Any]:
        """Temperature of a city."""
        await asyncio.sleep(tool_s)
        return {"city": city, "celsius": 20 + len(city)}

    @tool
    async def note(text: str) -> str:
        """Keep a note."""
        await asyncio.sleep(tool_s / 8)
        return f"noted {len(text)} characters"

    return [lookup, note]


# --- the arms: each runs the task once and returns what it produced --------------------------------------


async def _tap(url: str, session: Session, speculate: bool) -> Outcome:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    schemas: Any = [t.openai_schema() for t in session.tools.values()]
    messages: list[Any] = [{"role": "user", "content": "Which city is warmest?"}]
    outputs: list[Any] = []
    try:
        while True:
            stream = await client.chat.completions.create(model="m", messages=messages, tools=schemas, stream=True)
            tapped = tap(stream, session, speculate=speculate)
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


async def _agent(url: str, session: Session, speculate: bool) -> Outcome:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    agent = Agent(client, "m", list(session.tools.values()), cast(Runtime, session.runtime), speculate=speculate)
    try:
        result = await agent.run([{"role": "user", "content": "Which city is warmest?"}])
    finally:
        await agent.close()
        await client.close()
    return (*(r.output for r in result.tool_records), result.final_text)


async def _openai_agents(url: str, session: Session, speculate: bool) -> Outcome:
    import agents
    from agents.models.openai_responses import OpenAIResponsesModel

    from forethought.integrations.openai_agents import ForethoughtModel, agents_tools

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    agent = agents.Agent(name="weather", tools=agents_tools(session),
                         model=ForethoughtModel(OpenAIResponsesModel("m", client), session, speculate=speculate))
    try:
        result = await agents.Runner.run(agent, "Which city is warmest?")
    finally:
        await client.close()
    return (*(i.output for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)), result.final_output)


async def _langgraph(url: str, session: Session, speculate: bool) -> Outcome:
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from forethought.integrations.langgraph import ForethoughtToolNode

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    schemas: Any = [t.openai_schema() for t in session.tools.values()]

    async def model(state: MessagesState) -> dict[str, Any]:
        messages: Any = convert_to_openai_messages(state["messages"])
        stream: Any = await client.chat.completions.create(model="m", messages=messages, tools=schemas, stream=True)
        tapped = tap(stream, session, speculate=speculate)
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
        state = await graph.compile().ainvoke({"messages": [("user", "Which city is warmest?")]})
    finally:
        await client.close()
    tool_messages = [str(m.content) for m in state["messages"][1:] if type(m).__name__ != "AIMessage"]
    return (*tool_messages, str(state["messages"][-1].content))


async def _pydantic_ai(url: str, session: Session, speculate: bool) -> Outcome:
    import pydantic_ai
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from forethought.integrations.pydantic_ai import ForethoughtToolset, TappedModel

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=speculate)
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    try:
        result = await agent.run("Which city is warmest?")
    finally:
        await client.close()
    returns = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    return (*returns, result.output)


ARMS: dict[str, Callable[[str, Session, bool], Awaitable[Outcome]]] = {
    "tap": _tap, "agent": _agent, "openai-agents": _openai_agents, "langgraph": _langgraph,
    "pydantic-ai": _pydantic_ai}
_NEEDS = {"openai-agents": "agents", "langgraph": "langgraph", "pydantic-ai": "pydantic_ai"}


def _installed(arm: str) -> str | None:
    module = _NEEDS.get(arm)
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed (pip install 'forethought[integrations]')"
    return None


async def run_adapters(arms: list[str], repeats: int, tool_s: float, ttft_s: float, chunk_s: float) -> dict[str, Any]:
    """Each arm, serial and speculative interleaved ``repeats`` times (see the module docstring)."""
    results: dict[str, Any] = {}
    async with serve_scripted(task_script(ttft_s, chunk_s)) as url:
        for arm in arms:
            skipped = _installed(arm)
            if skipped is not None:
                results[arm] = {"skipped": skipped}
                continue
            walls: dict[bool, list[float]] = {False: [], True: []}
            outcomes: dict[bool, list[Outcome]] = {False: [], True: []}
            await ARMS[arm](url, Runtime().session(tools=task_tools(0.0)), False)  # warm-up: imports, pools
            for _ in range(repeats):
                for speculate in (False, True):
                    session = Runtime().session(tools=task_tools(tool_s))
                    start = time.perf_counter()
                    outcomes[speculate].append(await ARMS[arm](url, session, speculate))
                    walls[speculate].append(time.perf_counter() - start)
                    await session.close()
            serial, spec = statistics.median(walls[False]), statistics.median(walls[True])
            reference = outcomes[False][0]
            results[arm] = {
                "serial_s": round(serial, 3), "speculative_s": round(spec, 3),
                "time_saved": round(1 - spec / serial, 3),
                "serial_spread_s": [round(min(walls[False]), 3), round(max(walls[False]), 3)],
                "speculative_spread_s": [round(min(walls[True]), 3), round(max(walls[True]), 3)],
                "equivalent": all(o == reference for o in outcomes[False] + outcomes[True]),
                "runs": repeats}
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m forethought.bench.adapters", description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated: " + ", ".join(ARMS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tool-s", type=float, default=0.3, help="seconds per lookup")
    parser.add_argument("--ttft-s", type=float, default=0.1)
    parser.add_argument("--chunk-s", type=float, default=0.02, help="seconds between streamed pieces")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arms {unknown}")
    results = asyncio.run(run_adapters(arms, args.repeats, args.tool_s, args.ttft_s, args.chunk_s))
    print(f"{'arm':<14} {'serial s':>9} {'spec s':>8} {'saved':>6}  serial min-max  spec min-max  equal")
    for arm, row in results.items():
        if "skipped" in row:
            print(f"{arm:<14} skipped: {row['skipped']}")
            continue
        print(f"{arm:<14} {row['serial_s']:>9.3f} {row['speculative_s']:>8.3f} {row['time_saved']:>6.0%}  "
              f"{row['serial_spread_s'][0]:.3f}-{row['serial_spread_s'][1]:.3f}   "
              f"{row['speculative_spread_s'][0]:.3f}-{row['speculative_spread_s'][1]:.3f}  {row['equivalent']}")
    if args.json_path:
        params = {"arms": arms, "repeats": args.repeats, "tool_s": args.tool_s, "ttft_s": args.ttft_s,
                  "chunk_s": args.chunk_s}
        write_json(args.json_path, document("bench-adapters", params, {"arms": results}))


if __name__ == "__main__":
    main()
