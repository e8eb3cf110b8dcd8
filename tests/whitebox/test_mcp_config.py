"""`forethought mcp-proxy config`: each client's documented format, the absolute executable, the trust choice,
and one-line errors for what a user can get wrong (an unknown client, no server, a dead upstream)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought.cli import app
from forethought.errors import ForethoughtError
from forethought.mcp.cli import _lost_upstream, probe_url
from forethought.mcp.config import CLIENTS, proxy_executable, server_name, snippet, toml_string

GIT = ["uvx", "mcp-server-git", "--repository", "/r"]
runner = CliRunner()


def _entry(client: str, text: str, name: str = "git") -> dict[str, Any]:
    """The server entry in ``text``, read the way ``client`` documents its file."""
    if client == "codex":
        entry: dict[str, Any] = tomllib.loads(text)["mcp_servers"][name]
        return entry
    top = "servers" if client == "vscode" else "mcpServers"
    doc = json.loads(text)
    assert list(doc) == [top]
    entry = doc[top][name]
    return entry


@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_client_gets_its_documented_format_with_the_absolute_executable(client: str) -> None:
    result = runner.invoke(app, ["mcp-proxy", "config", "--client", client, "--trust", "--", *GIT])
    assert result.exit_code == 0, result.output
    entry = _entry(client, result.stdout)
    assert os.path.isabs(entry["command"]) and os.access(entry["command"], os.X_OK)
    assert entry["command"] == proxy_executable()[0]
    assert entry["args"][-len(GIT) - 3:] == ["mcp-proxy", "--trust", "--", *GIT]
    documented = {"claude-code": {"type", "command", "args"}, "vscode": {"type", "command", "args"},
                  "claude-desktop": {"command", "args"}, "cursor": {"command", "args"}, "codex": {"command", "args"}}
    assert set(entry) == documented[client]
    if "type" in entry:
        assert entry["type"] == "stdio"
    assert CLIENTS[client].where in result.stderr and CLIENTS[client].documented.startswith("https://")


def test_the_written_command_starts_the_proxy() -> None:
    """The executable in the snippet runs forethought, with no PATH to find it on."""
    entry = _entry("cursor", snippet("cursor", GIT, options=["--trust"]))
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    done = subprocess.run([entry["command"], *entry["args"][: entry["args"].index("mcp-proxy") + 1], "--help"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0 and "--upstream-url" in done.stdout, done.stderr[-2000:]


def test_without_a_forethought_script_the_interpreter_runs_the_module(tmp_path: Path) -> None:
    assert proxy_executable(tmp_path) == [os.path.abspath(sys.executable), "-m", "forethought.cli"]
    entry = _entry("claude-code", snippet("claude-code", GIT, executable=proxy_executable(tmp_path)))
    assert entry["command"] == os.path.abspath(sys.executable)
    assert entry["args"] == ["-m", "forethought.cli", "mcp-proxy", "--", *GIT]


def test_the_trust_choice_is_written_or_its_absence_said() -> None:
    trusted = runner.invoke(app, ["mcp-proxy", "config", "--client", "codex", "--trust", "--", *GIT])
    unsaid = runner.invoke(app, ["mcp-proxy", "config", "--client", "codex", "--", *GIT])
    refused = runner.invoke(app, ["mcp-proxy", "config", "--client", "codex", "--no-trust", "--", *GIT])
    assert "--trust" in _entry("codex", trusted.stdout)["args"]
    assert "--trust" not in _entry("codex", unsaid.stdout)["args"] and "no --trust" in unsaid.stderr
    assert "--trust" not in _entry("codex", refused.stdout)["args"] and "no --trust" not in refused.stderr


def test_policy_and_store_are_written_as_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("policy.toml").write_text("[mcp]\nguesses = 1\n")
    result = runner.invoke(app, ["mcp-proxy", "config", "--client", "vscode", "--policy", "policy.toml",
                                 "--store", "s.sqlite", "--in-process", "--", "uvx", "mcp-server-git",
                                 "--repository", "."])
    assert result.exit_code == 0, result.output
    args = _entry("vscode", result.stdout)["args"]
    assert args[args.index("--policy") + 1] == str(tmp_path / "policy.toml")
    assert args[args.index("--store") + 1] == str(tmp_path / "s.sqlite") and "--in-process" in args
    assert "relative path ." in result.stderr  # said, not rewritten
    assert args[-1] == "."


@pytest.mark.parametrize(("argv", "message"), [
    (["--client", "vim", "--", "x"], "unknown client 'vim': expected one of claude-code, claude-desktop, cursor, "
                                     "codex, vscode"),
    (["--client", "cursor"], "give the server's command after --"),
    (["--client", "cursor", "--name", "", "--", "x"], "entry name is empty"),
    (["--client", "cursor", "--policy", "/nonexistent/p.toml", "--", "x"], "/nonexistent/p.toml"),
])
def test_what_a_user_gets_wrong_is_one_line(argv: list[str], message: str) -> None:
    result = runner.invoke(app, ["mcp-proxy", "config", *argv])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_a_word_that_is_not_unicode_text_is_refused() -> None:
    with pytest.raises(ForethoughtError, match="not valid Unicode"):
        snippet("codex", ["server", "/tmp/\udcff"])


ARGUMENTS = st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), min_size=1, max_size=5)


@given(ARGUMENTS, st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=10))
def test_any_command_and_name_round_trip_through_every_format(command: list[str], name: str) -> None:
    for client in CLIENTS:
        entry = _entry(client, snippet(client, command, name, ["--trust"], executable=["/opt/f t/forethought"]),
                       name)
        assert entry["command"] == "/opt/f t/forethought"
        assert entry["args"] == ["mcp-proxy", "--trust", "--", *command]


@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_toml_strings_parse_back_to_themselves(text: str) -> None:
    assert tomllib.loads(f"x = {toml_string(text)}")["x"] == text


def test_server_names_from_commands() -> None:
    assert server_name(GIT) == "git"
    assert server_name(["npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"]) == "filesystem"


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/mcp", "http://alice:HUNTER2PASS@127.0.0.1:9/mcp",
                                 "http://127.0.0.1:9/mcp?api_key=SEKRIT-QUERY-TOKEN#frag-SECRET"])
def test_a_dead_upstream_url_is_one_line_at_start(url: str) -> None:
    """It used to exit 0 with no word when no request came, and with a 100-line traceback at the first one;
    the line names the upstream without the URL's credentials or query."""
    done = subprocess.run([sys.executable, "-m", "forethought.cli", "mcp-proxy", "--memory", "--upstream-url",
                           url], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120, check=False)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: cannot reach the upstream at http://127.0.0.1:9/mcp: ")
    for secret in ("alice", "HUNTER2PASS", "SEKRIT", "api_key", "SECRET"):
        assert secret not in done.stderr
    with pytest.raises(ForethoughtError, match="missing an 'http://'"):
        probe_url("127.0.0.1:9/mcp")


def test_an_upstream_lost_while_serving_is_one_line() -> None:
    import httpx2

    wrapped = BaseExceptionGroup("task group", [ExceptionGroup("inner", [httpx2.ConnectError("refused")])])
    lost = _lost_upstream(wrapped, (), "http://u/mcp")
    assert lost is not None and str(lost) == "lost the upstream at http://u/mcp: refused"
    assert _lost_upstream(ExceptionGroup("g", [ValueError("a bug")]), (), "u") is None  # a bug still raises
    url = "http://bob:PASSWORD9@u:8080/mcp?token=TOKEN7"
    leaky = httpx2.ConnectError(f"failed for {url} (token=TOKEN7, user bob:PASSWORD9)")
    lost = _lost_upstream(leaky, (), url)
    assert lost is not None and str(lost).startswith("lost the upstream at http://u:8080/mcp: failed for http://u:8080/mcp")
    assert not any(secret in str(lost) for secret in ("PASSWORD9", "TOKEN7", "bob"))
    lost = _lost_upstream(OSError("broken pipe to server --api-key KEY123"), ("server", "--api-key", "KEY123"), None)
    assert lost is not None and str(lost) == "lost the upstream at server: broken pipe to server *** ***"
