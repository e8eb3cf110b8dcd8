"""`forethought mcp-proxy` as a client starts it: a subprocess on stdio, its metrics, summary, stats, config."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

import contextlib

from mcp import ClientSession, StdioServerParameters, stdio_client

from forethought.cli import app
from mcp_handshakes import http_upstream, proxied_url

PROBE = Path(__file__).with_name("mcp_servers") / "probe_server.py"
FORETHOUGHT = Path(sys.executable).with_name("forethought")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _calls_counted(metrics: str) -> float:
    return sum(float(line.split()[1]) for line in metrics.splitlines()
               if line.startswith("forethought_mcp_calls_total"))


async def _metrics_once_counted(port: int, calls: int, attempts: int = 600) -> str:
    """The proxy's /metrics once they count ``calls``: the command relays the session's first lines while the
    proxy itself loads (warm start), serves metrics once loaded and counts what passed at its takeover
    (bounded: 600 tries, 30 s; the last answer is returned whatever it counts)."""
    import asyncio

    metrics = ""
    async with httpx2.AsyncClient() as http:
        for _ in range(attempts):
            with contextlib.suppress(httpx2.ConnectError):
                metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            if metrics and _calls_counted(metrics) >= calls:
                return metrics
            await asyncio.sleep(0.05)
    return metrics


async def test_proxy_subprocess_serves_metrics_summary_and_stats(tmp_path: Path) -> None:
    store, port, errlog = tmp_path / "store.sqlite", _free_port(), tmp_path / "stderr.txt"
    params = StdioServerParameters(command=str(FORETHOUGHT), args=[
        "mcp-proxy", "--store", str(store), "--trust", "--metrics-port", str(port), "--",
        sys.executable, str(PROBE), str(tmp_path / "log")])
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            texts = []
            for key in ("a", "b", "a", "b"):
                result = await session.call_tool("lookup", {"key": key})
                texts.append(result.content[0].text)  # type: ignore[union-attr]
            metrics = await _metrics_once_counted(port, 4)
    assert texts == ["value-of-a", "value-of-b", "value-of-a", "value-of-b"]
    assert _calls_counted(metrics) == 4
    summary = errlog.read_text().strip().splitlines()[-1]
    assert summary.startswith("forethought mcp-proxy: 4 calls")
    result = CliRunner().invoke(app, ["mcp-proxy", "stats", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["total"]["calls"] == 4 and doc["total"]["sessions"] == 1


def test_config_and_run_errors_are_one_line() -> None:
    result = CliRunner().invoke(app, ["mcp-proxy", "config", "--client", "vim", "--", "x"])
    assert result.exit_code == 2 and "unknown client" in result.output
    result = CliRunner().invoke(app, ["mcp-proxy", "--memory", "--", "/nonexistent/server"])
    assert result.exit_code == 2 and "cannot start the upstream server" in result.output


def test_stats_without_a_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["mcp-proxy", "stats", "--store", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 2 and "no store" in result.output


async def test_http_listener_serves_mcp_progress_and_metrics(tmp_path: Path) -> None:
    import asyncio

    from mcp.client.streamable_http import streamable_http_client

    from forethought.mcp.effects import McpPolicy
    from forethought.mcp.http import serve_http
    from forethought.mcp.proxy import Proxy, ProxyConfig

    port = _free_port()
    proxy = Proxy(ProxyConfig(command=(sys.executable, str(PROBE), str(tmp_path / "log")),
                              policy=McpPolicy().trusting()))
    server = asyncio.create_task(serve_http(proxy, "127.0.0.1", port))
    try:
        async with httpx2.AsyncClient() as http:
            for _ in range(200):  # until uvicorn listens
                try:
                    await http.get(f"http://127.0.0.1:{port}/metrics")
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
            seen: list[float] = []

            async def progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(p)

            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                done = await session.call_tool("counted", {"steps": 2}, progress_callback=progress)
                looked = [await session.call_tool("lookup", {"key": k}) for k in ("a", "a")]
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        proxy.close()
    assert done.content[0].text == "done 2" and seen == [1.0, 2.0]  # type: ignore[union-attr]
    assert [r.content[0].text for r in looked] == ["value-of-a"] * 2  # type: ignore[union-attr]
    assert "forethought_mcp_calls_total" in metrics


@pytest.mark.parametrize("handshake", ["legacy", "discover", "pinned"])
async def test_streamable_http_upstream(tmp_path: Path, handshake: str) -> None:
    """Every way a client opens a session works through the proxy to an HTTP upstream: under the newest
    revision each request carries its routing headers (the relay stamps them, as the SDK's client does)."""
    import asyncio

    async with http_upstream(PROBE, tmp_path / "log") as (url, _), proxied_url(url, handshake) as (session, serving):
        await session.list_tools()
        texts = []
        for key in ("a", "b", "a", "b"):
            result = await session.call_tool("lookup", {"key": key})
            texts.append(result.content[0].text)  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
    stats = serving.result()
    assert texts == ["value-of-a", "value-of-b"] * 2
    assert stats.calls == 4


def test_a_sigterm_while_the_proxy_loads_still_ends_with_its_line_and_saves_its_calls(tmp_path: Path) -> None:
    """Before, a SIGTERM in the first second (the upstream started and relayed, the proxy still loading) ended
    the command with status 143: no summary line, and the calls relayed meanwhile never reached ``stats``
    (found by an outside review). The call is answered before the signal, so nothing is left in flight."""
    import select
    import signal
    import subprocess

    store = tmp_path / "store.sqlite"
    proxy = subprocess.Popen([str(FORETHOUGHT), "mcp-proxy", "--store", str(store), "--trust", "--",
                              sys.executable, str(PROBE), str(tmp_path / "log")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proxy.stdin is not None and proxy.stdout is not None

    def ask(message: dict[str, object]) -> None:
        assert proxy.stdin is not None
        proxy.stdin.write(json.dumps(message) + "\n")
        proxy.stdin.flush()

    def answer() -> dict[str, object]:
        assert proxy.stdout is not None
        ready, _, _ = select.select([proxy.stdout], [], [], 30)
        assert ready, "no answer within 30 s"
        return dict(json.loads(proxy.stdout.readline()))

    try:
        ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in answer()
        ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
        ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lookup",
                                                                           "arguments": {"key": "a"}}})
        assert "result" in answer()
        proxy.send_signal(signal.SIGTERM)
        _, err = proxy.communicate(timeout=60)
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
    assert proxy.returncode == 0, err
    assert err.strip().splitlines()[-1].startswith("forethought mcp-proxy: 1 calls"), err
    result = CliRunner().invoke(app, ["mcp-proxy", "stats", "--store", str(store), "--json"])
    doc = json.loads(result.output)
    assert doc["total"]["calls"] == 1 and doc["total"]["sessions"] == 1
