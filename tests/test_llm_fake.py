"""The scripted fake client: replays scripts in order, raises scripted errors, records requests."""

from __future__ import annotations

import pytest

from forethought import ToolCall
from forethought.errors import LLMError, StreamDroppedError
from forethought.llm.chat import ToolCallAssembler
from forethought.llm.events import LLMEvent, MessageDone, TextDelta, ToolCallClosed
from forethought.llm.fake import FakeLLMClient, FakeRequest, scripted_message


async def drain(client: FakeLLMClient, **extra: object) -> list[LLMEvent]:
    return [e async for e in client.stream("m", [{"role": "user", "content": "hi"}], None, **extra)]


async def test_scripts_are_replayed_in_order_and_requests_recorded() -> None:
    calls = [ToolCall("ls", {"folder": "a"}), ToolCall("pwd")]
    client = FakeLLMClient([scripted_message("thinking", calls), scripted_message("done")])
    first = await drain(client, metadata={"trajectory_id": "x"})
    second = await drain(client)
    closed = [e for e in first if isinstance(e, ToolCallClosed)]
    assert [(c.index, c.name, c.arguments) for c in closed] == [(0, "ls", {"folder": "a"}), (1, "pwd", {})]
    assert first[-1] == MessageDone("tool_calls") and second == [TextDelta("done"), MessageDone("stop")]
    assert client.requests[0] == FakeRequest("m", [{"role": "user", "content": "hi"}], None,
                                             {"metadata": {"trajectory_id": "x"}})
    with pytest.raises(LLMError, match="no script left"):
        await drain(client)


async def test_a_scripted_exception_is_raised_after_the_events_before_it() -> None:
    client = FakeLLMClient([[TextDelta("par"), StreamDroppedError("gone")]])
    seen: list[LLMEvent] = []
    with pytest.raises(StreamDroppedError):
        async for event in client.stream("m", [], None):
            seen.append(event)
    assert seen == [TextDelta("par")]


async def test_respond_function_answers_each_request() -> None:
    client = FakeLLMClient(respond=lambda request: scripted_message(request.model))
    assert (await drain(client))[0] == TextDelta("m")


def test_scripted_messages_match_what_the_real_assembler_emits() -> None:
    call = ToolCall("cat", {"file": "a.txt", "n": [1, 2]})
    scripted = [e for e in scripted_message("", [call]) if not isinstance(e, MessageDone)]
    assembler = ToolCallAssembler()
    real = assembler.add_tool_delta(0, "call_0", "cat", scripted[1].text)  # type: ignore[union-attr]
    assert real == scripted
