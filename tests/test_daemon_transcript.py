"""A request read as a conversation: the same conversation keys alike at every step, another apart; calls are
paired with their results; odd content never raises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.daemon.transcript import read_request
from forethought.daemon.wire import Wire


def _messages(first: str, steps: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for i in range(steps):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": "ok"}, {"type": "tool_use", "id": f"t{i}", "name": "mcp__g__read",
                                             "input": {"path": f"p{i}"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": [{"type": "text", "text": f"r{i}"}],
             **({"is_error": True} if i == 1 else {})}]})
    return {"model": "m", "system": [{"type": "text", "text": "sys"}], "messages": messages,
            "tools": [{"name": "mcp__g__read", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}]}


def test_messages_steps_of_one_conversation_share_a_key_and_pair_calls_with_results() -> None:
    one = read_request(Wire.MESSAGES, _messages("fix it", 1))
    three = read_request(Wire.MESSAGES, _messages("fix it", 3))
    assert one.key == three.key and read_request(Wire.MESSAGES, _messages("other", 1)).key != one.key
    assert [o.call for o in three.history] == [ToolCall("mcp__g__read", {"path": f"p{i}"}) for i in range(3)]
    assert [o.output for o in three.history] == ["r0", "r1", "r2"] and [o.ok for o in three.history] == [1, 0, 1]
    assert three.user_message == "fix it" and three.system == "sys" and set(three.tools) == {"mcp__g__read"}
    assert three.messages[0] == {"role": "system", "content": "sys"}


def test_a_client_marker_separates_conversations_that_start_alike() -> None:
    a = {**_messages("same", 0), "metadata": {"user_id": "session_a"}}
    b = {**_messages("same", 0), "metadata": {"user_id": "session_b"}}
    assert read_request(Wire.MESSAGES, a).key != read_request(Wire.MESSAGES, b).key


def test_responses_and_chat_read_alike() -> None:
    responses = {"model": "m", "instructions": "sys", "prompt_cache_key": "c1", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c", "name": "git__status", "arguments": '{"repo": "."}'},
        {"type": "function_call_output", "call_id": "c", "output": "clean"}],
        "tools": [{"type": "function", "name": "git__status", "parameters": {"type": "object"}}]}
    chat = {"model": "m", "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "git__status", "arguments": '{"repo": "."}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "clean"}],
        "tools": [{"type": "function", "function": {"name": "git__status", "parameters": {"type": "object"}}}]}
    for wire, body in ((Wire.RESPONSES, responses), (Wire.CHAT, chat)):
        transcript = read_request(wire, body)
        assert [(o.call, o.output) for o in transcript.history] == [(ToolCall("git__status", {"repo": "."}), "clean")]
        assert transcript.user_message == "go" and transcript.system == "sys" and list(transcript.tools) == [
            "git__status"]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(st.sampled_from(["messages", "input", "system", "instructions", "tools", "metadata",
                                             "model", "prompt_cache_key"]), json_values),
       wire=st.sampled_from(list(Wire)))
def test_any_json_body_reads_without_raising(body: dict[str, Any], wire: Wire) -> None:
    transcript = read_request(wire, body)
    assert isinstance(transcript.key, str) and len(transcript.key) == 24
    json.dumps(list(transcript.messages), default=str)  # what a predictor receives is plain data
