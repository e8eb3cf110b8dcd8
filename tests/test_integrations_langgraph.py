"""LangGraph adapter: a real StateGraph (model node tapping the openai stream, ForethoughtToolNode) on loopback.

Serial (the tap passes the stream through, nothing starts early) and speculative runs of the same graph
give the same messages; in the speculative run the reads were claimed from the stream's early starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (forethought[integrations])")

import openai
from langchain_core.messages import AIMessage, convert_to_openai_messages
from langchain_core.tools import InjectedToolCallId
from langchain_core.tools import tool as lc_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from adapter_tools import lookup_and_note_session, patterns_in_tmp  # noqa: F401 - patterns_in_tmp: a fixture
from forethought import Effect, Runtime, Session, ToolCall, tool
from forethought.integrations import ForethoughtToolNode, tap
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.001, "fragment_chars": 6, "responses": [
    {"text": "Looking.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}},
                                   {"name": "lookup", "arguments": {"city": "Lima"}}]},
    {"text": "", "calls": [{"name": "note", "arguments": {"text": "both 24"}}, {"name": "nope", "arguments": {}}]},
    {"text": "Oslo and Lima are both 24."}]}


def _session() -> tuple[Session, list[str]]:
    return lookup_and_note_session()


def _graph(url: str, session: Session, speculate: bool) -> Any:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    schemas = [t.openai_schema() for t in session.tools.values()]

    async def model(state: MessagesState) -> dict[str, Any]:
        stream = await client.chat.completions.create(model="m", messages=convert_to_openai_messages(state["messages"]),
                                                      tools=schemas, stream=True)
        return await _message(tap(stream, session, speculate=speculate))

    return _model_and_tools(model, ForethoughtToolNode(session))


async def _message(tapped: Any) -> dict[str, Any]:
    """The model node's update: the tapped stream read to its end, as one AI message."""
    async for _ in tapped:
        pass
    calls = [{"name": c.name, "args": dict(c.call.arguments) if c.call else {}, "id": c.id}
             for c in tapped.tool_calls]
    return {"messages": [AIMessage(content=tapped.text, tool_calls=calls)]}


def _model_and_tools(model: Any, tools: ForethoughtToolNode) -> Any:
    """The agent graph: the model node, then the tools while it calls any, compiled."""
    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


async def _run(url: str, speculate: bool) -> tuple[list[tuple[str, str]], list[str], Any]:
    session, ran = _session()
    state = await _graph(url, session, speculate).ainvoke({"messages": [("user", "Weather in Oslo and Lima?")]})
    stats = session.stats()
    await session.close()
    return [(type(m).__name__, str(m.content)) for m in state["messages"]], ran, stats


async def test_graph_serial_equals_speculative(server: str) -> None:
    serial, serial_ran, serial_stats = await _run(server, speculate=False)
    spec, ran, stats = await _run(server, speculate=True)
    assert spec == serial
    assert spec[-1] == ("AIMessage", "Oslo and Lima are both 24.")
    tool_messages = [text for kind, text in spec if kind == "ToolMessage"]
    assert tool_messages[:3] == ['{"city": "Oslo", "temp": 24}', '{"city": "Lima", "temp": 24}', "ok"]
    assert "nope" in tool_messages[3]  # an unknown tool is answered by the node, as LangGraph does
    assert sorted(ran) == sorted(serial_ran) and ran.count("note:both 24") == 1
    assert serial_stats.hits == 0 and stats.hits == 2


# --- LangGraph's own behaviour, with and without forethought -------------------------------------------------
#
# The native ToolNode over LangChain's ``@tool`` of plain functions, and ForethoughtToolNode over the same
# functions as forethought tools, are given the same model messages; what they return (or raise) must be
# the same, whatever the node's ``handle_tool_errors``.

import json  # noqa: E402
from typing import Literal  # noqa: E402

from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

from adapter_tools import Rendezvous  # noqa: E402


async def weather(city: str, units: Literal["c", "f"] = "c", days: int = 1) -> dict[str, Any]:
    """Weather of a city.

    Args:
        city: The city's name.
        units: Celsius or Fahrenheit.
    """
    return {"zone": "CET", "city": city, "temp": 24 if units == "c" else 75, "days": days}


def tags(names: list[str], note: str | None = None) -> list[Any]:
    """Tags, sorted (a sync tool returning a list)."""
    return [sorted(names), note]


def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"no such place: {reason}")


FUNCTIONS = [weather, tags, fail]


def _node(mode: str, functions: list[Any] = FUNCTIONS, **options: Any) -> tuple[Any, Session | None]:
    if mode == "native":
        return ToolNode([lc_tool(f) for f in functions], **options), None
    session = Runtime().session(tools=[tool(f, effect=Effect.READ_ONLY) for f in functions])
    return ForethoughtToolNode(session, **options), session


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    tool_calls = [{"name": name, "args": args, "id": f"call-{n}"} for n, (name, args) in enumerate(calls)]
    return {"messages": [AIMessage(content="", tool_calls=tool_calls)]}


def _alone(node: Any) -> Any:
    """A graph of the node alone (a ToolNode runs inside a graph, with its runtime)."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


async def _outcome(mode: str, state: dict[str, Any], **options: Any) -> Any:
    node, session = _node(mode, **options)
    try:
        result = await _alone(node).ainvoke(state)
        return [(type(m).__name__, m.content, m.tool_call_id, m.name, m.status) for m in result["messages"][1:]]
    except Exception as exc:  # compared across modes
        return (type(exc), str(exc))
    finally:
        if session is not None:
            await session.close()


def test_tools_are_built_as_langchains_tool_builds_them() -> None:
    native, _ = _node("native")
    ours, _ = _node("forethought")
    assert [convert_to_openai_tool(t) for t in ours.tools_by_name.values()] == \
        [convert_to_openai_tool(t) for t in native.tools_by_name.values()]


CASES = {
    "dict-output": _calls(("weather", {"city": "Oslo"})),
    "list-output": _calls(("tags", {"names": ["b", "a"]})),
    "defaults-given": _calls(("weather", {"city": "Lima", "units": "f", "days": 3})),
    "tool-raises": _calls(("fail", {"reason": "Atlantis"})),
    "raises-among-others": _calls(("weather", {"city": "Oslo"}), ("fail", {"reason": "x"}), ("tags", {"names": []})),
    "missing-argument": _calls(("weather", {})),
    "wrong-type": _calls(("weather", {"city": "Oslo", "days": "many"})),
    "bad-literal": _calls(("weather", {"city": "Oslo", "units": "k"})),
    "extra-argument": _calls(("weather", {"city": "Oslo", "wind": True})),
    "unknown-tool": _calls(("nope", {"x": 1})),
    "several": _calls(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"}), ("tags", {"names": ["z"]})),
}
HANDLERS: dict[str, Any] = {"default": {}, "true": {"handle_tool_errors": True},
                            "text": {"handle_tool_errors": "Sorry, that failed."},
                            "callable": {"handle_tool_errors": lambda e: f"caught {type(e).__name__}: {e}"},
                            "only-value-error": {"handle_tool_errors": (ValueError,)},
                            "only-type-error": {"handle_tool_errors": (TypeError,)},
                            "false": {"handle_tool_errors": False}}


@pytest.mark.parametrize("handler", sorted(HANDLERS))
@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_node_answers_and_raises_where_tool_node_does(case: str, handler: str) -> None:
    native = await _outcome("native", CASES[case], **HANDLERS[handler])
    ours = await _outcome("forethought", CASES[case], **HANDLERS[handler])
    assert ours == native
    if case == "tool-raises" and handler in ("default", "false", "only-type-error"):
        assert native == (ValueError, "no such place: Atlantis")  # LangGraph's ToolNode raises it


@pytest.mark.parametrize("mode", ["native", "forethought"])
async def test_calls_of_one_message_run_at_once_with_the_models_ids(mode: str) -> None:
    meeting = Rendezvous(3)

    async def probe(n: int) -> str:
        """Meets the other calls."""
        return json.dumps({"n": n, "met": await meeting.meet()})

    node, session = _node(mode, [probe])
    result = await _alone(node).ainvoke(_calls(*(("probe", {"n": n}) for n in range(3))))
    assert [(m.tool_call_id, m.content) for m in result["messages"][1:]] == \
        [(f"call-{n}", json.dumps({"n": n, "met": True})) for n in range(3)]
    if session is not None:
        await session.close()


async def test_a_tool_given_by_its_author_runs_through_the_session_with_its_own_schema() -> None:
    session = Runtime().session(tools=[tool(weather, effect=Effect.READ_ONLY)])
    node = ForethoughtToolNode(session, tools=[lc_tool(weather), lc_tool(tags)])
    call = ToolCall("weather", {"city": "Oslo"})
    assert session.speculate(call).status == "launched"
    await session.wait_speculations(5.0)
    result = await _alone(node).ainvoke(_calls(("weather", {"city": "Oslo"}), ("tags", {"names": ["q"]})))
    assert [m.content for m in result["messages"][1:]] == [
        json.dumps(await weather("Oslo"), ensure_ascii=False), json.dumps([["q"], None])]
    assert session.stats().hits == 1  # the speculation was claimed by the node's call
    await session.close()


async def test_a_tool_with_an_injected_argument_runs_as_it_is() -> None:
    """Before, a given tool with an injected argument (``InjectedToolCallId``) was replaced by the session's
    tool of its name, which was handed the call id and refused it (found by an outside review, 2026-12-05)."""

    @tool(effect=Effect.READ_ONLY, name="lookup_q")
    def session_lookup(q: str) -> str:
        """Look up."""
        return "session:" + q

    message = AIMessage(content="", tool_calls=[{"name": "lookup_q", "args": {"q": "x"}, "id": "call_1",
                                                 "type": "tool_call"}])
    native = await _alone(ToolNode([_knows_its_call])).ainvoke({"messages": [message]})
    session = Runtime([session_lookup]).session()
    ours = await _alone(ForethoughtToolNode(session, tools=[_knows_its_call])).ainvoke({"messages": [message]})
    assert [m.content for m in ours["messages"][1:]] == [m.content for m in native["messages"][1:]] \
        == ["given:x:call_1"]
    await session.close()


@lc_tool("lookup_q")
def _knows_its_call(q: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Look up, knowing the call's id."""
    return f"given:{q}:{tool_call_id}"


_BANK = {"balance": 0}


@tool(effect=Effect.READ_ONLY)
def read_balance() -> int:
    """The balance."""
    return _BANK["balance"]


@tool(effect=Effect.DESTRUCTIVE, name="deposit")
def session_deposit(amount: int) -> str:
    """Deposit (the session's version)."""
    _BANK["balance"] += amount
    return "ok"


@lc_tool("deposit")
def _deposit_knowing_its_call(amount: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Deposit, knowing the call's id (the author's own tool, given to the node)."""
    _BANK["balance"] += amount
    return f"ok:{tool_call_id}"


async def test_a_given_write_under_a_session_tool_s_name_holds_back_reads_guessed_before_it() -> None:
    """The node runs a given tool with an injected argument as it is, outside the session, under the name of
    a session tool. Before, the tap took its calls for the session's: no fence went up, and a read guessed at
    step start, before the deposit ran, was served to the next step (found by an outside review, 2026-12-05)."""
    from forethought.integrations.foresight import Foresight
    from forethought.integrations.langgraph import langchain_tool
    from forethought.predictors.base import ObservedCall, Prediction, PredictionContext

    class Always:
        name = "always"

        async def predict(self, context: PredictionContext) -> list[Prediction]:
            return [Prediction(ToolCall("read_balance", {}), 0.95, self.name)]

        def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
            return None

    def chunk(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                                                    "function": {"name": name,
                                                                                 "arguments": arguments}}]},
                             "finish_reason": None}]}

    async def run(speculate: bool) -> list[tuple[str | None, Any]]:
        _BANK["balance"] = 0
        session = Runtime([read_balance, session_deposit]).session()
        foresight = Foresight(None, with_patterns=False, speculators=[Always()])
        steps = [("d1", "deposit", '{"amount": 100}'), ("r1", "read_balance", "{}"), None]

        async def model(state: MessagesState) -> dict[str, Any]:
            step = steps[sum(m.type == "ai" for m in state["messages"])]

            async def stream() -> AsyncIterator[dict[str, Any]]:
                if step is not None:
                    yield chunk(*step)
                await asyncio.sleep(0.02)  # the guesses run while the model is still generating
                yield {"choices": [{"index": 0, "delta": {"content": "" if step else "done"},
                                    "finish_reason": "tool_calls" if step else "stop"}]}

            return await _message(tap(stream(), session, speculate=speculate,
                                      messages=[{"role": "user", "content": "go"}],
                                      predict=foresight if step is not None and step[0] == "d1" else False))

        graph = _model_and_tools(model, ForethoughtToolNode(session, tools=[
            _deposit_knowing_its_call, langchain_tool(session, read_balance)]))
        out = await graph.ainvoke({"messages": [("user", "deposit 100, then read")]})
        await session.close()
        return [(m.name, m.content) for m in out["messages"] if m.type == "tool"]

    serial = await run(False)
    assert serial == [("deposit", "ok:d1"), ("read_balance", "100")]
    assert await run(True) == serial
