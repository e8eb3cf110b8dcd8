"""Reading a relayed response beside the relay: the same events however the bytes are cut, compressed bodies
read, unreadable ones reported once, and a watcher's failure never reaching the relay."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.daemon.observer import ResponseObserver
from forethought.daemon.wire import Wire
from forethought.llm.events import LLMEvent, MessageDone, ToolCallClosed


class Recorder:
    """A fake :class:`~forethought.daemon.observer.Watcher`: keeps what it is told."""

    def __init__(self, fail_on: type | None = None) -> None:
        self.events: list[LLMEvent] = []
        self.unreadable: list[str] = []
        self.fail_on = fail_on

    def event(self, event: LLMEvent) -> None:
        if self.fail_on is not None and isinstance(event, self.fail_on):
            raise RuntimeError("a watcher's own bug")
        self.events.append(event)

    def unreadable_(self, why: str) -> None:
        self.unreadable.append(why)


def _watcher(recorder: Recorder) -> Any:
    class Adapter:
        def event(self, event: LLMEvent) -> None:
            recorder.event(event)

        def unreadable(self, why: str) -> None:
            recorder.unreadable_(why)

        def left(self, why: str) -> None:
            recorder.unreadable_("left: " + why)

    return Adapter()


def _sse(events: list[dict[str, Any]], done: bool = False) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


CHAT = _sse([{"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi \u2028 there"}}]},
             {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
                 {"index": 0, "id": "t1", "function": {"name": "mcp__g__read", "arguments": '{"pa'}}]}}]},
             {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
                 {"index": 0, "function": {"arguments": 'th": "a"}'}}]}}]},
             {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
             {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}],
            done=True)
MESSAGES = _sse([{"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 5}}},
                 {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1",
                                                                                "name": "mcp__g__read", "input": {}}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                       "partial_json": '{"path": "a"}'}},
                 {"type": "content_block_stop", "index": 0},
                 {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 6}},
                 {"type": "message_stop"}])


async def _read(wire: Wire, pieces: list[bytes], encoding: str = "", complete: bool = True,
                streamed: bool = True, recorder: Recorder | None = None) -> Recorder:
    recorder = recorder or Recorder()
    observer = ResponseObserver(wire, _watcher(recorder), streamed=streamed, content_encoding=encoding)
    observer.start()
    for piece in pieces:
        observer.feed(piece)
    observer.end(complete)
    await asyncio.wait_for(observer.wait(), 5)
    return recorder


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True) if body[a:b]]


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
       wire=st.sampled_from(["chat", "messages"]))
def test_the_events_do_not_depend_on_where_the_bytes_are_cut(cuts: list[int], wire: str) -> None:
    body = CHAT if wire == "chat" else MESSAGES
    whole = asyncio.run(_read(Wire(wire), [body]))
    pieces = asyncio.run(_read(Wire(wire), _cut(body, cuts)))
    assert pieces.events == whole.events and not pieces.unreadable
    closed = [e for e in whole.events if isinstance(e, ToolCallClosed)]
    assert [(c.name, c.arguments) for c in closed] == [("mcp__g__read", {"path": "a"})]
    assert isinstance(whole.events[-1], MessageDone) and whole.events[-1].usage is not None


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_bodies_are_read(encoding: str) -> None:
    packed = gzip.compress(MESSAGES) if encoding == "gzip" else zlib.compress(MESSAGES)
    recorder = await _read(Wire.MESSAGES, _cut(packed, [7, 19, 40]), encoding)
    assert recorder.events == (await _read(Wire.MESSAGES, [MESSAGES])).events and not recorder.unreadable


@pytest.mark.parametrize(("pieces", "encoding", "complete", "why"), [
    ([MESSAGES], "br", True, "cannot be read"),
    ([MESSAGES[:60]], "", True, "ended before its message did"),
    ([MESSAGES[:60]], "", False, "the stream broke"),
    ([b"data: {nope\n\n"], "", True, "UpstreamError"),
    ([_sse([{"type": "error", "error": {"message": "overloaded"}}])], "", True, "UpstreamError"),
])
async def test_what_cannot_be_read_is_reported_once(pieces: list[bytes], encoding: str, complete: bool,
                                                    why: str) -> None:
    recorder = await _read(Wire.MESSAGES, pieces, encoding, complete)
    assert len(recorder.unreadable) == 1 and why in recorder.unreadable[0]


async def test_a_whole_body_is_read_into_the_same_calls() -> None:
    body = json.dumps({"id": "m", "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t",
                                                                            "name": "n", "input": {"k": 1}}],
                       "stop_reason": "tool_use"}).encode()
    recorder = await _read(Wire.MESSAGES, [body[:10], body[10:]], streamed=False)
    closed = [e for e in recorder.events if isinstance(e, ToolCallClosed)]
    assert [(c.name, c.arguments) for c in closed] == [("n", {"k": 1})] and not recorder.unreadable


async def test_a_failing_watcher_ends_the_reading_and_never_raises() -> None:
    recorder = await _read(Wire.MESSAGES, [MESSAGES], recorder=Recorder(fail_on=ToolCallClosed))
    assert recorder.unreadable == ["RuntimeError"]


async def test_a_client_that_leaves_a_whole_body_is_unreadable_and_one_that_leaves_a_stream_has_left() -> None:
    """A whole body may have reached the client before its end reached the daemon: leaving it fails closed. A
    stream's chunks are read before they are sent, so leaving one is only a leave."""
    body = json.dumps({"id": "m1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
                       "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
                       "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()
    for streamed, pieces, expected in ((False, [body], "the client left before the body ended"),
                                       (True, [MESSAGES[:40]], "left: the client left before the message ended")):
        recorder = Recorder()
        observer = ResponseObserver(Wire.MESSAGES, _watcher(recorder), streamed=streamed)
        observer.start()
        for piece in pieces:
            observer.feed(piece)
        observer.end(complete=False, client_left=True)
        await observer.wait()
        assert recorder.unreadable == [expected]
