"""Command-line errors: one line on stderr with exit status 2, a traceback only with --debug.

Also: ``serve-model --script`` validation, and policy tool names that match no registered tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from forethought import Policy, ToolPolicy
from forethought.agent.loop import describe_unknown, unknown_policy_tools
from forethought.cli import app
from forethought.errors import PolicyError

runner = CliRunner()


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("text", ['max_concurrent = "x"\n', "[tools\n", "[tools.f]\nspeculate = 3\n"])
def test_a_bad_policy_is_one_line_with_status_2(tmp_path: Path, text: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    line = _one_line_error(runner.invoke(app, ["bench", "--policy", str(policy)]))
    assert str(policy) in line


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(runner.invoke(app, ["bench", "--policy", str(tmp_path / "absent.toml")]))
    assert "absent.toml" in line


def test_debug_shows_the_real_exception(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('max_concurrent = "x"\n')
    result = runner.invoke(app, ["--debug", "bench", "--policy", str(policy)])
    assert isinstance(result.exception, PolicyError)


@pytest.mark.parametrize(("script", "message"), [
    ('{"responses": [{"text": 3}]}', "responses[0].text"),
    ('{"responses": []}', "non-empty"),
    ("not json", "not JSON"),
    ('{"responses": [{"calls": [{"arguments": {}}]}]}', "responses[0].calls[0]"),
    ('{"ttft_s": -1, "responses": [{"text": "x"}]}', "ttft_s"),
])
def test_serve_model_checks_its_script(tmp_path: Path, script: str, message: str) -> None:
    path = tmp_path / "script.json"
    path.write_text(script)
    assert message in _one_line_error(runner.invoke(app, ["serve-model", "--script", str(path)]))


def test_unknown_policy_tools_are_named_with_a_suggestion() -> None:
    policy = Policy(tools={"serch": ToolPolicy(), "lookup": ToolPolicy(), "zzz": ToolPolicy()})
    unknown = unknown_policy_tools(policy, ["search", "lookup"])
    assert unknown == {"serch": "search", "zzz": None}
    line = describe_unknown(unknown)
    assert "'serch' (did you mean 'search'?)" in line and "'zzz'" in line
    assert unknown_policy_tools(Policy(), ["search"]) == {}
