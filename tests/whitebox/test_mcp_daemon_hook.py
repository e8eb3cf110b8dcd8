"""``forethought mcp-proxy --daemon URL``: the real proxy linked to a real daemon, in front of a real MCP server.

The daemon runs in-process (``serve_daemon``) with the link API only (no model upstream); a speculation is
launched in one of its conversations the way a streamed call launches it, so each test orders jobs, claims
and writes exactly. The proxy runs in-process on memory streams (as tests/whitebox/test_mcp_proxy.py runs it), or as
the command a client starts (a subprocess on pipes, so it warm-starts). The server is
tests/mcp_servers/state_server.py, which logs every call with its request id: what reached it, early or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import PaginatedRequestParams

import forethought
from forethought import ToolCall
from forethought._core.policy import Policy, ServerPolicy
from forethought._core.versions import StateVersion
from forethought.cli import app
from forethought.daemon import Client, Daemon, DaemonConfig, Upstreams, serve_daemon
from forethought.daemon.shims import Shim
from forethought.mcp.daemon_hook import LOOPBACK, DaemonAddress, daemon_address, parse_daemon_url
from forethought.mcp.effects import McpPolicy, policy_from_data
from forethought.mcp.errors import McpProxyError
from forethought.mcp.pipes import fd_streams
from forethought.mcp.proxy import Proxy, ProxyConfig
from forethought.mcp.upstream import OWN_ID_PREFIX
from forethought.mcp.warmup import WarmStart
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import free_guesses
from test_mcp_warmup import INIT, PipeClient

SERVERS = Path(__file__).parent.with_name("mcp_servers")
STATE = SERVERS / "state_server.py"
PAGED = SERVERS / "paged_server.py"
TRUSTED = Policy(servers={"*": ServerPolicy(trusted=True)})
SRC = Path(forethought.__file__).resolve().parents[1]
WAIT = 500
"""Turns of 10 ms a test waits at most for something the daemon or the proxy does in the background."""
DOWN = "daemon link is down"


class AlwaysRead:
    """Guesses ``read()`` after every answer: a proxy that guesses at all guesses it."""

    name = "always"

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(ToolCall("read", {}), 1.0, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def always_read(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
    return AlwaysRead(), "always"


def server_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def own(entry: Mapping[str, Any]) -> bool:
    """Whether the server received this call under an id of the proxy's own (an early run or a guess)."""
    return str(entry["id"]).startswith(OWN_ID_PREFIX)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def daemon_running(tmp_path: Path) -> AsyncIterator[Daemon]:
    config = DaemonConfig(Upstreams(None, None), Client.CLAUDE_CODE, TRUSTED, patterns=False,
                          daemon_file=tmp_path / "daemon.json")
    async with serve_daemon(config) as daemon:
        yield daemon


def address(daemon: Daemon) -> DaemonAddress:
    return DaemonAddress(daemon.url, daemon.token)


@contextlib.asynccontextmanager
async def linked(command: Sequence[str], where: DaemonAddress, name: str | None = "st",
                 policy: McpPolicy | None = None) -> AsyncIterator[tuple[ClientSession, Proxy]]:
    """A client session through an in-process proxy linked to the daemon at ``where``. The proxy (trusting its
    server, by default) would guess ``read()`` after every answer (priced free), and each ``call_tool`` returns
    once it has made the guesses its answer owes: so a test sees whether it guessed."""
    proxy = Proxy(ProxyConfig(command=tuple(command), policy=free_guesses(policy or McpPolicy().trusting()), name=name,
                              daemon=where),
                  predictor_for=always_read)
    to_proxy, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, from_proxy = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    serving = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))
    try:
        async with ClientSession(from_proxy, to_proxy) as session:
            await session.initialize()
            plain = session.call_tool

            async def settled_call(*args: Any, **kwargs: Any) -> Any:
                result = await plain(*args, **kwargs)
                await asyncio.wait_for(proxy.settled(), 60)
                return result

            session.call_tool = settled_call  # type: ignore[method-assign]
            yield session, proxy
    finally:
        to_proxy.close()
        await asyncio.wait_for(serving, 30)
        proxy.close()


async def registered(daemon: Daemon, tools: int | None = None) -> Shim:
    """The one shim linked to ``daemon``, once its job stream is open (and it has ``tools`` tools)."""
    def ready() -> bool:
        live = daemon.shims.live()
        return len(live) == 1 and live[0].streaming and (tools is None or len(live[0].tools) == tools)

    await until(ready, "the proxy registered and opened its job stream")
    return daemon.shims.live()[0]


def launch_read(daemon: Daemon, key: str = "st") -> None:
    """A conversation offering the server's ``read``, with ``read()`` launched as a streamed call launches it."""
    from forethought.daemon.transcript import read_request
    from forethought.daemon.wire import Wire

    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": f"mcp__{key}__read", "input_schema": {"type": "object", "properties": {}}}]}
    transcript = read_request(Wire.MESSAGES, body)
    conversation = daemon.conversations.get(transcript.key)
    conversation.begin(transcript, [], 0.0)
    early = conversation.early[f"mcp__{key}__read"]
    ticket = conversation.session.speculate(early.call({}), source="stream", confidence=1.0)
    assert ticket.launched


def text(result: Any) -> str:
    return str(result.content[0].text)


# --- (a) registration --------------------------------------------------------------------------------------

async def test_the_proxy_registers_its_server_names_and_tools_with_annotations(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with daemon_running(tmp_path) as daemon, linked([sys.executable, str(STATE), str(log)],
                                                          address(daemon)) as (session, _):
        listed = await session.list_tools()
        shim = await registered(daemon)
        status = daemon.status()["servers"]
    assert shim.names == ("st", "state")  # --name (the client's key) first, then the server's own name
    assert set(shim.tools) == {t.name for t in listed.tools}
    assert shim.tools["read"].annotations == {"readOnlyHint": True}
    assert shim.tools["write"].annotations is None and "value" in shim.tools["write"].schema["properties"]
    early = {t["name"]: t["early"] for t in status[0]["tools"]}
    assert early["read"] and not early["write"]  # the daemon's policy, on the annotations as listed


async def test_a_changed_tool_list_is_registered_again(tmp_path: Path) -> None:
    async with daemon_running(tmp_path) as daemon, linked([sys.executable, str(PAGED)], address(daemon),
                                                          name=None) as (session, _):
        cursor = None
        while True:  # the client lists every page
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            cursor = page.next_cursor
            if cursor is None:
                break
        shim = await registered(daemon, tools=3)
        assert shim.names == ("paged",)  # no --name: the server's own
        added = await session.call_tool("add_tool", {})  # the server says its list changed; the client re-lists not
        await registered(daemon, tools=4)
    assert text(added) == "echo_3" and "echo_3" in shim.tools


# --- (b) a job, then a hit ----------------------------------------------------------------------------------

async def test_the_daemons_early_run_serves_the_clients_call_and_the_server_sees_it_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with daemon_running(tmp_path) as daemon, linked([sys.executable, str(STATE), str(log)],
                                                          address(daemon)) as (session, proxy):
        await session.list_tools()
        shim = await registered(daemon)
        launch_read(daemon)
        await until(lambda: shim.answers == 1, "the proxy ran the job and posted its answer")
        result = await session.call_tool("read", {})
        claims = daemon.status()["claims"]
        stats = proxy.current()
    assert text(result) == "initial"
    calls = server_log(log)
    assert [c["tool"] for c in calls] == ["read"] and own(calls[0])  # once, early, under the proxy's own id
    assert claims["hits"] == 1 and claims["runs"] == 0
    assert (stats.calls, stats.hits, stats.speculative_calls) == (1, 1, 1)


# --- (c) a run: the client's own request, verbatim ---------------------------------------------------------

async def test_a_run_sends_the_clients_request_verbatim_and_reports_it_done(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with daemon_running(tmp_path) as daemon, linked([sys.executable, str(STATE), str(log)],
                                                          address(daemon)) as (session, proxy):
        await session.list_tools()
        await registered(daemon)
        wrote = await session.call_tool("write", {"value": "new", "delay_s": 0})
        after_write = dict(daemon.status()["claims"])
        read = await session.call_tool("read", {})
        claims = daemon.status()["claims"]
        guessed = proxy.links[-1].speculative_calls
    assert (text(wrote), text(read)) == ("written", "new")
    calls = server_log(log)
    assert [c["tool"] for c in calls] == ["write", "read"]
    assert [c["id"] for c in calls] == ["3", "4"]  # the client's own ids (the SDK's: initialize 1, tools/list 2)
    assert calls[0]["args"]["value"] == "new"
    assert after_write["runs"] == 1 and after_write["open_runs"] == 0  # reported done before the client's answer
    assert claims["runs"] == 2 and claims["hits"] == 0 and claims["open_runs"] == 0
    assert guessed == 0  # linked, the proxy guesses nothing itself (unlinked, it guesses read() after each answer)


async def test_a_cancelled_call_is_reported_so_the_daemon_ends_its_write(tmp_path: Path) -> None:
    """The server never answers a cancelled call; the proxy counts it ended ``abandoned_s`` later, and so must
    the daemon (else its write would be in progress until the proxy leaves, and nothing would be served)."""
    log = tmp_path / "log"
    quick = policy_from_data({"servers": {"*": {"trusted": True}}, "mcp": {"abandoned_s": 0.2}})
    async with daemon_running(tmp_path) as daemon, linked([sys.executable, str(STATE), str(log)], address(daemon),
                                                          policy=quick) as (session, _):
        await session.list_tools()
        await registered(daemon)
        call = asyncio.create_task(session.call_tool("write", {"value": "late", "delay_s": 60}))
        await until(lambda: daemon.desk.open_runs == 1 and bool(server_log(log)), "the write reached the server")
        call.cancel()  # the SDK tells the proxy, which tells the server; the server writes on and never answers
        await until(lambda: daemon.desk.open_runs == 0, "the cancelled run was reported")
        after = await session.call_tool("read", {})
    assert text(after) == "initial" and daemon.desk.counts.runs == 2


# --- (d) no daemon, or a daemon that goes ------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_daemon_not_there_is_one_warning_and_the_plain_proxy_answers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    log = tmp_path / "log"
    nowhere = DaemonAddress(f"http://127.0.0.1:{_free_port()}", "token")
    async with linked([sys.executable, str(STATE), str(log)], nowhere) as (session, proxy):
        await session.list_tools()
        await until(lambda: not proxy.daemons[-1].in_charge, "the link found no daemon")
        texts = [text(await session.call_tool("read", {})) for _ in range(3)]
        texts.append(text(await session.call_tool("write", {"value": "v", "delay_s": 0})))
        texts.append(text(await session.call_tool("read", {})))
        stats = proxy.current()
    assert texts == ["initial"] * 3 + ["written", "v"]
    assert sum(DOWN in r.getMessage() for r in caplog.records) == 1
    clients = [c for c in server_log(log) if not own(c)]
    # every call answered: by the server, or by a guess of the proxy's; a client's call also goes upstream
    # when the guess it would claim runs past the hedge (a loaded machine), but never twice
    assert len(clients) + stats.hits >= 5 and len({c["id"] for c in clients}) == len(clients) <= 5
    assert stats.speculative_calls > 0  # the plain proxy guesses again


async def test_a_daemon_that_goes_mid_session_is_one_warning_and_nothing_is_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    log = tmp_path / "log"
    gone_daemon = daemon_running(tmp_path)
    daemon = await gone_daemon.__aenter__()
    running = True
    try:
        async with linked([sys.executable, str(STATE), str(log)], address(daemon)) as (session, proxy):
            await session.list_tools()
            await registered(daemon)
            first = await session.call_tool("write", {"value": "one", "delay_s": 0})
            assert proxy.links[-1].speculative_calls == 0
            running = False
            await gone_daemon.__aexit__(None, None, None)
            await until(lambda: not proxy.daemons[-1].in_charge, "the proxy saw the daemon go")
            second = await session.call_tool("read", {})
            third = await session.call_tool("write", {"value": "two", "delay_s": 0})
            fourth = await session.call_tool("read", {})
            stats = proxy.current()
    finally:
        if running:
            await gone_daemon.__aexit__(None, None, None)
    assert [text(r) for r in (first, second, third, fourth)] == ["written", "one", "written", "two"]
    assert sum(DOWN in r.getMessage() for r in caplog.records) == 1
    clients = [c for c in server_log(log) if not own(c)]
    assert [c["tool"] for c in clients if c["tool"] == "write"] == ["write", "write"]
    assert len(clients) + stats.hits >= 4 and len({c["id"] for c in clients}) == len(clients) <= 4  # as above


# --- warm start: tools relayed before the proxy loaded ------------------------------------------------------

async def test_a_warm_started_session_registers_the_tools_it_adopted(tmp_path: Path) -> None:
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    clock = StateVersion()
    warm = WarmStart([sys.executable, str(STATE), str(tmp_path / "log")], clock, client_in=down_r, client_out=up_w)
    client = PipeClient(down_w, up_r)
    client.request(1, "initialize", INIT)
    assert "result" in await client.answer(1)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    client.request(2, "tools/list")
    assert "result" in await client.answer(2)
    handoff = warm.handoff()
    async with daemon_running(tmp_path) as daemon:
        proxy = Proxy(ProxyConfig(command=("unused",), policy=McpPolicy(), name="st", daemon=address(daemon)),
                      clock=clock)
        async with fd_streams(down_r, up_w, handoff.client_rest) as (read, write):
            serving = asyncio.create_task(proxy.serve_session(read, write, handoff))
            shim = await registered(daemon)  # from the listing relayed during warm-up: the client lists no more
            launch_read(daemon)
            await until(lambda: shim.answers == 1, "the job ran")
            client.request(3, "tools/call", {"name": "read", "arguments": {}})
            answer = await client.answer(3)
            claims = daemon.status()["claims"]
            os.close(down_w)
            await asyncio.wait_for(serving, 30)
        proxy.close()
    assert shim.names == ("st", "state") and {"read", "write"} <= set(shim.tools)
    assert answer["result"]["content"][0]["text"] == "initial" and claims["hits"] == 1


# --- the command a client starts ---------------------------------------------------------------------------

async def test_the_command_links_warm_starts_and_serves_hits_and_runs(tmp_path: Path) -> None:
    log, errlog = tmp_path / "log", tmp_path / "stderr.txt"
    async with daemon_running(tmp_path) as daemon:
        params = StdioServerParameters(
            command=sys.executable, env={**os.environ, "PYTHONPATH": str(SRC)},
            args=["-m", "forethought.cli", "mcp-proxy", "--memory", "--daemon", daemon.url, "--daemon-file",
                  str(tmp_path / "daemon.json"), "--name", "st", "--", sys.executable, str(STATE), str(log)])
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                shim = await registered(daemon)
                launch_read(daemon)
                await until(lambda: shim.answers == 1, "the job ran")
                hit = await session.call_tool("read", {})
                wrote = await session.call_tool("write", {"value": "new", "delay_s": 0})
                claims = daemon.status()["claims"]
        await until(lambda: not daemon.shims.live(), "the proxy left the daemon")
    assert (text(hit), text(wrote)) == ("initial", "written")
    assert claims["hits"] == 1 and claims["runs"] == 1 and claims["open_runs"] == 0
    assert [(c["tool"], own(c)) for c in server_log(log)] == [("read", True), ("write", False)]
    stderr = errlog.read_text()
    assert DOWN not in stderr and "error" not in stderr.lower()


# --- (e) a wrong --daemon ----------------------------------------------------------------------------------

def _announce(path: Path, url: str) -> Path:
    path.write_text(json.dumps({"url": url, "token": "secret-token", "pid": 1}))
    return path


@pytest.mark.parametrize(("daemon", "file", "says"), [
    ("not a url", "good", "--daemon 'not a url'"),
    ("https://127.0.0.1:7337", "good", "http://127.0.0.1:PORT"),
    ("http://example.com:7337", "good", "loopback"),
    ("http://127.0.0.1", "good", "http://127.0.0.1:PORT"),
    ("http://127.0.0.1:7337/anthropic", "good", "nothing after it"),
    ("http://127.0.0.1:7337", "garbage", "not usable"),
    ("http://127.0.0.1:7337", "other-port", "another port"),
    (None, "good", "--daemon-file needs --daemon"),
])
def test_a_wrong_daemon_is_one_line_and_exit_2_before_the_server_starts(
        tmp_path: Path, daemon: str | None, file: str, says: str) -> None:
    files = {"good": _announce(tmp_path / "good.json", "http://127.0.0.1:7337"), "missing": tmp_path / "none.json",
             "other-port": _announce(tmp_path / "other.json", "http://127.0.0.1:7338"),
             "garbage": tmp_path / "garbage.json"}
    files["garbage"].write_text("[1, 2]")
    marker = tmp_path / "started"
    args = ["mcp-proxy", "--memory", *(["--daemon", daemon] if daemon is not None else []), "--daemon-file",
            str(files[file]), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    result = CliRunner().invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and says in lines[0], result.output
    assert "secret-token" not in result.output and not marker.exists()


def test_a_daemon_that_is_not_running_leaves_a_plain_proxy_with_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """forethought serve removes its file when it stops: every client's shim must still start, unlinked."""
    from forethought.mcp.cli import _daemon

    assert _daemon("http://127.0.0.1:7337", tmp_path / "none.json") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no daemon file" in err[0] and "plain proxy" in err[0]
    with pytest.raises(typer.Exit):  # a wrong URL is still a configuration error, file or not
        _daemon("https://127.0.0.1:7337", tmp_path / "none.json")


def test_the_daemon_file_defaults_to_the_daemons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_DAEMON_FILE", str(_announce(tmp_path / "d.json", "http://localhost:7337/")))
    found = daemon_address("http://127.0.0.1:7337/")
    assert found == DaemonAddress("http://127.0.0.1:7337", "secret-token") and "secret" not in repr(found)


URLS = st.one_of(
    st.text(max_size=40),
    st.builds(lambda scheme, host, port, tail: f"{scheme}://{host}{port}{tail}",
              st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
              st.sampled_from(["127.0.0.1", "localhost", "[::1]", "LOCALHOST", "example.com", "10.0.0.1", "", "[::1"]),
              st.one_of(st.just(""), st.integers(-1, 70000).map(lambda p: f":{p}"),
                        st.text(max_size=4).map(":{}".format)),
              st.sampled_from(["", "/", "/x", "?a=1", "#f", "/ ", "\n"])))


@given(URLS)
def test_a_daemon_url_is_a_loopback_http_base_or_one_line_refused(url: str) -> None:
    try:
        base = parse_daemon_url(url)
    except McpProxyError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--daemon ")
        return
    assert base == parse_daemon_url(base)  # normal form
    scheme, rest = base.split("://")
    host, port = rest.rsplit(":", 1)
    assert scheme == "http" and host.strip("[]") in LOOPBACK and 0 < int(port) < 65536
