"""A bounded loopback soak of the gateway: many streams, idle half-open connections, memory before and after.

A scripted model (:mod:`forethought.serve.scripted`) and the gateway run in this process on 127.0.0.1, the
gateway with its hardening on (header timeout, connection bound, body timeout). ``streams`` streamed
chat completions go through it, ``concurrency`` at a time, for at most ``duration_s`` seconds; meanwhile
``idle`` connections open and never finish their headers (each is closed by the header timeout, and its
slot returns). The report gives streams completed and failed, latency percentiles, how many idle
connections the server closed, and the process's resident memory (RSS) before, after and at its peak.

Run: ``python -m forethought.bench.gateway_soak --streams 200 --duration-s 60 --json reports/soak.json``.
Nothing leaves 127.0.0.1, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import httpx2

from forethought.bench.report import document, write_json
from forethought.gateway.app import Gateway, GatewayConfig
from forethought.serve.http import ServerLimits, serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

_PAGE = 4096


def rss_mb() -> float:
    """The process's resident memory now, in MiB (Linux ``/proc``; the peak where that is absent)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * _PAGE / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _idle(url: str, closed: list[int], hold_s: float) -> None:
    """One connection that sends half a request and waits to be closed (at most ``hold_s``)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
    await writer.drain()
    try:
        async with asyncio.timeout(hold_s):
            if await reader.read() == b"":
                closed.append(1)
    except TimeoutError:
        pass
    finally:
        writer.close()


async def soak(streams: int, concurrency: int, duration_s: float, idle: int, header_timeout_s: float) -> dict[str, Any]:
    """Run the soak (see the module docstring) and return its figures."""
    script = parse_script({"ttft_s": 0.01, "chunk_s": 0.002, "fragment_chars": 8, "loop": True, "responses": [
        {"text": "Looking it up.", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}}]},
        {"text": "It is 24 C in Oslo, and that is all there is to say about it."}]})
    before = rss_mb()
    peak = before
    latencies: list[float] = []
    failures: list[str] = []
    closed: list[int] = []
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Oslo?"}],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}]}
    async with serve_in_process(create_scripted_server(script)) as upstream:
        gateway = Gateway(upstream + "/v1", GatewayConfig(body_timeout_s=5.0))
        limits = ServerLimits(limit_concurrency=concurrency + idle + 16, header_timeout_s=header_timeout_s)
        try:
            async with serve_in_process(gateway.app, limits=limits) as url, \
                    httpx2.AsyncClient(base_url=url, timeout=30.0) as http:
                deadline = time.monotonic() + duration_s
                gate = asyncio.Semaphore(concurrency)

                async def one() -> None:
                    nonlocal peak
                    async with gate:
                        if time.monotonic() > deadline:
                            failures.append("not started: duration reached")
                            return
                        start = time.perf_counter()
                        try:
                            async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                                data = b"".join([part async for part in reply.aiter_bytes()])
                            if reply.status_code != 200 or not data.rstrip().endswith(b"data: [DONE]"):
                                failures.append(f"HTTP {reply.status_code}")
                                return
                        except httpx2.HTTPError as exc:
                            failures.append(type(exc).__name__)
                            return
                        latencies.append(time.perf_counter() - start)
                        peak = max(peak, rss_mb())

                idlers = [asyncio.create_task(_idle(url, closed, header_timeout_s * 4 + 5)) for _ in range(idle)]
                started = time.perf_counter()
                async with asyncio.timeout(duration_s + 30):
                    await asyncio.gather(*(one() for _ in range(streams)))
                    await asyncio.gather(*idlers)
                elapsed = time.perf_counter() - started
                stats = gateway.stats()
        finally:
            await gateway.aclose()
    after = rss_mb()
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else float("nan")

    return {"streams": streams, "completed": len(latencies), "failed": len(failures),
            "failures": sorted(set(failures)), "elapsed_s": round(elapsed, 2),
            "latency_p50_s": pct(0.5), "latency_p95_s": pct(0.95),
            "latency_mean_s": round(statistics.fmean(latencies), 4) if latencies else float("nan"),
            "idle_connections": idle, "idle_closed_by_server": len(closed),
            "rss_before_mb": round(before, 1), "rss_after_mb": round(after, 1), "rss_peak_mb": round(peak, 1),
            "gateway_open_responses_after": stats["open_responses"], "gateway_responses": stats["responses"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m forethought.bench.gateway_soak",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--idle", type=int, default=50, help="half-open connections that never finish headers")
    parser.add_argument("--header-timeout-s", type=float, default=2.0)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    results = asyncio.run(soak(args.streams, args.concurrency, args.duration_s, args.idle, args.header_timeout_s))
    for key, value in results.items():
        print(f"{key:<30} {value}")
    if args.json_path:
        write_json(args.json_path, document("bench-gateway-soak", vars(args), results))


if __name__ == "__main__":
    main()
