"""A session's first lines relayed while the proxy loads, then the proxy taking over at a line boundary
(:mod:`forethought.mcp.warmup`, :mod:`forethought.mcp.pipes`): nothing is lost or doubled, the proxy learns
the server's name and tools from what passed, and a ``tools/call`` still running at the handoff stays a write
in progress until its answer comes. The client is raw JSON-RPC on pipes, as a client's are."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought._core.versions import StateVersion
from forethought.mcp.effects import policy_from_data
from forethought.mcp.pipes import fd_streams
from forethought.mcp.proxy import Proxy, ProxyConfig
from forethought.mcp.warmup import WarmStart

STATE = Path(__file__).parent.with_name("mcp_servers") / "state_server.py"
WAIT_S = 20.0


class PipeClient:
    """Writes JSON-RPC lines to one pipe, reads lines from another (a thread collects them)."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self._write_fd = write_fd
        self.lines: list[dict[str, Any]] = []
        self._got = threading.Condition()
        threading.Thread(target=self._read, args=(read_fd,), daemon=True).start()

    def _read(self, fd: int) -> None:
        buffer = b""
        while chunk := os.read(fd, 65536):
            buffer += chunk
            *whole, buffer = buffer.split(b"\n")
            with self._got:
                self.lines += [json.loads(line) for line in whole if line.strip()]
                self._got.notify_all()

    def send(self, data: bytes) -> None:
        os.write(self._write_fd, data)

    def request(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                              **({"params": params} if params is not None else {})}).encode() + b"\n")

    async def answer(self, request_id: Any) -> dict[str, Any]:
        def wait() -> dict[str, Any]:
            with self._got:
                found = self._got.wait_for(lambda: [m for m in self.lines if m.get("id") == request_id], WAIT_S)
                assert found, f"no answer to {request_id!r}"
                return found[0]

        return await asyncio.to_thread(wait)


INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "piped", "version": "0"}}


async def test_a_session_begun_in_warm_up_goes_on_in_the_proxy(tmp_path: Path) -> None:
    down_r, down_w = os.pipe()  # client -> proxy
    up_r, up_w = os.pipe()  # proxy -> client
    clock = StateVersion()
    warm = WarmStart([sys.executable, str(STATE), str(tmp_path / "log")], clock, client_in=down_r, client_out=up_w)
    client = PipeClient(down_w, up_r)
    client.request(1, "initialize", INIT)
    assert "result" in await client.answer(1)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    client.request(2, "tools/list")
    assert {t["name"] for t in (await client.answer(2))["result"]["tools"]} >= {"read", "write"}
    client.request(3, "tools/call", {"name": "write", "arguments": {"value": "new", "delay_s": 1.0}})
    await asyncio.sleep(0.2)  # the write is on its way upstream, and running
    assert clock.token() is None  # a call relayed during warm-up is a write in progress
    half = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                       "params": {"name": "read", "arguments": {}}}).encode() + b"\n"
    client.send(half[:25])  # the handoff comes in the middle of a line
    await asyncio.sleep(0.1)
    handoff = warm.handoff()
    policy = policy_from_data({"servers": {"state": {"trusted": True}}})
    proxy = Proxy(ProxyConfig(command=("unused",), policy=policy), clock=clock)
    async with fd_streams(down_r, up_w, handoff.client_rest) as (read, write):
        serving = asyncio.create_task(proxy.serve_session(read, write, handoff))
        client.send(half[25:])
        assert (await client.answer(4))["result"]["content"][0]["text"] == "initial"  # the write has not landed
        speculator = proxy.speculators[-1]
        assert speculator.name.settled == "state" and speculator.name.client == "piped"
        assert speculator.decisions["read"].early and not speculator.decisions["write"].early
        assert clock.token() is None  # still running
        assert (await client.answer(3))["result"]["content"][0]["text"] == "written"  # relayed by the proxy
        await asyncio.sleep(0.05)
        assert clock.token() is not None  # and its write ended with its answer
        client.request(5, "tools/call", {"name": "read", "arguments": {}})
        assert (await client.answer(5))["result"]["content"][0]["text"] == "new"
        os.close(down_w)  # the client leaves
        stats = await asyncio.wait_for(serving, WAIT_S)
    proxy.close()
    assert (stats.calls, stats.passthrough, stats.misses) == (3, 1, 2)
    assert sum(1 for m in client.lines if m.get("id") == 3) == 1  # answered once, nothing doubled


def test_threads_get_the_lock_at_once_while_relaying_and_the_interpreter_s_switch_interval_comes_back(
        tmp_path: Path) -> None:
    """The proxy imports on the main thread while the warm-up relays (holding the GIL for a second or more): a
    relaying thread with a line to pass on would wait the interpreter's switch interval (5 ms by default) for
    it, each way, on every call; the interval is short while relaying and as it was after the handoff."""
    from forethought.mcp.warmup import RELAY_SWITCH_S

    before = sys.getswitchinterval()
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    warm = WarmStart([sys.executable, str(STATE), str(tmp_path / "log")], StateVersion(), client_in=down_r,
                     client_out=up_w)
    try:
        assert sys.getswitchinterval() == pytest.approx(min(before, RELAY_SWITCH_S))
    finally:
        handoff = warm.handoff()
        handoff.process.kill()
        handoff.process.wait()
        for fd in (down_r, down_w, up_r, up_w):
            os.close(fd)
    assert sys.getswitchinterval() == pytest.approx(before)
