"""The streaming-input session (engines/vllm/session.py) and its plugin route, against a fake engine (no vLLM).

The fake keeps vLLM 0.32's semantics as read from its scheduler: a streaming-input request appends each
chunk to the live request, prefills only the new chunk, and drops the last token sampled in a turn (never fed
forward); a fresh request prefills its whole prompt (no prefix cache here). Its next token is a function of
the whole context, so a session that lost or doubled a token would generate something else than the fresh
requests over the same conversation. The real engine is measured in tests/test_vllm_engine.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from forethought.engines.vllm import session as session_module
from forethought.engines.vllm.plugin import SESSION_PROBE_ENV, SESSION_ROUTE, ToolCachePlugin, parse_session_body
from forethought.engines.vllm.session import Chunk, ChunkOutput, Kit, carry_last, run_fresh, run_session, scripted
from forethought.errors import WorkloadError
from forethought.serve.http import serve_in_process

KIT = Kit(params=lambda chunk: chunk.max_tokens, streaming_input=lambda prompt, params: (prompt, params))


def _out(token: int, finish: str | None) -> Any:
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=[token], finish_reason=finish)],
                           num_cached_tokens=0, finished=False)


class FakeEngine:
    """vLLM's EngineClient.generate as far as sessions go; counts prefilled tokens and requests."""

    def __init__(self) -> None:
        self.prefilled = 0
        self.requests: list[str] = []

    @staticmethod
    def next_token(context: list[int]) -> int:
        return (sum((i + 1) * t for i, t in enumerate(context)) * 31 + len(context)) % 1000

    async def _turn(self, context: list[int], max_tokens: int) -> AsyncIterator[Any]:
        for i in range(max_tokens):
            token = self.next_token(context)
            context.append(token)
            await asyncio.sleep(0)
            yield _out(token, "length" if i == max_tokens - 1 else None)
        context.pop()  # the last sampled token was never fed forward: not in the KV cache

    async def generate(self, prompt: Any, max_tokens: int, request_id: str) -> AsyncIterator[Any]:
        self.requests.append(request_id)
        if isinstance(prompt, dict):
            context = list(prompt["prompt_token_ids"])
            self.prefilled += len(context)
            async for out in self._turn(context, max_tokens):
                yield out
            return
        context = []
        async for (chunk_prompt, chunk_max) in prompt:
            context.extend(chunk_prompt["prompt_token_ids"])
            self.prefilled += len(chunk_prompt["prompt_token_ids"])
            async for out in self._turn(context, chunk_max):
                yield out


token_lists = st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(token_lists, st.integers(min_value=1, max_value=6)), min_size=1, max_size=4))
def test_a_session_generates_what_fresh_requests_do_and_prefills_only_its_chunks(
        turns: list[tuple[list[int], int]]) -> None:
    chunks = [Chunk(tuple(ids), n) for ids, n in turns]
    session_engine, fresh_engine = FakeEngine(), FakeEngine()
    session = asyncio.run(run_session(session_engine, chunks[0], scripted(chunks), kit=KIT, request_id="r"))
    fresh = asyncio.run(run_fresh(fresh_engine, chunks, kit=KIT))
    assert [o.token_ids for o in session] == [o.token_ids for o in fresh]
    assert [len(o.token_ids) for o in session] == [c.max_tokens for c in chunks]
    assert all(o.finish_reason == "length" for o in session)
    assert session_engine.requests == ["r"] and len(fresh_engine.requests) == len(chunks)
    # the session prefills each chunk (+ the carried token); fresh requests the whole conversation each time
    assert session_engine.prefilled == sum(len(c.token_ids) for c in chunks) + len(chunks) - 1
    conversation, expected = 0, 0
    for chunk, out in zip(chunks, fresh, strict=True):
        conversation += len(chunk.token_ids)
        expected += conversation
        conversation += len(out.token_ids)
    assert fresh_engine.prefilled == expected


def test_without_the_carried_token_the_session_diverges() -> None:
    """The fake is sharp enough to catch the token vLLM drops at a chunk's stop."""
    chunks = [Chunk((5, 6, 7), 3), Chunk((8, 9), 3)]
    exact = asyncio.run(run_session(FakeEngine(), chunks[0], scripted(chunks), kit=KIT))
    lossy = asyncio.run(run_session(FakeEngine(), chunks[0], scripted(chunks, carry=False), kit=KIT))
    fresh = asyncio.run(run_fresh(FakeEngine(), chunks, kit=KIT))
    assert exact == fresh and lossy[1] != fresh[1]


def test_decide_sees_every_turn_and_can_end_the_request() -> None:
    seen: list[int] = []

    def decide(outputs: Any) -> Chunk | None:
        seen.append(len(outputs))
        return carry_last(outputs, Chunk((1,), 2)) if len(outputs) < 3 else None

    engine = FakeEngine()
    outputs = asyncio.run(run_session(engine, Chunk((4, 4), 1), decide, kit=KIT))
    assert seen == [1, 2, 3] and [len(o.token_ids) for o in outputs] == [1, 2, 2] and len(engine.requests) == 1


def test_chunks_and_carry_refuse_empty_or_nonpositive() -> None:
    with pytest.raises(WorkloadError):
        Chunk((), 1)
    with pytest.raises(WorkloadError):
        Chunk((1,), 0)
    assert carry_last([], Chunk((3,), 1)) == Chunk((3,), 1)
    assert carry_last([ChunkOutput((7, 8), "length", 0)], Chunk((3,), 1)) == Chunk((8, 3), 1)


@pytest.mark.parametrize("body", [
    [], {"mode": "x", "chunks": [{"token_ids": [1], "max_tokens": 1}]}, {"mode": "session", "chunks": []},
    {"mode": "session", "chunks": [{"token_ids": [1.5], "max_tokens": 1}]},
    {"mode": "fresh", "chunks": [{"token_ids": [True], "max_tokens": 1}]},
    {"mode": "fresh", "chunks": [{"token_ids": [-1], "max_tokens": 1}]},
    {"mode": "fresh", "chunks": [{"token_ids": [1], "max_tokens": "2"}]},
    {"mode": "fresh", "chunks": [{"token_ids": [1], "max_tokens": 0}]},
    {"mode": "fresh", "chunks": [{"token_ids": [1], "max_tokens": 1}] * 17},
    {"mode": "fresh", "chunks": [{"token_ids": [1], "max_tokens": 1}], "cache_salt": ""},
    {"mode": "session", "chunks": [{"token_ids": [1], "max_tokens": 1}], "pause_s": -1},
    {"mode": "session", "chunks": [{"token_ids": [1], "max_tokens": 1}], "pause_s": 61},
    {"mode": "session", "chunks": [{"token_ids": [1], "max_tokens": 1}], "pause_s": True},
])
def test_session_body_is_refused_when_malformed(body: Any) -> None:
    with pytest.raises((ValueError, WorkloadError)):
        parse_session_body(body)


async def test_session_route_only_with_the_probe_enabled_and_it_drives_the_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    off, on = ToolCachePlugin(environ={}), ToolCachePlugin(environ={SESSION_PROBE_ENV: "1"})
    apps = []
    for plugin in (off, on):
        app = Starlette()
        plugin.attach_router(app)
        apps.append(app)
    assert not any(getattr(r, "path", None) == SESSION_ROUTE for r in apps[0].router.routes)
    assert any(getattr(r, "path", None) == SESSION_ROUTE for r in apps[1].router.routes)
    body = {"mode": "session", "chunks": [{"token_ids": [1, 2], "max_tokens": 2}, {"token_ids": [3], "max_tokens": 1}]}
    async with serve_in_process(apps[1]) as url, httpx2.AsyncClient(timeout=10.0) as http:
        assert (await http.post(url + SESSION_ROUTE, json=body)).status_code == 503  # no engine yet
        assert (await http.post(url + SESSION_ROUTE, json={"mode": "?"})).json()["error"]["code"] == "http_400"
        on.engine = FakeEngine()
        monkeypatch.setattr(session_module, "vllm_kit", lambda: KIT)
        answer = (await http.post(url + SESSION_ROUTE, json=body)).json()
    fresh = await run_fresh(FakeEngine(), [Chunk((1, 2), 2), Chunk((3,), 1)], kit=KIT)
    assert answer["mode"] == "session" and [c["token_ids"] for c in answer["chunks"]] == [
        list(o.token_ids) for o in fresh]
    await off.gateway.aclose()
    await on.gateway.aclose()


def test_session_body_defaults_and_pause() -> None:
    body = {"mode": "session", "chunks": [{"token_ids": [1, 2], "max_tokens": 3}]}
    assert parse_session_body(body) == ("session", [Chunk((1, 2), 3)], None, 0.0)
    assert parse_session_body({**body, "pause_s": 2, "cache_salt": "s"})[2:] == ("s", 2.0)


def test_a_pause_holds_back_each_later_chunk_only() -> None:
    """The pause stands for a tool's run time between turns; the first chunk goes at once."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    chunks = [Chunk((1,), 2), Chunk((2,), 2), Chunk((3,), 2)]
    outputs = asyncio.run(run_session(FakeEngine(), chunks[0], scripted(chunks), kit=KIT, pause_s=1.5, sleep=sleep))
    assert slept == [1.5, 1.5] and len(outputs) == 3
    assert outputs == asyncio.run(run_fresh(FakeEngine(), chunks, kit=KIT))
