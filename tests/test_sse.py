"""The one SSE parser (forethought.llm.sse): adversarial byte streams, the line cap, the JSON layer, I/O errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.errors import StreamDroppedError, UpstreamError
from forethought.llm.sse import DEFAULT_MAX_LINE_BYTES, SSEDecoder, SSEEvent, aiter_events, aiter_json, json_events


def decode(pieces: Iterable[bytes], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[SSEEvent]:
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events + decoder.close()


def split_at(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(body)) for c in cuts})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


def datas(events: list[SSEEvent]) -> list[str]:
    return [e.data for e in events]


# --- the line and event rules ----------------------------------------------------------------------

# data lines: any text without line ends (SSE cannot carry a CR or LF inside a line)
LINE_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30)
EVENTS = st.lists(st.lists(LINE_TEXT, min_size=1, max_size=4), max_size=6)
ENDINGS = st.sampled_from([b"\n", b"\r", b"\r\n"])


@settings(max_examples=200, deadline=None)
@given(EVENTS, st.data())
def test_any_split_and_any_line_endings_give_the_same_events(events: list[list[str]], data: st.DataObject) -> None:
    body = b""
    for lines in events:
        end = data.draw(ENDINGS)  # one per event: a CR then an LF would be one CRLF, not two line ends
        for line in lines:
            if data.draw(st.booleans()):
                body += b": a comment" + end
            body += b"data: " + line.encode() + end
        body += end
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12))
    assert datas(decode(split_at(body, cuts))) == ["\n".join(lines) for lines in events]


def test_a_crlf_split_between_pieces_is_one_line_end() -> None:
    # the LF after a CR that ended the last piece must not count as the empty line that dispatches
    assert datas(decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])) == ["a\nb"]
    assert datas(decode([b"data: a\r", b"\n", b"\r", b"\n"])) == ["a"]


def test_a_lone_cr_ends_a_line() -> None:
    assert datas(decode([b"data: a\rdata: b\r\rdata: c\r\r"])) == ["a\nb", "c"]


def test_comments_fields_and_spacing() -> None:
    body = (b": keep-alive\nevent: message\nid: 7\ndata:x\ndata:  two spaces\ndata\nretry: 10\nother: y\n\n"
            b"data: next\n\n")
    assert decode([body]) == [SSEEvent("x\n two spaces\n", "message", "7"), SSEEvent("next", None, "7")]


def test_an_empty_line_without_data_dispatches_nothing_and_resets_the_type() -> None:
    assert decode([b"\n\n\nevent: ping\n\ndata: d\n\n"]) == [SSEEvent("d")]


def test_an_event_not_closed_when_the_body_ends_is_discarded() -> None:
    assert datas(decode([b"data: x\n\ndata: y"])) == ["x"]  # no final newline at all
    assert datas(decode([b"data: x\n\ndata: y\n"])) == ["x"]  # a line end but no empty line
    assert decode([b""]) == [] and decode([]) == []


def test_line_separators_inside_json_text_do_not_split_a_line() -> None:
    payload = json.dumps({"content": "a\u2028b\u2029c\x85d\x0ce"}, ensure_ascii=False)
    assert "\u2028" in payload  # the gateway writes JSON with ensure_ascii=False
    events = decode([b"data: " + payload.encode() + b"\n\n"])
    assert [json.loads(e.data) for e in events] == [{"content": "a\u2028b\u2029c\x85d\x0ce"}]


def test_multibyte_characters_split_between_pieces() -> None:
    body = "data: ñ€😀\n\n".encode()
    assert all(datas(decode(split_at(body, [cut]))) == ["ñ€😀"] for cut in range(len(body) + 1))


def test_a_leading_bom_is_dropped_once() -> None:
    assert datas(decode([b"\xef\xbb", b"\xbfdata: a\n\n"])) == ["a"]
    # a BOM later in the stream is not a stream start: that line's field name is not "data"
    assert datas(decode([b"data: a\n\n\xef\xbb\xbfdata: b\n\n"])) == ["a"]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert datas(decode([b"data: \xff\xfe\n\n"])) == ["\ufffd\ufffd"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_garbage_never_raises_and_yields_only_strings(pieces: list[bytes]) -> None:
    for event in decode(pieces):
        assert isinstance(event.data, str)


def test_feed_after_close_is_refused() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(ValueError, match="after close"):
        decoder.feed(b"data: x\n\n")


# --- the line cap ------------------------------------------------------------------------------------


def test_a_line_at_the_cap_passes_and_one_byte_more_raises() -> None:
    line = b"data: " + b"x" * 10  # 16 bytes
    assert datas(decode([line + b"\n\n"], max_line_bytes=16)) == ["x" * 10]
    with pytest.raises(UpstreamError, match="longer than 15 bytes"):
        decode([line + b"\n\n"], max_line_bytes=15)


def test_an_endless_line_raises_before_its_end_arrives() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    for _ in range(10):
        decoder.feed(b"data: " + b"y" * 4)  # 100 bytes, no line end yet
    with pytest.raises(UpstreamError, match="max_line_bytes"):
        decoder.feed(b"z")


def test_the_cap_counts_bytes_per_line_not_per_stream() -> None:
    body = b"".join(b"data: %03d\n\n" % i for i in range(200))  # 2,400 bytes of 9-byte lines
    assert len(decode(split_at(body, list(range(0, len(body), 7))), max_line_bytes=9)) == 200


def test_the_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        SSEDecoder(max_line_bytes=0)


# --- over a response body ---------------------------------------------------------------------------


class Body(httpx2.AsyncByteStream):
    """A response body sent in the given pieces, then optionally failing with ``error``."""

    def __init__(self, pieces: list[bytes], error: Exception | None = None) -> None:
        self.pieces = pieces
        self.error = error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.error is not None:
            raise self.error


def response(pieces: list[bytes], error: Exception | None = None) -> httpx2.Response:
    return httpx2.Response(200, stream=Body(pieces, error))


async def test_json_chunks_up_to_done_with_their_text() -> None:
    body = [b'data: {"a": 1}\n', b'\ndata: {"b"', b': [2]}\n\ndata: [DONE]\n\ndata: {"after": 0}\n\n']
    assert [c async for c in aiter_json(response(body))] == [({"a": 1}, '{"a": 1}'), ({"b": [2]}, '{"b": [2]}')]


async def test_a_stream_without_done_ends_at_the_body_end() -> None:
    assert [c async for c, _ in aiter_json(response([b'data: {"a": 1}\n\n']))] == [{"a": 1}]
    body = [b'event: response.created\ndata: {"type": "x"}\n\n', b'data: {"type": "y"}\n\n']
    assert [c async for c in json_events(response(body))] == [{"type": "x"}, {"type": "y"}]


@pytest.mark.parametrize(("data", "match"), [
    (b"{not json", "unparsable stream chunk"),
    (b"[1, 2]", "not a JSON object"),
    (b'"text"', "not a JSON object"),
    (b"", "unparsable stream chunk"),
])
async def test_data_that_is_not_a_json_object_is_an_upstream_error(data: bytes, match: str) -> None:
    with pytest.raises(UpstreamError, match=match):
        async for _ in aiter_json(response([b'data: {"ok": 1}\n\n', b"data: " + data + b"\n\n"])):
            pass


async def test_a_too_long_upstream_line_is_an_upstream_error() -> None:
    with pytest.raises(UpstreamError, match="longer than 64 bytes"):
        async for _ in aiter_json(response([b"data: " + b"9" * 100 + b"\n\n"]), max_line_bytes=64):
            pass


async def test_a_transport_failure_mid_body_is_a_dropped_stream() -> None:
    seen: list[str] = []
    with pytest.raises(StreamDroppedError, match="dropped mid-response"):
        async for event in aiter_events(response([b"data: a\n\n"], httpx2.ReadError("peer reset"))):
            seen.append(event.data)
    assert seen == ["a"]


async def test_another_http_failure_mid_body_is_an_upstream_error() -> None:
    with pytest.raises(UpstreamError, match="unreadable stream"):
        async for _ in aiter_events(response([b"data: a\n"], httpx2.DecodingError("bad gzip"))):
            pass
