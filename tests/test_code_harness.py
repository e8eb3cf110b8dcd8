"""The ``python`` tool of a code-mode agent: its code is speculated while the call's arguments stream, and
running it equals plain exec."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Agent, Runtime, ToolCall
from forethought.code.harness import PythonTool, StringField
from forethought.code.worker.pool import isolation_available
from forethought.llm.events import MessageDone, TextDelta, ToolCallArgumentsDelta, ToolCallClosed, ToolCallStarted
from forethought.llm.fake import FakeLLMClient
from test_code_support import FAST_LIMITS, ToolLog, make_tools, run_plain

_WHY = isolation_available(FAST_LIMITS)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.integers(min_value=1, max_value=7), st.booleans())
def test_the_code_field_decodes_under_any_chunking(code: str, chunk: int, ascii_only: bool) -> None:
    raw = json.dumps({"other": "x\"code\": \"no", "code": code}, ensure_ascii=ascii_only)
    field = StringField("code")
    decoded = "".join(field.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk))
    assert decoded == code and field.done


@pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
async def test_a_streamed_python_call_is_speculated_and_runs_as_plain() -> None:
    log = ToolLog()
    python = PythonTool(make_tools(log, latency_s=0.01))
    outer = Runtime([python.tool()])
    session = outer.session()
    code = "docs = [fetch(u) for u in ['a', 'bb', 'ccc']]\nprint(sum(d['n'] for d in docs))\nsend('done')"
    arguments = json.dumps({"code": code})
    for i in range(0, len(arguments), 5):  # the model streams the tool call's arguments
        python.feed_arguments(0, arguments[i:i + 5])
        await asyncio.sleep(0)
    await python.settle()
    await python.session.wait_speculations(5.0)
    speculated = sorted(c[1] for c in log.calls if c[0] == "fetch")
    output = await session.execute(ToolCall("python", {"code": code}))
    plain = await run_plain(code, make_tools())
    assert output == plain.stdout == "6\n"
    assert speculated == [("a",), ("bb",), ("ccc",)]  # before the agent ran the call
    assert "send" not in [c[0] for c in log.calls[:3]]
    assert python.session.stats().hits >= 3
    await session.close()
    outer.close()
    await python.close()


async def test_the_python_tool_is_never_speculated_itself() -> None:
    python = PythonTool(make_tools())
    outer = Runtime([python.tool()])
    session = outer.session()
    ticket = session.speculate(ToolCall("python", {"code": "print(1)"}))
    assert not ticket.launched
    await session.close()
    outer.close()
    await python.close()


@pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
async def test_the_agent_feeds_a_python_call_s_streamed_code_to_the_tool() -> None:

    log = ToolLog()
    python = PythonTool(make_tools(log))
    code = "a = fetch('x')\nb = fetch('yy')\nprint(a['n'] + b['n'])"
    raw = json.dumps({"code": code})
    call = [ToolCallStarted(0, "c0", "python"), *[ToolCallArgumentsDelta(0, raw[i:i + 4])
                                                  for i in range(0, len(raw), 4)],
            ToolCallClosed(0, "c0", "python", {"code": code}, raw), MessageDone("tool_calls")]
    client = FakeLLMClient([call, [TextDelta("done"), MessageDone("stop")]])
    fed: list[str] = []

    def hook(event: ToolCallStarted | ToolCallArgumentsDelta) -> None:
        if isinstance(event, ToolCallArgumentsDelta):
            fed.append(event.text)
        python.on_tool_event(event)

    runtime = Runtime([python.tool()])
    agent = Agent(client, "m", [python.tool()], runtime, on_tool_event=hook)
    result = await agent.run([{"role": "user", "content": "go"}])
    plain = await run_plain(code, make_tools())
    assert "".join(fed) == raw
    assert result.tool_records[0].output == plain.stdout == "3\n"
    assert [c[0] for c in log.calls].count("fetch") >= 2  # run (and perhaps speculated) through the REPL
    await agent.close()
    runtime.close()
    await python.close()
