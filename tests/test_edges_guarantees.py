"""The tap and the adapters keep the core's guarantees where only the caller's loop knows what happened.

Found by an outside review (2026-12-05, scripts in its scratch folder; each reproduced on the code before):
a read served from before a write of a tool the session does not hold; calls of tools the session cannot
vouch for learned and saved; a conversation too deeply nested to parse failing the step; a turn budget
never renewed after a finished message (used up for good after 64 calls). Two reviews of the fixes gave the
cases at the end: other conversations, reads around the foreign call, two streams of one session, the
serial arm, a guess that outlives its message, a caller that stops reading at the finish, items the caller
runs that are not function calls, pydantic-ai with step-start guesses;
LangGraph handing a tool's injected arguments to the session (in tests/test_integrations_langgraph.py).
Each case runs serial (``speculate=False``) and speculative side by side; what the caller sees must agree.
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from forethought import Effect, Policy, Runtime, ToolCall, ToolPolicy, tool
from forethought.integrations import tap
from forethought.integrations.foresight import Foresight
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext

ACCOUNT = {"balance": 0}


@tool(effect=Effect.READ_ONLY)
def read_balance() -> int:
    """The balance."""
    return ACCOUNT["balance"]


def deposit(amount: int) -> str:
    """One of the caller's own tools (not the session's): a write."""
    ACCOUNT["balance"] += amount
    return "ok"


def _chunk(i: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                                                "function": {"name": name, "arguments": arguments}}]},
                         "finish_reason": None}]}


_END = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}


class Always:
    """A speculator that guesses the same calls at every step start."""

    name = "always"

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = calls

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(call, 0.95, self.name) for call in self.calls]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


async def _deposit_then_read(speculate: bool, guess_at_start: bool) -> list[tuple[str, Any]]:
    ACCOUNT["balance"] = 0
    session = Runtime([read_balance]).session()

    async def stream() -> AsyncIterator[dict[str, Any]]:
        yield _chunk(0, "d1", "deposit", '{"amount": 100}')
        yield _chunk(1, "r1", "read_balance", "{}")
        await asyncio.sleep(0.02)  # the guesses run while the model is still generating
        yield _END

    predict: Any = Foresight(None, with_patterns=False, speculators=[Always(ToolCall("read_balance", {}))]) \
        if guess_at_start else False
    tapped = tap(stream(), session, speculate=speculate, messages=[{"role": "user", "content": "go"}],
                 predict=predict)
    async for _ in tapped:
        pass
    results: list[tuple[str, Any]] = []
    for call in tapped.tool_calls:  # the caller's loop, in the model's order
        if call.name in session.tools:
            assert call.call is not None
            results.append((call.name, await session.execute(call.call)))
        else:
            results.append((call.name, deposit(**json.loads(call.raw))))
    await session.close()
    return results


@pytest.mark.parametrize("guess_at_start", [False, True])
async def test_a_read_after_a_write_of_a_tool_the_session_does_not_hold_sees_the_write(guess_at_start: bool) -> None:
    """Before, the read was speculated as its arguments closed (or guessed at step start), before the caller
    ran the write, and served after it: the model was shown the balance from before the deposit."""
    serial = await _deposit_then_read(False, guess_at_start)
    assert serial == [("deposit", "ok"), ("read_balance", 100)]
    assert await _deposit_then_read(True, guess_at_start) == serial


async def test_the_same_read_through_pydantic_ai_sees_the_write() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset

    from forethought.integrations import ForethoughtToolset, TappedModel
    from forethought.integrations.pydantic_ai import pydantic_tool

    async def model(messages: list[Any], info: Any) -> AsyncIterator[Any]:
        if not any(m.kind == "response" for m in messages):
            yield {0: DeltaToolCall(name="deposit", json_args='{"amount": 100}', tool_call_id="d1")}
            yield {1: DeltaToolCall(name="read_balance", json_args="{}", tool_call_id="r1")}
            await asyncio.sleep(0.02)
            yield "checking"
        else:
            yield "done"

    async def run(speculate: bool) -> list[tuple[str, Any]]:
        ACCOUNT["balance"] = 0
        session = Runtime([read_balance]).session()
        inner = FunctionToolset([pydantic_tool(session, read_balance), PydanticTool(deposit, sequential=True)])
        agent = Agent(TappedModel(FunctionModel(stream_function=model), session, speculate=speculate, predict=False),
                      toolsets=[ForethoughtToolset(wrapped=inner, session=session)])
        result = await agent.run("deposit 100 and tell me my balance")
        await session.close()
        return [(p.tool_name, p.content) for m in result.all_messages() for p in getattr(m, "parts", [])
                if p.part_kind == "tool-return"]

    serial = await run(False)
    assert serial == [("deposit", "ok"), ("read_balance", 100)]
    assert await run(True) == serial


# --- what step-start prediction learns ------------------------------------------------------------------

SECRET = "ACCT-TOKEN-9f8e7d6c"


@tool(effect=Effect.READ_ONLY)
def weather(city: str) -> str:
    """The weather."""
    return f"sunny in {city}"


def _conversation(private_name: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "check my account and the weather"}]
    for i in range(3):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"v{i}", "type": "function",
                 "function": {"name": private_name, "arguments": json.dumps({"token": SECRET})}}]},
            {"role": "tool", "tool_call_id": f"v{i}", "content": "BALANCE-424242"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"w{i}", "type": "function",
                 "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": f"w{i}", "content": "sunny in Paris"},
        ]
    return messages


@pytest.mark.parametrize("private_name", ["vault_lookup", "acct_weather", "weather_private"])
async def test_calls_of_tools_the_session_cannot_vouch_for_are_never_learned_or_saved(
        tmp_path: Path, private_name: str) -> None:
    """Before, a tool the policy marks private but the framework runs outside the session (or a session tool
    offered under another name) was learned from the conversation and saved to the pattern store."""
    runtime = Runtime([weather], Policy(tools={private_name: ToolPolicy(private=True)}))
    session = runtime.session()
    path = tmp_path / "patterns.sqlite"
    foresight = Foresight(path)
    foresight.begin(session, _conversation(private_name))
    foresight.end(session)
    foresight.close()
    await session.close()
    assert SECRET.encode() not in path.read_bytes() and private_name.encode() not in path.read_bytes()
    reloaded = Foresight(path)
    state = pickle.dumps(reloaded.patterns_for({"weather": dict(weather.parameters)}))
    reloaded.close()
    assert SECRET.encode() not in state and private_name.encode() not in state
    assert b"weather" in state  # the session's own public tool is still learned


@pytest.mark.parametrize("depth", [2000, 50_000])
async def test_a_conversation_too_deeply_nested_to_parse_costs_the_step_its_guesses_only(depth: int) -> None:
    """Before, a tool output (or arguments) of deeply nested JSON raised RecursionError out of the tap."""
    @tool(effect=Effect.READ_ONLY)
    def fetch(url: str) -> str:
        """A page."""
        return "["

    session = Runtime([fetch]).session()
    deep = "[" * depth
    messages = [{"role": "user", "content": "fetch it"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": '{"url": "x"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": deep}}]},
                {"role": "tool", "tool_call_id": "c1", "content": deep},
                {"role": "tool", "tool_call_id": "c2", "content": "x"}]

    async def stream() -> AsyncIterator[dict[str, Any]]:
        yield {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}

    tapped = tap(stream(), session, messages=messages, predict=Foresight())
    async for _ in tapped:
        pass
    assert tapped.finished and tapped.text == "ok"
    await session.close()


# --- turns ------------------------------------------------------------------------------------------


@tool(effect=Effect.READ_ONLY, expected_s=0.05)
async def lookup(q: str) -> str:
    """Look up."""
    return q.upper()


def _one_call(i: int) -> AsyncIterator[dict[str, Any]]:
    async def gen() -> AsyncIterator[dict[str, Any]]:
        yield _chunk(0, f"c{i}", "lookup", json.dumps({"q": f"s{i}"}))
        yield _END

    return gen()


async def test_every_tapped_step_starts_a_turn_so_its_budget_never_runs_out() -> None:
    """Before, no turn ever ended: after 64 streamed calls (the default turn budget) nothing more started."""
    session = Runtime([lookup]).session()
    hits = 0
    for i in range(70):
        tapped = tap(_one_call(i), session, predict=False)
        async for _ in tapped:
            pass
        for call in tapped.calls:
            hits += (await session.execute_detailed(call)).kind == "hit"
    assert hits == 70
    await session.close()


# --- a second review: what the first fix of the foreign write broke --------------------------------------

RUNS: list[str] = []
RAN: list[asyncio.Event] = []
"""Set when ``probe`` runs."""


@tool(effect=Effect.READ_ONLY, expected_s=0.05)
async def probe(q: str) -> str:
    """A read that records each run."""
    RUNS.append(q)
    for ran in RAN:
        ran.set()
    await asyncio.sleep(0.01)
    return q.upper()


def _stream(*calls: tuple[str, dict[str, Any]], pause: asyncio.Event | None = None) -> AsyncIterator[dict[str, Any]]:
    async def gen() -> AsyncIterator[dict[str, Any]]:
        for i, (name, arguments) in enumerate(calls):
            yield _chunk(i, f"c{i}", name, json.dumps(arguments))
            await asyncio.sleep(0.02)  # the speculation of a streamed read runs while the model writes on
        if pause is not None:
            await pause.wait()
        yield _END

    return gen()


async def _claims(session: Any, tapped: Any) -> list[str]:
    return [(await session.execute_detailed(c.call)).kind for c in tapped.tool_calls if c.name in session.tools]


async def test_a_conversation_that_ends_on_a_foreign_call_costs_no_other_conversation_a_hit() -> None:
    """The first fix opened a write on the whole runtime that only the same session's next step closed: a
    conversation ending on one of the caller's own tools (pydantic-ai's ``final_result``, a handoff) left
    every later read of every session unserved."""
    runtime = Runtime([probe])
    first = runtime.session()
    ended = tap(_stream(("probe", {"q": "a"}), ("finish", {"answer": "done"})), first, predict=False)
    async for _ in ended:
        pass
    assert await _claims(first, ended) == ["miss"]  # held back by the fence (a cost, see below)
    await first.close()
    for n in range(2):
        other = runtime.session()
        tapped = tap(_stream(("probe", {"q": f"b{n}"})), other, predict=False)
        async for _ in tapped:
            pass
        assert await _claims(other, tapped) == ["hit"]
        await other.close()


async def test_reads_around_a_foreign_call_see_what_serial_sees() -> None:
    """The read after the foreign call runs fresh, after it. The one before it is not served either (the
    fence holds back every read of the session speculated before the next message): it runs again, a cost
    of messages that mix the caller's own tools with the session's, never a different result."""
    RUNS.clear()
    session = Runtime([probe]).session()
    tapped = tap(_stream(("probe", {"q": "x"}), ("notify", {"text": "hi"}), ("probe", {"q": "y"})), session,
                 predict=False)
    async for _ in tapped:
        pass
    assert await _claims(session, tapped) == ["miss", "miss"]
    assert RUNS == ["x", "x", "y"]  # "y" never started early: it comes after the foreign call
    await session.close()


async def test_two_streams_of_one_session_keep_each_others_speculations() -> None:
    """The first fix ended the session's turn at each new stream, dropping the other stream's speculations
    (one pydantic-ai Agent serving two requests at once, parallel graph branches tapping one session)."""
    RUNS.clear()
    session = Runtime([probe]).session()
    hold = asyncio.Event()
    first = tap(_stream(("probe", {"q": "a"}), pause=hold), session, predict=False)

    async def drain(tapped: Any) -> None:
        async for _ in tapped:
            pass

    ran = asyncio.Event()
    RAN.append(ran)
    running = asyncio.create_task(drain(first))
    await ran.wait()  # the first stream's read has been speculated
    RAN.remove(ran)
    second = tap(_stream(("probe", {"q": "b"})), session, predict=False)
    await drain(second)
    hold.set()
    await running
    assert await _claims(session, first) == ["hit"] and await _claims(session, second) == ["hit"]
    assert sorted(RUNS) == ["a", "b"]
    await session.close()


async def test_the_serial_arm_on_the_same_runtime_changes_nothing_for_the_speculative_one() -> None:
    runtime = Runtime([probe])
    serial = runtime.session()
    plain = tap(_stream(("finish", {"answer": "x"})), serial, speculate=False, predict=False)
    async for _ in plain:
        pass
    speculative = runtime.session()
    tapped = tap(_stream(("probe", {"q": "s"})), speculative, predict=False)
    async for _ in tapped:
        pass
    assert await _claims(speculative, tapped) == ["hit"]
    await serial.close()
    await speculative.close()


# --- a third review: what name matching and message ends missed -----------------------------------------


def _always_guess() -> Foresight:
    return Foresight(None, with_patterns=False, speculators=[Always(ToolCall("read_balance", {}))])


async def test_a_guess_made_before_a_foreign_call_never_serves_a_later_message() -> None:
    """A step whose message is only the caller's own tool: its step-start guess of the read must not serve the
    next step's read (before, it stayed in the store and the next stream's speculation joined it)."""
    async def run(speculate: bool) -> list[Any]:
        ACCOUNT["balance"] = 0
        session = Runtime([read_balance]).session()
        first = tap(_stream(("deposit", {"amount": 100})), session, speculate=speculate,
                    messages=[{"role": "user", "content": "go"}], predict=_always_guess())
        async for _ in first:
            pass
        results: list[Any] = [deposit(100) for _ in first.tool_calls]
        second = tap(_stream(("read_balance", {})), session, speculate=speculate, predict=False)
        async for _ in second:
            pass
        results += [await session.execute(call) for call in second.calls]
        await session.close()
        return results

    assert await run(True) == await run(False) == ["ok", 100]


async def test_a_caller_that_stops_reading_at_the_finish_still_sees_its_write() -> None:
    async def run(speculate: bool) -> list[Any]:
        ACCOUNT["balance"] = 0
        session = Runtime([read_balance]).session()
        tapped = tap(_stream(("deposit", {"amount": 100}), ("read_balance", {})), session, speculate=speculate,
                     messages=[{"role": "user", "content": "go"}], predict=_always_guess())
        async for chunk in tapped:
            if chunk["choices"][0]["finish_reason"]:
                break  # the stream is never read to its end
        results: list[Any] = []
        for call in tapped.tool_calls:
            if call.name in session.tools:
                assert call.call is not None
                results.append(await session.execute(call.call))
            else:
                results.append(deposit(**json.loads(call.raw)))
        await session.close()
        return results

    assert await run(True) == await run(False) == ["ok", 100]


def _responses(item: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_r", "name": "read_balance", "arguments": ""}
    events = [{"type": "response.created", "response": {"id": "resp_1"}},
              {"type": "response.output_item.added", "output_index": 0, "item": item},
              {"type": "response.output_item.done", "output_index": 0, "item": item},
              {"type": "response.output_item.added", "output_index": 1, "item": call},
              {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1", "delta": "{}"},
              {"type": "response.output_item.done", "output_index": 1, "item": {**call, "arguments": "{}"}},
              {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}]

    async def gen() -> AsyncIterator[dict[str, Any]]:
        for event in events:
            yield event
            await asyncio.sleep(0.005)

    return gen()


@pytest.mark.parametrize(("item", "held"), [
    ({"type": "custom_tool_call", "id": "ct_1", "call_id": "c", "name": "shell", "input": "deposit"}, True),
    ({"type": "local_shell_call", "id": "ls_1", "call_id": "s", "action": {"type": "exec", "command": ["x"]}}, True),
    ({"type": "computer_call", "id": "cc_1", "call_id": "k", "action": {"type": "click", "x": 1, "y": 2}}, True),
    ({"type": "some_future_call", "id": "f_1", "call_id": "f"}, True),  # a kind nobody knows yet: fail closed
    ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, False),  # run by the API itself
    # The API runs it too, but against a remote MCP server that may write what a session tool reads.
    ({"type": "mcp_call", "id": "mc_1", "server_label": "bank", "name": "deposit", "arguments": "{}"}, True),
])
async def test_an_item_the_caller_runs_that_is_not_a_function_call_holds_later_reads_back(
        item: dict[str, Any], held: bool) -> None:
    """Before, only ``function_call`` items were decoded: a read after a ``custom_tool_call`` the caller runs
    was served from before it."""
    async def run(speculate: bool) -> list[Any]:
        ACCOUNT["balance"] = 0
        session = Runtime([read_balance]).session()
        tapped = tap(_responses(item), session, speculate=speculate, predict=False)
        async for _ in tapped:
            pass
        if held:
            ACCOUNT["balance"] += 100  # the caller runs the item, then the read
        results = [await session.execute_detailed(call) for call in tapped.calls]
        await session.close()
        return [(o.value, o.kind) for o in results]

    serial = await run(False)
    speculative = await run(True)
    assert [value for value, _ in speculative] == [value for value, _ in serial] == [100 if held else 0]
    assert [kind for _, kind in speculative] == ["miss" if held else "hit"]


async def test_pydantic_ai_with_step_start_guesses_sees_the_write_of_its_own_tool() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset

    from forethought.integrations import ForethoughtToolset, TappedModel
    from forethought.integrations.pydantic_ai import pydantic_tool

    async def model(messages: list[Any], info: Any) -> AsyncIterator[Any]:
        steps = sum(m.kind == "response" for m in messages)
        if steps == 0:
            yield {0: DeltaToolCall(name="bank_deposit", json_args='{"amount": 100}', tool_call_id="d1")}
            await asyncio.sleep(0.02)
        elif steps == 1:
            yield {0: DeltaToolCall(name="bank_read_balance", json_args="{}", tool_call_id="r1")}
            await asyncio.sleep(0.02)
        else:
            yield "done"

    async def run(speculate: bool) -> list[tuple[str, Any]]:
        ACCOUNT["balance"] = 0
        session = Runtime([read_balance]).session()
        inner = FunctionToolset([pydantic_tool(session, read_balance), PydanticTool(deposit)])
        agent = Agent(TappedModel(FunctionModel(stream_function=model), session, speculate=speculate,
                                  predict=_always_guess()),
                      toolsets=[ForethoughtToolset(wrapped=inner, session=session).prefixed("bank")])
        result = await agent.run("deposit 100, then tell me my balance")
        await session.close()
        return [(p.tool_name, p.content) for m in result.all_messages() for p in getattr(m, "parts", [])
                if p.part_kind == "tool-return"]

    serial = await run(False)
    assert [content for _, content in serial] == ["ok", 100]
    assert await run(True) == serial


# --- a fourth review: snapshots ------------------------------------------------------------------------


@pytest.mark.parametrize("same_message", [True, False])
async def test_a_snapshot_guessed_before_a_foreign_call_never_commits_over_it(same_message: bool) -> None:
    """A step-start guess of an ISOLATED_WRITE tool runs on a snapshot; the caller's own tool then changes the
    live object. Before, the fence held back reads only, and the snapshot was served and committed over the
    caller's change (in the same message, and from a message before)."""
    from forethought import ObjectState

    async def run(speculate: bool) -> list[Any]:
        cell = ObjectState({"balance": 0})

        @tool(effect=Effect.ISOLATED_WRITE, state=cell, threaded=False)
        def add_interest(account: Any) -> int:
            """Add 10% interest."""
            account["balance"] = account["balance"] + account["balance"] // 10
            return int(account["balance"])

        session = Runtime([add_interest]).session()
        messages = [{"role": "user", "content": "deposit, then interest"}]
        calls = [("deposit", {"amount": 100}), ("add_interest", {})]
        steps = [calls] if same_message else [calls[:1], calls[1:]]
        results: list[Any] = []
        for n, step in enumerate(steps):
            predict: Any = Foresight(None, with_patterns=False,
                                     speculators=[Always(ToolCall("add_interest", {}))]) if n == 0 else False
            tapped = tap(_stream(*step), session, speculate=speculate, messages=messages, predict=predict)
            async for _ in tapped:
                pass
            for call in tapped.tool_calls:
                if call.name in session.tools:
                    assert call.call is not None
                    results.append(await session.execute(call.call))
                else:
                    cell.live["balance"] += 100  # the caller's own tool
                    results.append("ok")
        await session.close()
        return [*results, cell.live["balance"]]

    assert await run(True) == await run(False) == ["ok", 110, 110]


# --- a fifth review: names in pieces, and a given tool under a session tool's name ---------------------------


def read_balance_and_reset() -> int:
    """One of the caller's own tools (not the session's): reads, then empties the account (a write)."""
    old = ACCOUNT["balance"]
    ACCOUNT["balance"] = 0
    return old


@pytest.mark.parametrize("pieces", [[("read_balance", ""), ("_and_reset", "{}")],
                                    [("read_", ""), ("balance", ""), ("_and_", ""), ("reset", "{}")],
                                    [("read_balance_and_reset", ""), ("read_balance_and_reset", "{}")],
                                    [("read_balance", "{}"), ("_and_reset", "")]])
async def test_a_name_streamed_in_pieces_is_the_whole_name_and_its_write_holds_later_reads_back(
        pieces: list[tuple[str, str]]) -> None:
    """Before, the tap kept the first piece of a name (``read_balance``, a session read), as the SDK does not:
    the caller ran ``read_balance_and_reset``, no fence went up, and a read guessed before it was served after
    it. A server that sends the whole name again is taken once; a name that grows after the call's arguments
    closed (the last case) makes what was started for the shorter name no one's."""

    async def run(speculate: bool) -> list[tuple[str, Any]]:
        ACCOUNT["balance"] = 100
        session = Runtime([read_balance]).session()
        results: list[tuple[str, Any]] = []
        for step in range(2):
            async def stream(step: int = step) -> AsyncIterator[dict[str, Any]]:
                if step == 0:
                    for n, (piece, arguments) in enumerate(pieces):
                        yield _chunk(0, "w1" if n == 0 else "", piece, arguments)
                else:
                    yield _chunk(0, "r1", "read_balance", "{}")
                await asyncio.sleep(0.02)
                yield _END

            guesses: Any = Foresight(None, with_patterns=False, speculators=[Always(ToolCall("read_balance", {}))])
            tapped = tap(stream(), session, speculate=speculate, messages=[{"role": "user", "content": "go"}],
                         predict=guesses if step == 0 else False)
            async for _ in tapped:
                pass
            for call in tapped.tool_calls:
                if call.name in session.tools:
                    assert call.call is not None
                    results.append((call.name, await session.execute(call.call)))
                else:
                    results.append((call.name, read_balance_and_reset()))
        await session.close()
        return results

    serial = await run(False)
    assert serial == [("read_balance_and_reset", 100), ("read_balance", 0)]
    assert await run(True) == serial


async def test_pydantic_ai_joins_a_name_streamed_in_pieces() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset

    from forethought.integrations import ForethoughtToolset, TappedModel
    from forethought.integrations.pydantic_ai import pydantic_tool

    async def model(messages: list[Any], info: Any) -> AsyncIterator[Any]:
        steps = sum(m.kind == "response" for m in messages)
        if steps == 0:
            yield {0: DeltaToolCall(name="read_balance", json_args=None, tool_call_id="c1")}
            yield {0: DeltaToolCall(name="_and_reset", json_args="{}")}  # the rest of the name
            await asyncio.sleep(0.02)
        elif steps == 1:
            yield {0: DeltaToolCall(name="read_balance", json_args="{}", tool_call_id="c2")}
            await asyncio.sleep(0.02)
        else:
            yield "done"

    async def run(speculate: bool) -> list[tuple[str, Any]]:
        ACCOUNT["balance"] = 100
        session = Runtime([read_balance]).session()
        inner = FunctionToolset([pydantic_tool(session, read_balance), PydanticTool(read_balance_and_reset)])
        agent = Agent(TappedModel(FunctionModel(stream_function=model), session, speculate=speculate,
                                  predict=False),
                      toolsets=[ForethoughtToolset(wrapped=inner, session=session)])
        result = await agent.run("empty my account, then tell me my balance")
        await session.close()
        return [(p.tool_name, p.content) for m in result.all_messages() for p in getattr(m, "parts", [])
                if p.part_kind == "tool-return"]

    serial = await run(False)
    assert serial == [("read_balance_and_reset", 100), ("read_balance", 0)]
    assert await run(True) == serial


async def test_a_server_that_sends_the_whole_name_in_every_chunk_keeps_its_hits() -> None:
    """Several providers send a call's whole name in every chunk: a piece equal to the name so far is the name
    again, not a piece of a longer one (the first fix of the second review took it for a name in doubt, and
    such a server got no hit at all). A name sent as two equal halves whose doubling is one of the caller's
    tools is the documented cost of this rule."""
    ACCOUNT["balance"] = 7
    session = Runtime([read_balance]).session()

    async def stream() -> AsyncIterator[dict[str, Any]]:
        yield _chunk(0, "r1", "read_balance", "")
        yield _chunk(0, "", "read_balance", "{")
        yield _chunk(0, "", "read_balance", "}")
        await asyncio.sleep(0.02)
        yield _END

    tapped = tap(stream(), session, speculate=True, messages=[{"role": "user", "content": "go"}], predict=False)
    async for _ in tapped:
        pass
    assert [c.name for c in tapped.tool_calls] == ["read_balance"]
    outcome = await session.execute_detailed(tapped.calls[0])
    assert (outcome.value, outcome.kind) == (7, "hit")
    await session.close()
