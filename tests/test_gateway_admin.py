"""The gateway's operator surface, over real loopback HTTP: resetting needs the admin token, and a client
that goes away, at any point of any request, costs a DEBUG line and never a traceback at ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest

from forethought.gateway.app import ADMIN_TOKEN_HEADER, Gateway, GatewayConfig
from forethought.llm.tool_cache import TOKEN_HEADER
from forethought.serve.http import serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

ADMIN = "admin-token-for-the-tests-0123456789"
SCRIPT = parse_script({"ttft_s": 0.0, "chunk_s": 0.02, "fragment_chars": 3, "responses": [
    {"text": "Checking the weather in a few cities now.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}}]},
    {"text": "24 C."}]})
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@contextlib.asynccontextmanager
async def _gateway(config: GatewayConfig) -> AsyncIterator[tuple[str, Gateway]]:
    async with serve_in_process(create_scripted_server(SCRIPT)) as upstream:
        gateway = Gateway(upstream + "/v1", config)
        try:
            async with serve_in_process(gateway.app, log_level="debug") as url:
                yield url, gateway
        finally:
            await gateway.aclose()


async def _count_something(http: httpx2.AsyncClient) -> None:
    """Make the counters non-zero: a rejected post (404) counts."""
    await http.post("/cache-tool-output/ftg-unknown", json=[])


WRONG_TOKENS: list[Any] = ["", "x", ADMIN[:-1], ADMIN + "x", ADMIN.upper(), ADMIN[1:] + ADMIN[0], ADMIN + ADMIN,
                           "\u00e9".encode("latin-1") * 40, "a" * 10_000, "Bearer " + ADMIN, ADMIN.replace("-", "_"),
                           ADMIN[:16]]


async def test_reset_needs_the_admin_token_and_nothing_else_resets() -> None:
    async with _gateway(GatewayConfig(admin_token=ADMIN)) as (url, gateway), \
            httpx2.AsyncClient(base_url=url) as http:
        await _count_something(http)
        opened = await http.post("/v1/chat/completions", json={"model": "m", "stream": True, "tools": TOOLS,
                                                               "messages": [{"role": "user", "content": "x"}]})
        response_token = opened.headers[TOKEN_HEADER]  # a response's own token is not the admin token
        attempts: list[dict[str, Any]] = [{}, {"authorization": f"Bearer {ADMIN}"}, {TOKEN_HEADER: ADMIN},
                                          {ADMIN_TOKEN_HEADER: response_token}]
        attempts += [{ADMIN_TOKEN_HEADER: wrong} for wrong in WRONG_TOKENS]
        for headers in attempts:
            reply = await http.post("/gateway/reset", headers=headers)
            assert reply.status_code == (401 if not headers.get(ADMIN_TOKEN_HEADER, "").strip() else 403), headers
            assert gateway.cache.rejected == {404: 1}, headers  # nothing was reset
        reply = await http.post("/gateway/reset", headers={ADMIN_TOKEN_HEADER: ADMIN})
        assert reply.status_code == 200 and reply.json() == {"reset": True}
        assert gateway.cache.rejected == {} and gateway.stats()["posts_rejected"] == {}


async def test_without_an_admin_token_reset_is_off() -> None:
    async with _gateway(GatewayConfig()) as (url, gateway), httpx2.AsyncClient(base_url=url) as http:
        await _count_something(http)
        for headers in ({}, {ADMIN_TOKEN_HEADER: ADMIN}, {ADMIN_TOKEN_HEADER: "None"}, {ADMIN_TOKEN_HEADER: ""}):
            reply = await http.post("/gateway/reset", headers=headers)
            assert reply.status_code == 403 and "no admin token" in reply.json()["error"]["message"]
        assert gateway.cache.rejected == {404: 1}


def test_a_short_admin_token_is_refused() -> None:
    with pytest.raises(ValueError, match="admin_token"):
        GatewayConfig(admin_token="short")


# --- clients that go away ---------------------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _watched_logs() -> Iterator[_Records]:
    """Every record of the root, uvicorn and forethought loggers (uvicorn's do not propagate to the root)."""
    handler = _Records()
    loggers = [logging.getLogger(name) for name in ("", "uvicorn", "uvicorn.error", "forethought")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
    logging.getLogger("forethought").setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def _request(path: str, body: bytes, declared: int, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n"
            f"{extra}\r\n").encode() + body


async def _open_response(url: str) -> tuple[str, str, Any]:
    """A streamed response kept open (the client reads it slowly): its id and token, and its context."""
    http = httpx2.AsyncClient(base_url=url, timeout=10)
    stream = http.stream("POST", "/v1/chat/completions", json={
        "model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "x"}]})
    opened = await stream.__aenter__()
    return opened.headers["x-forethought-response-id"], opened.headers[TOKEN_HEADER], (http, stream)


CHAT = json.dumps({"model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "x"}]})
RESPONSES = json.dumps({"model": "m", "stream": True, "input": "x", "tools": [
    {"type": "function", "name": "lookup", "parameters": TOOLS[0]["function"]["parameters"]}]})
WHOLE = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
REQUESTS = {"chat-stream": ("/v1/chat/completions", CHAT), "responses-stream": ("/v1/responses", RESPONSES),
            "chat-whole": ("/v1/chat/completions", WHOLE), "responses-whole": ("/v1/responses", WHOLE),
            "cache-post": ("post", "[]")}
CASES = [pytest.param(path, body, when, id=f"{name}-{when}") for name, (path, body) in REQUESTS.items()
         for when in ("mid-body", "after-body", "mid-stream")]


@pytest.mark.parametrize(("path", "body", "when"), CASES)
async def test_a_client_that_goes_away_logs_no_traceback(path: str, body: str, when: str) -> None:
    async with _gateway(GatewayConfig(admin_token=ADMIN)) as (url, gateway):
        held: Any = None
        headers: dict[str, str] = {}
        if path == "post":
            response_id, token, held = await _open_response(url)
            path, headers = f"/cache-tool-output/{response_id}", {TOKEN_HEADER: token}
        host, port = url.removeprefix("http://").split(":")
        with _watched_logs() as logs:
            for _ in range(3):
                reader, writer = await asyncio.open_connection(host, int(port))
                raw = body.encode()
                if when == "mid-body":
                    writer.write(_request(path, raw[: len(raw) // 2], len(raw), headers))
                else:
                    writer.write(_request(path, raw, len(raw), headers))
                await writer.drain()
                if when == "mid-stream":
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(reader.read(200), 5)
                else:
                    await asyncio.sleep(0.05)
                writer.transport.abort()  # the client is gone
                await asyncio.sleep(0.1)
            async with httpx2.AsyncClient(base_url=url) as http:
                assert (await http.get("/health")).status_code == 200
        if held is not None:
            await held[1].__aexit__(None, None, None)
            await held[0].aclose()
        for _ in range(100):
            if gateway.stats()["open_responses"] == 0:
                break
            await asyncio.sleep(0.02)
        assert gateway.stats()["open_responses"] == 0
        loud = [(r.name, r.levelname, r.getMessage()) for r in logs.records
                if r.levelno >= logging.WARNING or r.exc_info is not None]
        assert loud == []
