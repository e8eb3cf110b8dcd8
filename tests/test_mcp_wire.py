"""What crosses the wire through the proxy, attacked at its edges (issue 28): a client's request ids that look
like the proxy's own are answered like any other, a call served from a guess gets the guess's progress on its
own token, and no error or log quotes the upstream's arguments (secrets are passed that way)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from typer.testing import CliRunner

from forethought import ToolCall
from forethought.cli import app
from forethought.mcp.effects import McpPolicy, policy_from_data
from forethought.mcp.proxy import Proxy, ProxyConfig
from forethought.mcp.upstream import OWN_ID_PREFIX
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import direct, proxied

SERVERS = Path(__file__).with_name("mcp_servers")
PROBE = SERVERS / "probe_server.py"
STATE = SERVERS / "state_server.py"
SECRET = "S3CR3T-token-42"
WAIT_S = 20.0


# --- client ids that look like the proxy's own ---------------------------------------------------------------


class RawClient:
    """Speaks JSON-RPC to a proxy session directly, choosing its own request ids."""

    def __init__(self, send: Any, receive: Any) -> None:
        self._send, self._receive = send, receive
        self.notifications: list[JSONRPCNotification] = []

    async def request(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        await self._send.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method,
                                                            params=params)))
        with anyio.fail_after(WAIT_S):
            while True:
                item = await self._receive.receive()
                message = item.message
                if isinstance(message, JSONRPCNotification):
                    self.notifications.append(message)
                    continue
                assert isinstance(message, JSONRPCResponse | JSONRPCError)
                assert message.id == request_id, f"an answer to {message.id!r} came for {request_id!r}"
                return message

    async def notify(self, method: str) -> None:
        await self._send.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method)))


@asynccontextmanager
async def raw_session(proxy: Proxy) -> AsyncIterator[RawClient]:
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    try:
        yield RawClient(to_proxy, from_proxy)
    finally:
        to_proxy.close()
        await asyncio.wait_for(serving, 30)
        proxy.close()


IDS = [f"{OWN_ID_PREFIX}1", f"{OWN_ID_PREFIX}2", OWN_ID_PREFIX, f"{OWN_ID_PREFIX}{'0' * 16}-1", 7, "7"]


async def test_client_ids_with_the_proxy_s_prefix_are_answered(tmp_path: Path) -> None:
    proxy = Proxy(ProxyConfig(command=(sys.executable, str(PROBE), str(tmp_path / "log")),
                              policy=McpPolicy().trusting()))
    async with raw_session(proxy) as client:
        answer = await client.request(f"{OWN_ID_PREFIX}0", "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}})
        assert isinstance(answer, JSONRPCResponse)
        await client.notify("notifications/initialized")
        listed = await client.request(f"{OWN_ID_PREFIX}list", "tools/list")
        assert isinstance(listed, JSONRPCResponse) and listed.result["tools"]
        await proxy.ready()
        texts = []
        for i, request_id in enumerate(IDS):  # calls (misses, and hits of the predictor's guesses) and a ping
            key = "ab"[i % 2]
            called = await client.request(request_id, "tools/call", {"name": "lookup", "arguments": {"key": key}})
            assert isinstance(called, JSONRPCResponse), called
            texts.append(called.result["content"][0]["text"])
            await proxy.settled()
            pinged = await client.request(f"{request_id}-ping" if isinstance(request_id, str) else -request_id,
                                          "ping")
            assert isinstance(pinged, JSONRPCResponse)
    assert texts == [f"value-of-{'ab'[i % 2]}" for i in range(len(IDS))]


# --- a guess's progress, on the token of the call it serves ---------------------------------------------


class Guesses:
    name = "script"

    def __init__(self, call: ToolCall) -> None:
        self.call = call

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(self.call, 0.9, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def _guessing(call: ToolCall) -> Any:
    def factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
        return Guesses(call), "script"

    return factory


async def _steps(session: Any, n: int, with_progress: bool) -> tuple[str, list[tuple[float, Any, Any]]]:
    seen: list[tuple[float, Any, Any]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    result = await session.call_tool("steps", {"n": n}, progress_callback=progress if with_progress else None)
    return str(result.content[0].text), seen


@pytest.mark.parametrize("handshake", ["legacy", "pinned"])
@pytest.mark.parametrize("with_progress", [True, False], ids=["progress", "no-progress"])
async def test_a_call_served_from_a_guess_gets_its_progress(tmp_path: Path, handshake: str,
                                                            with_progress: bool) -> None:
    command = [sys.executable, str(STATE), str(tmp_path / "log")]
    async with direct(command, handshake) as session:
        expected = await _steps(session, 3, with_progress)
    assert expected[1] == ([(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")] if with_progress
                           else [])
    policy = policy_from_data({"servers": {"state": {"trusted": True}}, "mcp": {"max_upstream_ratio": 4.0}})
    async with proxied(command, policy, handshake, predictor_for=_guessing(ToolCall("steps", {"n": 3}))) \
            as (session, handle):
        await session.list_tools()
        await session.call_tool("peek", {})  # its answer makes the proxy guess steps(n=3)
        await asyncio.sleep(0.2)  # the guess has run, its progress kept
        got = await _steps(session, 3, with_progress)
    assert got == expected
    assert handle.stats.hits == 1


async def test_a_guess_that_serves_nothing_sends_the_client_no_progress(tmp_path: Path) -> None:
    command = [sys.executable, str(STATE), str(tmp_path / "log")]
    stray: list[Any] = []
    policy = policy_from_data({"servers": {"state": {"trusted": True}}, "mcp": {"max_upstream_ratio": 4.0}})
    async with proxied(command, policy, "legacy", predictor_for=_guessing(ToolCall("steps", {"n": 3}))) \
            as (session, handle):
        async def handler(message: Any) -> None:
            stray.append(message)

        session._message_handler = handler  # type: ignore[attr-defined]
        await session.list_tools()
        await session.call_tool("peek", {})
        await asyncio.sleep(0.2)
        got = await _steps(session, 2, True)  # another call: the guess of steps(n=3) serves nothing
    assert got == ("done 2", [(1.0, 2.0, "step 1"), (2.0, 2.0, "step 2")])
    assert handle.stats.hits == 0 and "steps" in handle.speculated
    progress = [m.params for m in stray if "progress" in type(m).__name__.lower()]
    assert len(progress) == 2  # the client's own call's two, nothing of the guess's three
    assert all(not str(p.progress_token).startswith(OWN_ID_PREFIX) for p in progress)


# --- no secret of the command line or the URL in an error or a log ---------------------------------------


async def test_an_upstream_that_exits_is_named_without_its_arguments(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    command = (sys.executable, str(PROBE), str(tmp_path / "log"), f"--api-key={SECRET}")  # it cannot start
    errors = []
    async with raw_session(Proxy(ProxyConfig(command=command))) as client:
        for i, method in enumerate(("initialize", "tools/list", "tools/call", "ping")):
            answer = await client.request(i, method, {"name": "lookup", "arguments": {}} if i == 2 else None)
            assert isinstance(answer, JSONRPCError)
            errors.append(answer.error.message)
    assert all("upstream MCP server is gone" in e and SECRET not in e for e in errors)
    assert all(Path(sys.executable).name in e for e in errors)
    assert SECRET not in caplog.text


def test_an_upstream_that_cannot_start_is_named_without_its_arguments() -> None:
    result = CliRunner().invoke(app, ["mcp-proxy", "--memory", "--", "/nonexistent/server", "--token", SECRET])
    assert result.exit_code == 2 and "cannot start the upstream server" in result.output
    assert SECRET not in result.output and "server" in result.output


@pytest.mark.parametrize("url", [f"http://user:{SECRET}@127.0.0.1:9/mcp", f"http://127.0.0.1:9/mcp?token={SECRET}",
                                 f"https://h.example/mcp#{SECRET}", f"http://[::1]:9/p;{SECRET}?a=1"])
def test_a_url_is_named_without_credentials_or_query(url: str) -> None:
    label = ProxyConfig(url=url).label
    assert SECRET not in label and label.startswith("http")
