"""Command-line errors: one line on stderr with exit status 2, a traceback only with --debug.

Also: ``serve-model --script`` validation, and policy tool names that match no registered tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from forethought import Policy, ToolPolicy
from forethought.agent.loop import describe_unknown, unknown_policy_tools
from forethought.cli import app
from forethought.errors import PolicyError, WorkloadError
from forethought.serve.scripted import parse_script

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


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that is wrongly accepted fails the test instead of serving until interrupted."""
    import forethought.serve.http

    def serve_forever(*args: object, **kwargs: object) -> None:
        raise AssertionError("the script was accepted and served")

    monkeypatch.setattr(forethought.serve.http, "serve_forever", serve_forever)


@pytest.mark.parametrize(("script", "message"), [
    ('{"responses": [{"text": 3}]}', "responses[0].text"),
    ('{"responses": []}', "non-empty"),
    ("not json", "not JSON"),
    ('{"responses": [{"calls": [{"arguments": {}}]}]}', "responses[0].calls[0]"),
    ('{"ttft_s": -1, "responses": [{"text": "x"}]}', "ttft_s"),
    # each of these was a traceback (TypeError, OverflowError) or silently served something else
    ('{"responses": [{"calls": 5}]}', "responses[0].calls must be a list"),
    ('{"ttft_s": NaN, "responses": [{"text": "x"}]}', "NaN is not a JSON number"),
    ('{"responses": [{"calls": [{"name": "f", "arguments": {"a": Infinity}}]}]}', "Infinity is not a JSON number"),
    ('{"ttft_s": 1e999, "responses": [{"text": "x"}]}', "ttft_s must be a non-negative number"),
    ('{"fragment_chars": 1e999, "responses": [{"text": "x"}]}', "fragment_chars must be a whole number"),
    ('{"responses": [{"text": "x", "fragment_chars": 0}]}', "responses[0].fragment_chars"),
    ('{"responses": [{"txt": "x"}]}', "responses[0] has unknown field 'txt'"),
    ('{"respones": [], "responses": [{"text": "x"}]}', "unknown field 'respones'"),
    ('{"loop": "yes", "responses": [{"text": "x"}]}', "loop must be true or false"),
    ('{"responses": [{"calls": [{"name": ""}]}]}', "non-empty string 'name'"),
    ("[" * 100000, "not JSON"),
])
def test_serve_model_checks_its_script(tmp_path: Path, script: str, message: str, no_serving: None) -> None:
    path = tmp_path / "script.json"
    path.write_text(script)
    line = _one_line_error(runner.invoke(app, ["serve-model", "--script", str(path)]))
    assert message in line and str(path) in line


@pytest.mark.parametrize("raw", [b"\xff\xfe{", b'{"responses": [{"text": "\xe9"}]}'])
def test_a_script_that_is_not_utf8_is_one_line(tmp_path: Path, raw: bytes, no_serving: None) -> None:
    path = tmp_path / "script.json"
    path.write_bytes(raw)
    assert "is not UTF-8 text" in _one_line_error(runner.invoke(app, ["serve-model", "--script", str(path)]))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["responses", "text", "calls", "name", "arguments", "ttft_s",
                                                       "chunk_s", "fragment_chars", "loop", "x"]), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_any_json_is_a_script_or_one_clear_error(data: Any) -> None:
    try:
        script = parse_script(data)
    except WorkloadError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert script.responses and all(isinstance(r.text, str) for r in script.responses)
        assert all(r.fragment_chars >= 1 and r.ttft_s >= 0 and r.chunk_s >= 0 for r in script.responses)


def test_unknown_policy_tools_are_named_with_a_suggestion() -> None:
    policy = Policy(tools={"serch": ToolPolicy(), "lookup": ToolPolicy(), "zzz": ToolPolicy()})
    unknown = unknown_policy_tools(policy, ["search", "lookup"])
    assert unknown == {"serch": "search", "zzz": None}
    line = describe_unknown(unknown)
    assert "'serch' (did you mean 'search'?)" in line and "'zzz'" in line
    assert unknown_policy_tools(Policy(), ["search"]) == {}


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "--agents", "x"], "Invalid value for '--agents': expected positive whole numbers"),  # was a traceback
    (["bench", "--agents", "0,4"], "Invalid value for '--agents'"),
    (["bench", "--time-scale", "-1"], "Invalid value for '--time-scale'"),  # was a traceback
    (["bench", "--tool-latency", "-1"], "Invalid value for '--tool-latency'"),  # was a traceback
    (["bench", "--trajectories", "-3"], "Invalid value for '--trajectories'"),  # ran
    (["bench", "--repeats", "0"], "Invalid value for '--repeats'"),  # ran once
    (["bench", "--load", "-2"], "Invalid value for '--load'"),  # failed after the whole run
    (["bench", "--alpha", "1.5"], "Invalid value for '--alpha'"),
    (["bench", "--latencies", "a,b"], "expected comma-separated numbers"),
    (["bench", "--latencies", "nan"], "expected non-negative numbers"),
    (["bench", "--grouping", "x"], "Invalid value for '--grouping'"),
    (["bench", "--bogus"], "No such option: --bogus"),
    (["bench", "--workload", "loop", "--loop-suite", "x"], "suite must be notes or repo"),
    (["bench", "--workload", "loop", "--loop-arms", "direct,nope"], "arms must include direct"),
    (["serve", "--client", "emacs", "--memory"], "unknown client 'emacs'"),
    (["serve", "config", "--client", "nope"], "unknown client 'nope'"),
    (["serve-model", "--port", "70000"], "Invalid value for '--port'"),
    (["serve-model", "--host", "0.0.0.0"], "binds loopback only"),
    (["model", "--alpha", "7"], "alpha must be between 0 and 1"),
    (["no-such-command"], "No such command 'no-such-command'"),
])
def test_a_bad_option_value_is_one_line_with_status_2(argv: list[str], message: str) -> None:
    """Typer's usage errors were a boxed block of lines; some values were tracebacks or ran on regardless."""
    line = _one_line_error(runner.invoke(app, argv))
    assert message in line, line


def test_a_report_directory_that_cannot_be_made_fails_before_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = _one_line_error(runner.invoke(app, ["bench", "--out", str(blocker / "reports")]))
    assert str(blocker) in line  # at once: the bench would otherwise run to its end before failing to write


@pytest.mark.parametrize("content", [b"this is not a database" * 200, b"SQLite format 3\x00" + b"\xff" * 600])
def test_a_store_that_is_not_a_database_is_one_line(tmp_path: Path, content: bytes) -> None:
    store = tmp_path / "store.sqlite"
    store.write_bytes(content)
    line = _one_line_error(runner.invoke(app, ["mcp-proxy", "stats", "--store", str(store)]))
    assert "store.sqlite" in line
