"""Gateway replicas on loopback: what Redis adds to a post and to the hit path, beside one local gateway.

Two arms, interleaved round by round: ``local`` (one gateway, scopes in its process) and ``replicas`` (two
gateways sharing a ``redis-server``; the response is relayed by one, the result posted to the other). A
round opens a streamed chat completion through the relaying gateway in front of a gated upstream (its
message, one tool call, closes only when the round says so), posts the call's result (timed: ``post_ms``,
the client's round trip), then closes the call and times until the served-result chunk reaches the client
(``serve_ms``: the relay's lookup of its entries, plus the continuation's first bytes). The Redis store's
own round trips (``rtt_ms``) and its operations per response come from its stats.

Run: ``python -m forethought.bench.gateway_replicas --rounds 200 --json reports/gateway-replicas.json``
(starts its own ``redis-server`` unless ``--redis-url`` is given). Everything stays on 127.0.0.1; every
loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from forethought.bench.report import document, write_json
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.gateway.replicas import RedisScopeStore
from forethought.llm.tool_cache import CACHE_CLIENT_HEADER, CACHE_CLIENT_VALUE, CACHE_PATH_HEADER, TOKEN_HEADER
from forethought.serve.http import EventStream, StreamChunks, serve_in_process
from forethought.stores.server import RedisServer

SECRET = b"forethought-bench-secret-not-for-production"
TOOLS = [{"type": "function", "function": {"name": "cd", "parameters": {
    "type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}}]
ROUND_TIMEOUT_S = 10.0


class _GatedUpstream:
    """Each first request streams one ``cd`` call once its gate opens; a continuation answers text at once."""

    def __init__(self) -> None:
        self.gates: asyncio.Queue[asyncio.Event] = asyncio.Queue()

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        continued = any(m.get("role") == "tool" for m in body["messages"])
        gate = asyncio.Event()
        if not continued:
            self.gates.put_nowait(gate)

        async def chunks() -> StreamChunks:
            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                data = {"id": "up", "object": "chat.completion.chunk", "created": 0, "model": "m",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                return b"data: " + json.dumps(data).encode() + b"\n\n"

            yield chunk({"role": "assistant", "content": ""})
            if continued:
                yield chunk({"content": "done"}, "stop")
            else:
                await gate.wait()
                yield chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {
                    "name": "cd", "arguments": '{"folder": "docs"}'}}]}, "tool_calls")
            yield b"data: [DONE]\n\n"

        return EventStream(chunks())

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])


async def _round(http: httpx2.AsyncClient, upstream: _GatedUpstream, relay: str, post_to: str) -> tuple[float, float]:
    """One response: (post round trip, close-to-served time), both in milliseconds."""
    body = {"model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "go"}]}
    headers = {CACHE_CLIENT_HEADER: CACHE_CLIENT_VALUE}
    async with asyncio.timeout(ROUND_TIMEOUT_S), \
            http.stream("POST", relay + "/v1/chat/completions", json=body, headers=headers) as response:
        gate = await upstream.gates.get()
        started = time.perf_counter()
        answer = await http.post(post_to + response.headers[CACHE_PATH_HEADER],
                                 headers={TOKEN_HEADER: response.headers[TOKEN_HEADER]},
                                 json=[{"name": "cd", "params": {"folder": "docs"}, "output": "in docs"}])
        post_ms = (time.perf_counter() - started) * 1000
        if answer.status_code != 200:
            raise RuntimeError(f"post refused: {answer.status_code} {answer.text}")
        closed = time.perf_counter()
        gate.set()
        serve_ms = float("nan")
        async for line in response.aiter_lines():
            if "forethought_tool_result" in line and serve_ms != serve_ms:
                serve_ms = (time.perf_counter() - closed) * 1000
    if serve_ms != serve_ms:
        raise RuntimeError("the result was not served")
    return post_ms, serve_ms


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered), 3),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
            "min": round(ordered[0], 3), "max": round(ordered[-1], 3), "n": len(ordered)}


async def run(rounds: int, redis_url: str) -> dict[str, Any]:
    """Both arms, ``rounds`` responses each, interleaved; figures per arm (see the module docstring)."""
    upstream = _GatedUpstream()
    figures: dict[str, dict[str, list[float]]] = {arm: {"post_ms": [], "serve_ms": []}
                                                  for arm in ("local", "replicas")}
    config = GatewayConfig(post_wait_s=1.0)
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(serve_in_process(upstream.app())) + "/v1"
        local = Gateway(engine, config)
        stores = [RedisScopeStore.from_url(redis_url, SECRET) for _ in range(2)]
        replicas = [Gateway(engine, config, store) for store in stores]
        for gateway in (local, *replicas):
            stack.push_async_callback(gateway.aclose)
        local_url = await stack.enter_async_context(serve_in_process(local.app))
        a, b = [await stack.enter_async_context(serve_in_process(g.app)) for g in replicas]
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=ROUND_TIMEOUT_S))
        for _ in range(3):  # warm both paths (connections, scripts loaded into Redis)
            await _round(http, upstream, local_url, local_url)
            await _round(http, upstream, a, b)
        for store in stores:
            store.rtt_s.clear()
        operations = sum(s.stats()["operations"] for s in stores)
        started_load = os.getloadavg()[0]
        for _ in range(rounds):
            for arm, (relay, post_to) in (("local", (local_url, local_url)), ("replicas", (a, b))):
                post_ms, serve_ms = await _round(http, upstream, relay, post_to)
                figures[arm]["post_ms"].append(post_ms)
                figures[arm]["serve_ms"].append(serve_ms)
        rtt = [s * 1000 for store in stores for s in store.rtt_s]
        operations = sum(s.stats()["operations"] for s in stores) - operations
        degraded = any(s.degraded for s in stores)
    return {"arms": {arm: {k: _summary(v) for k, v in f.items()} for arm, f in figures.items()},
            "redis_rtt_ms": _summary(rtt), "redis_ops_per_response": round(operations / rounds, 2),
            "degraded": degraded, "load_before": round(started_load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with contextlib.ExitStack() as cleanup:
        url = args.redis_url
        if url is None:
            server = RedisServer(Path(cleanup.enter_context(tempfile.TemporaryDirectory())))
            server.start()
            cleanup.callback(server.stop)
            url = server.url
        results = asyncio.run(run(args.rounds, url))
    print(json.dumps(results, indent=2))
    if args.json is not None:
        write_json(args.json, document("bench.gateway_replicas", {"rounds": args.rounds}, results))


if __name__ == "__main__":
    main()
