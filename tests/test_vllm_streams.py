"""forethought's Responses decoder on the event shapes vLLM 0.32's ``/v1/responses`` streams (no vLLM needed).

The shapes are those a real vLLM (CPU build, hermes tool parser) sent in docs/engine-vllm.md section 5:
``response.output_item.added`` with a ``function_call`` item (``call_id`` ``chatcmpl-tool-...``, ``id``
``fc_...``), ``response.function_call_arguments.delta`` fragments by ``item_id``, a ``.done`` event, parallel
calls as output indexes 0, 1, ..., and a cut-off response that ends with ``response.completed`` whose
``response.status`` is ``incomplete`` (OpenAI sends ``response.incomplete`` instead). The same checks run
against the real server in tests/test_vllm_engine.py.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forethought.llm.events import MessageDone, ToolCallArgumentsDelta, ToolCallClosed, ToolCallStarted
from forethought.llm.responses import ResponsesDecoder, to_responses_tools


def _call_events(output_index: int, name: str, fragments: list[str]) -> list[dict[str, Any]]:
    item_id, call_id = f"fc_{output_index:016x}", f"chatcmpl-tool-{output_index:016x}"
    item = {"arguments": "", "call_id": call_id, "name": name, "type": "function_call", "id": item_id,
            "status": "in_progress"}
    text = "".join(fragments)
    return [{"type": "response.output_item.added", "output_index": output_index, "item": item},
            *({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": output_index,
               "delta": f} for f in fragments),
            {"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": output_index,
             "arguments": text, "name": name},
            {"type": "response.output_item.done", "output_index": output_index,
             "item": {**item, "arguments": text, "status": "completed"}}]


def _completed(status: str, output_tokens: int) -> dict[str, Any]:
    usage = {"input_tokens": 186, "output_tokens": output_tokens, "total_tokens": 186 + output_tokens,
             "input_tokens_details": {"cached_tokens": 128, "cache_write_tokens": 0, "input_tokens_per_turn": [],
                                      "cached_tokens_per_turn": []}}
    details = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {"type": "response.completed",
            "response": {"id": "resp_1", "status": status, "usage": usage, "incomplete_details": details}}


def _decode(events: list[dict[str, Any]]) -> tuple[ResponsesDecoder, list[Any]]:
    decoder = ResponsesDecoder()
    head = [{"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
            {"type": "response.in_progress", "response": {"id": "resp_1", "status": "in_progress"}}]
    return decoder, [out for event in head + events for out in decoder.feed(event)]


def test_vllm_cut_off_response_is_a_length_finish_with_its_closed_calls() -> None:
    """vLLM's ``tool_choice: required`` keeps calling until ``max_output_tokens``; it says ``completed``."""
    events = [*_call_events(0, "cd", ['{"', "f", "ol", "der", '"', ":", '"', "do", "c", "s", '"}']),
              *_call_events(1, "cd", ['{"', "folder", '":"', "docs", '"}']), _completed("incomplete", 60)]
    decoder, out = _decode(events)
    closed = [e for e in out if isinstance(e, ToolCallClosed)]
    assert [(c.index, c.name, dict(c.arguments or {}), c.error) for c in closed] == [
        (0, "cd", {"folder": "docs"}, None), (1, "cd", {"folder": "docs"}, None)]
    done = out[-1]
    assert decoder.done and isinstance(done, MessageDone) and done.finish_reason == "length"
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens,
                                       done.usage.cached_tokens) == (186, 60, 128)


def test_vllm_cut_off_inside_a_call_closes_it_with_an_error() -> None:
    events = [*_call_events(0, "place_order", ['{"', "symbol", '":"', "NV"])[:-2], _completed("incomplete", 7)]
    _, out = _decode(events)
    closed = [e for e in out if isinstance(e, ToolCallClosed)]
    assert len(closed) == 1 and closed[0].arguments is None and closed[0].error
    assert isinstance(out[-1], MessageDone) and out[-1].finish_reason == "length"


def test_vllm_completed_response_with_calls_is_a_tool_calls_finish() -> None:
    _, out = _decode([*_call_events(0, "ls", ["{}"]), _completed("completed", 20)])
    assert isinstance(out[-1], MessageDone) and out[-1].finish_reason == "tool_calls"
    _, text = _decode([{"type": "response.output_text.delta", "delta": "les"}, _completed("completed", 1)])
    assert isinstance(text[-1], MessageDone) and text[-1].finish_reason == "stop"


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.one_of(st.integers(), st.text(max_size=8),
                                                                   st.booleans()), max_size=4),
       st.lists(st.integers(min_value=1, max_value=5), max_size=40), st.booleans())
def test_any_fragmenting_of_vllm_arguments_closes_the_call_once_before_the_end(
        arguments: dict[str, Any], cuts: list[int], spaced: bool) -> None:
    """vLLM writes ``"amount": 100`` (a space after some colons); fragments are a few characters each."""
    text = json.dumps(arguments, separators=(",", ": ") if spaced else (",", ":"))
    fragments, at = [], 0
    for size in cuts:
        if at >= len(text):
            break
        fragments.append(text[at:at + size])
        at += size
    if at < len(text):
        fragments.append(text[at:])
    _, out = _decode([*_call_events(0, "f", fragments), _completed("completed", len(fragments))])
    kinds = [type(e) for e in out]
    closed = [e for e in out if isinstance(e, ToolCallClosed)]
    assert kinds.count(ToolCallStarted) == 1 and len(closed) == 1
    assert closed[0].error is None and dict(closed[0].arguments or {}) == arguments
    assert "".join(e.text for e in out if isinstance(e, ToolCallArgumentsDelta)) == text
    assert kinds.index(ToolCallClosed) < kinds.index(MessageDone)


def test_responses_tools_carry_strict_and_description() -> None:
    chat = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}, "strict": True,
                                              "description": "d"}},
            {"type": "function", "function": {"name": "b"}}]
    assert to_responses_tools(chat) == [
        {"type": "function", "name": "a", "parameters": {"type": "object"}, "description": "d", "strict": True},
        {"type": "function", "name": "b", "parameters": {}}]
