"""The daemon's command line as a user runs it (``forethought serve`` and ``doctor``, mounted on the main one):
``serve`` in a subprocess (its file, its token, its exit),
``serve config`` for each client, ``doctor`` against a live daemon and a missing one, bad flags."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

from forethought.cli import app
from forethought.daemon.cli import load_daemon_policy
from forethought.errors import PolicyError
from forethought.mcp.daemon_link import LINK_PREFIX, TOKEN_HEADER, read_daemon_file

runner = CliRunner()
SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_config_for_claude_code_names_the_gateway_and_every_server_by_absolute_path() -> None:
    result = runner.invoke(app, ["serve", "config", "--client", "claude-code", "--port", "7400",
                                 "--server", f"git={sys.executable} -m mcp_server_git --repository /repo"])
    assert result.exit_code == 0, result.output
    env, _, mcp = result.output.partition("\n\n")
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:7400/anthropic" in env
    entry = json.loads(mcp[mcp.index("{"):])["mcpServers"]["git"]
    assert os.path.isabs(entry["command"])
    assert entry["args"][:5] == ["mcp-proxy", "--daemon", "http://127.0.0.1:7400", "--name", "git"]
    assert entry["args"][5:] == ["--", sys.executable, "-m", "mcp_server_git", "--repository", "/repo"]


def test_config_for_codex_is_valid_toml_with_a_responses_provider() -> None:
    result = runner.invoke(app, ["serve", "config", "--client", "codex", "--server", "notes=python3 -m notes"])
    assert result.exit_code == 0, result.output
    config = tomllib.loads(result.output)
    assert config["model_provider"] == "forethought"
    provider = config["model_providers"]["forethought"]
    assert provider["base_url"] == "http://127.0.0.1:7337/openai/v1" and provider["wire_api"] == "responses"
    assert provider["env_key"] == "OPENAI_API_KEY"
    server = config["mcp_servers"]["notes"]
    assert os.path.isabs(server["command"]) and os.path.isabs(server["args"][server["args"].index("--") + 1])


def test_config_for_cursor_links_servers_and_says_the_model_path_is_not_local() -> None:
    result = runner.invoke(app, ["serve", "config", "--client", "cursor", "--server", "notes=python3 -m notes"])
    assert result.exit_code == 0 and "Cursor's own service" in result.output
    assert json.loads(result.output[result.output.index("{"):])["mcpServers"]["notes"]["args"][0] == "mcp-proxy"


@pytest.mark.parametrize("args", [["--client", "nope"], ["--client", "codex", "--server", "no-equals-sign"],
                                  ["--client", "codex", "--server", "bad key=cmd"],
                                  ["--client", "codex", "--server", "k="]])
def test_bad_config_flags_are_one_line_and_status_2(args: list[str]) -> None:
    result = runner.invoke(app, ["serve", "config", *args])
    assert result.exit_code == 2 and result.output.count("\n") <= 1


def test_a_policy_file_leaves_the_edges_tables_to_them_and_names_a_bad_key(tmp_path: Path) -> None:
    good = tmp_path / "p.toml"
    good.write_text('max_calls_per_turn = 4\n[mcp]\nguesses = 2\nnot_checked_here = 1\n[daemon]\n'
                    '[servers.git]\ntrusted = true\n')
    policy = load_daemon_policy(good, trust=False)
    assert policy.max_calls_per_turn == 4 and policy.server("git").trusted and not policy.trust_servers
    assert load_daemon_policy(None, trust=True).trust_servers
    bad = tmp_path / "bad.toml"
    bad.write_text("no_such_key = 1\n")
    with pytest.raises(PolicyError, match="no_such_key"):
        load_daemon_policy(bad)
    bad.write_text("[daemon]\nanything = 1\n")  # the daemon's own table: it reads no key yet
    with pytest.raises(PolicyError, match=r"daemon\.anything"):
        load_daemon_policy(bad)


def test_serve_announces_itself_privately_links_shims_answers_doctor_and_exits_on_sigterm(tmp_path: Path) -> None:
    announce = tmp_path / "run" / "daemon.json"
    env = {**os.environ, "PYTHONPATH": SRC, "FORETHOUGHT_BACKOFF": "off"}
    process = subprocess.Popen([sys.executable, "-m", "forethought.cli", "serve", "--port", "0", "--memory",
                                "--anthropic-upstream", "http://127.0.0.1:9", "--openai-upstream", "",
                                "--daemon-file", str(announce)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not announce.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        assert stat.S_IMODE(announce.stat().st_mode) == 0o600
        assert stat.S_IMODE(announce.parent.stat().st_mode) == 0o700
        url, token = read_daemon_file(announce)
        assert url.startswith("http://127.0.0.1:")
        registered = httpx2.post(f"{url}{LINK_PREFIX}/register", json={"names": ["notes"], "tools": [
            {"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]},
            headers={TOKEN_HEADER: token})
        assert registered.status_code == 200
        doctor = runner.invoke(app, ["doctor", "--daemon-file", str(announce), "--json"])
        checks = {c["name"]: c for c in json.loads(doctor.output)}
        assert checks["daemon"]["ok"] and checks["link"]["ok"] and checks["upstream anthropic"]["ok"] is False
        assert checks["upstream openai"]["ok"] is None and "server notes" in checks
        assert "run early: none" in checks["server notes"]["detail"]  # not trusted: nothing early
        assert doctor.exit_code == 1  # the upstream is down
        assert token not in doctor.output
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "forethought serve: http://127.0.0.1:" in stderr and "calls claimed" in stderr and token not in stderr
    assert not announce.exists()  # removed at exit


def test_doctor_without_a_daemon_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["doctor", "--daemon-file", str(tmp_path / "none.json")])
    assert result.exit_code == 1 and "is `forethought serve` running?" in result.output


def test_doctor_refuses_a_daemon_file_others_can_read(tmp_path: Path) -> None:
    announce = tmp_path / "daemon.json"
    announce.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "t"}))
    announce.chmod(0o644)
    result = runner.invoke(app, ["doctor", "--daemon-file", str(announce)])
    assert result.exit_code == 1 and "readable by others" in result.output


def test_serve_refuses_an_unknown_client_in_one_line() -> None:
    result = runner.invoke(app, ["serve", "--client", "emacs", "--memory"])
    assert result.exit_code == 2 and "unknown client 'emacs'" in result.output
