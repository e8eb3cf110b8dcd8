"""Bad command-line inputs are refused up front: one line on stderr, exit status 2, no traceback, no file touched.

Ports out of range, bounds of the gateway's limits, unknown choices (bench, serve-model), upstream URLs and
speculator knobs of ``serve``, ``--memory`` with ``--store``, a corrupt pattern store, help texts, the edges'
tables of a policy file, ``mcp-proxy stats`` per tool, and a client that ends its ``--listen`` session.

Where a wrongly accepted input would go on to serve, the command is also given a second fault that stops it
later (a bad policy, a corrupt store, a non-loopback host, a report directory that cannot be made, an upstream
that does not exist): the test then sees that later error instead of the option's, and fails rather than hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner, Result

from forethought.cli import app

with contextlib.suppress(ImportError):  # no mcp extra: the --listen test skips
    # The SDK binds its stdio client's errlog to sys.stderr when imported: import it now, not while a CliRunner
    # run has swapped sys.stderr for a stream with no file descriptor (the proxy's upstream would not start).
    import mcp.client.stdio  # noqa: F401

runner = CliRunner()
NO_SERVER = "/nonexistent/server"
"""An upstream command that cannot start: a proxy that wrongly accepted its options stops there."""
PROBE = Path(__file__).with_name("mcp_servers") / "probe_server.py"
GATEWAY = ["gateway", "--upstream", "http://127.0.0.1:1/v1", "--no-check-upstream", "--host", "0.0.0.0"]
"""A gateway that stops at its loopback check, after the options are parsed."""


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def corrupt_store(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.sqlite"
    path.write_text("this is not a database\n" * 40)
    return path


@pytest.fixture
def bad_policy(tmp_path: Path) -> Path:
    """A policy ``serve`` refuses (a key no table has): a daemon that wrongly accepted its options stops there."""
    path = tmp_path / "bad.toml"
    path.write_text("no_such_key = 1\n")
    return path


def _serve(tmp_path: Path, *args: str) -> list[str]:
    return ["serve", "--port", "0", "--anthropic-upstream", "", "--openai-upstream", "", "--daemon-file",
            str(tmp_path / "daemon.json"), *args]


# --- 1. ports ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_serve_ports_out_of_range_are_refused(tmp_path: Path, bad_policy: Path, port: str) -> None:
    line = _one_line_error(runner.invoke(app, [*_serve(tmp_path, "--policy", str(bad_policy)), "--port", port]))
    assert "'--port'" in line


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_serve_config_port_out_of_range_is_refused(port: str) -> None:
    line = _one_line_error(runner.invoke(app, ["serve", "config", "--client", "codex", "--port", port]))
    assert "'--port'" in line


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_mcp_proxy_metrics_port_out_of_range_is_refused(port: str) -> None:
    result = runner.invoke(app, ["mcp-proxy", "--memory", "--metrics-port", port, "--", NO_SERVER])
    assert "'--metrics-port'" in _one_line_error(result)


@pytest.mark.parametrize("listen", ["127.0.0.1:70000", "127.0.0.1:65536", ":-5", "[::1]:99999"])
def test_mcp_proxy_listen_port_out_of_range_is_refused(listen: str) -> None:
    line = _one_line_error(runner.invoke(app, ["mcp-proxy", "--memory", "--listen", listen, "--", NO_SERVER]))
    assert "--listen" in line and "65535" in line


# --- 2. a corrupt store -------------------------------------------------------------------------------------

def test_serve_with_a_corrupt_store_is_one_line_and_leaves_it_as_it_was(tmp_path: Path, corrupt_store: Path) -> None:
    before = corrupt_store.read_bytes()
    line = _one_line_error(runner.invoke(app, _serve(tmp_path, "--store", str(corrupt_store))))
    assert line.startswith(f"error: cannot open the pattern store {corrupt_store}: ")
    assert corrupt_store.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.sqlite"]  # no -wal/-shm, nothing announced


# --- 3. the gateway's limits --------------------------------------------------------------------------------

@pytest.mark.parametrize(("option", "value"), [
    ("--max-connections", "0"), ("--max-connections", "-3"), ("--post-wait-s", "-1"), ("--post-wait-s", "nan"),
    ("--max-line-bytes", "-5"), ("--max-line-bytes", "0"), ("--max-keep-alive-s", "0"),
    ("--header-timeout-s", "0"), ("--header-timeout-s", "inf"), ("--body-timeout-s", "-2")])
def test_gateway_limits_out_of_range_are_refused(option: str, value: str) -> None:
    line = _one_line_error(runner.invoke(app, [*GATEWAY, option, value]))
    assert f"'{option}'" in line


# --- 6. choices ---------------------------------------------------------------------------------------------

def test_an_unknown_bench_workload_lists_every_workload(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    line = _one_line_error(runner.invoke(app, ["bench", "--workload", "nope", "--out", str(blocked / "reports")]))
    assert "'--workload'" in line and "nope" in line
    for workload in ("bfcl", "synthetic", "sweep", "paper-table", "code", "mcp", "loop"):
        assert re.search(rf"\b{workload}\b", line), workload


@pytest.mark.parametrize(("option", "allowed"), [("--engine", ("simulated", "vllm")), ("--store", ("local", "redis")),
                                                 ("--grouping", ("step", "turn"))])
def test_unknown_bench_choices_are_refused(tmp_path: Path, option: str, allowed: tuple[str, ...]) -> None:
    blocked = tmp_path / "file"  # a report directory that cannot be made: a bench that accepted the value stops
    blocked.write_text("")
    line = _one_line_error(runner.invoke(app, ["bench", option, "nope", "--out", str(blocked / "reports")]))
    assert f"'{option}'" in line and all(a in line for a in allowed)


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve-model that wrongly accepts its options fails the test instead of serving until interrupted."""
    import forethought.serve.http

    def serve_forever(*args: object, **kwargs: object) -> None:
        raise AssertionError("the options were accepted and served")

    monkeypatch.setattr(forethought.serve.http, "serve_forever", serve_forever)


@pytest.mark.usefixtures("no_serving")
@pytest.mark.parametrize(("option", "value"), [("--grouping", "nope"), ("--grouping", "Turn"),
                                               ("--workload", "nope"), ("--workload", "sweep")])
def test_serve_model_unknown_choices_are_refused(option: str, value: str) -> None:
    line = _one_line_error(runner.invoke(app, ["serve-model", "--workload", "synthetic", option, value]))
    assert f"'{option}'" in line


# --- 7. serve's upstreams and speculator ------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--openai-upstream", "--anthropic-upstream"])
@pytest.mark.parametrize("url", ["ftp://x", "x", "127.0.0.1:8000", "http://", "file:///etc/passwd"])
def test_serve_refuses_an_upstream_that_is_not_http(tmp_path: Path, bad_policy: Path, option: str, url: str) -> None:
    line = _one_line_error(runner.invoke(app, [*_serve(tmp_path, "--policy", str(bad_policy)), option, url]))
    assert option in line and "http" in line


@pytest.mark.parametrize(("option", "value"), [("--speculator-samples", "-3"), ("--speculator-samples", "0"),
                                               ("--speculator-budget", "-5")])
def test_serve_refuses_bad_speculator_knobs(tmp_path: Path, bad_policy: Path, option: str, value: str) -> None:
    line = _one_line_error(runner.invoke(app, [*_serve(tmp_path, "--policy", str(bad_policy)), option, value]))
    assert f"'{option}'" in line


def test_serve_takes_http_upstreams_and_an_empty_one(tmp_path: Path, corrupt_store: Path) -> None:
    args = _serve(tmp_path, "--store", str(corrupt_store), "--anthropic-upstream", "https://api.anthropic.com",
                  "--openai-upstream", "http://127.0.0.1:9/")
    assert "cannot open the pattern store" in _one_line_error(runner.invoke(app, args))  # got as far as the store


# --- 8. help texts, --memory with --store -----------------------------------------------------------------

@pytest.mark.parametrize("command", [["mcp-proxy", "stats"], ["serve"], ["doctor"], ["mcp-proxy"]])
def test_help_texts_have_no_stray_space_before_a_full_stop(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert not re.search(r"\w \.", result.output), result.output
    assert "(default:" in result.output


@pytest.mark.parametrize("command", ["mcp-proxy", "serve"])
def test_memory_and_store_together_are_refused(tmp_path: Path, bad_policy: Path, command: str) -> None:
    store = tmp_path / "store.sqlite"
    both = ["--memory", "--store", str(store)]
    args = [*_serve(tmp_path, "--policy", str(bad_policy)), *both] if command == "serve" else \
        ["mcp-proxy", *both, "--", NO_SERVER]
    line = _one_line_error(runner.invoke(app, args))
    assert "--memory" in line and "--store" in line
    assert not store.exists()


# --- 9. the edges' tables of a policy file -------------------------------------------------------------------

BOTH = "max_calls_per_turn = 4\n[mcp]\nguesses = 2\n[daemon]\n[servers.git]\ntrusted = true\n"
"""One policy file for the proxy and the daemon."""


def test_mcp_proxy_takes_a_policy_with_a_daemon_table(tmp_path: Path) -> None:
    policy = tmp_path / "both.toml"
    policy.write_text(BOTH)
    result = runner.invoke(app, ["mcp-proxy", "config", "--client", "codex", "--policy", str(policy), "--", "x"])
    assert result.exit_code == 0, result.output
    run = runner.invoke(app, ["mcp-proxy", "--memory", "--policy", str(policy), "--", NO_SERVER])
    assert run.exit_code == 2 and "cannot start the upstream server" in run.stderr, run.stderr  # the policy passed


def test_mcp_proxy_still_checks_its_own_table(tmp_path: Path) -> None:
    policy = tmp_path / "typo.toml"
    policy.write_text("[mcp]\nbogus = 2\n[daemon]\n")
    line = _one_line_error(runner.invoke(app, ["mcp-proxy", "--memory", "--policy", str(policy), "--", NO_SERVER]))
    assert "mcp.bogus" in line


@pytest.mark.parametrize(("text", "named"), [("[daemon]\nbogus = 2\n", "daemon.bogus"), ("daemon = 3\n", "daemon"),
                                             ("[mcp]\nguesses = 1\n[daemon]\nport = 7000\n", "daemon.port")])
def test_serve_checks_the_daemon_table(tmp_path: Path, corrupt_store: Path, text: str, named: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    line = _one_line_error(runner.invoke(app, _serve(tmp_path, "--policy", str(policy), "--store",
                                                     str(corrupt_store))))
    assert f"'{named}'" in line and str(policy) in line


@pytest.mark.parametrize("text", [BOTH, "[mcp]\nbogus = 2\n"])
def test_serve_leaves_the_mcp_table_to_the_proxy(tmp_path: Path, corrupt_store: Path, text: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    line = _one_line_error(runner.invoke(app, _serve(tmp_path, "--policy", str(policy), "--store",
                                                     str(corrupt_store))))
    assert "cannot open the pattern store" in line  # the policy passed


# --- 5. mcp-proxy stats per tool ------------------------------------------------------------------------------

def test_stats_text_reports_each_tools_guesses_priced_out(tmp_path: Path) -> None:
    from forethought.mcp.stats import ProxyStats, StatsStore, ToolStats

    path = tmp_path / "store.sqlite"
    store = StatsStore(path)
    try:
        store.add("f" * 16, ProxyStats(sessions=1, calls=5, misses=5, tools={
            "read": ToolStats(calls=3, upstream_calls=3, priced_out=7),
            "list": ToolStats(calls=2, upstream_calls=2, priced_out=0)}))
    finally:
        store.close()
    result = runner.invoke(app, ["mcp-proxy", "stats", "--store", str(path)])
    assert result.exit_code == 0, result.output
    tools = {line.split(":")[0].strip(): line for line in result.stdout.splitlines() if line.startswith("    ")}
    assert "7 guesses priced out" in tools["read"] and "0 guesses priced out" in tools["list"]
    doc = runner.invoke(app, ["mcp-proxy", "stats", "--store", str(path), "--json"])
    assert '"priced_out": 7' in doc.stdout


# --- 4. a client ending its --listen session ------------------------------------------------------------------

async def test_a_client_ending_its_http_session_is_not_logged_as_a_failure(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")
    import socket

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from forethought.mcp.effects import McpPolicy
    from forethought.mcp.http import serve_http
    from forethought.mcp.proxy import Proxy, ProxyConfig

    caplog.set_level(logging.DEBUG, logger="forethought.mcp.http")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proxy = Proxy(ProxyConfig(command=(sys.executable, str(PROBE), str(tmp_path / "log")),
                              policy=McpPolicy().trusting()))
    server = asyncio.create_task(serve_http(proxy, "127.0.0.1", port))

    def ends() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "forethought.mcp.http" and "client session" in r.getMessage()]

    try:
        async with httpx2.AsyncClient() as http:
            for _ in range(400):  # until uvicorn listens (bounded)
                try:
                    await http.get(f"http://127.0.0.1:{port}/metrics")
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                ClientSession(read, write) as session:  # leaving it sends DELETE: the session's normal end
            await session.initialize()
            answer = await session.call_tool("lookup", {"key": "a"})
        for _ in range(400):  # until the server has wound the session up, whichever way (bounded)
            if ends():
                break
            await asyncio.sleep(0.025)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        proxy.close()
    assert answer.content[0].text == "value-of-a"  # type: ignore[union-attr]
    assert [r.getMessage() for r in ends()] != [], "the session never ended"
    assert [r for r in ends() if r.levelno >= logging.WARNING] == [], [r.getMessage() for r in ends()]
