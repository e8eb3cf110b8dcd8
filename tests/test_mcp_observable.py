"""Servers whose reads are observable (issue 28): a server that numbers its answers, logs, rate-limits or bills
reads shows every guess in its state, so a wrong guess shifts what later calls get. The policy says so per
tool (``observable``) or per server (``observable_reads``); such tools run early only where the policy accepts
that (``accept_observable_reads``, ``--accept-observable-reads``), and ``stats`` reports the extra upstream
calls per tool, which is exactly what such a server sees of speculation.

The state server's ``counter()`` answers how many times it was called. A scripted predictor guesses it after
every answer, and the client alternates ``counter`` and ``peek``: every guess after ``counter``'s answer is
wrong, and shows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import ToolCall
from forethought.cli import app
from forethought.mcp.effects import McpPolicy, policy_from_data
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import direct, proxied
from test_mcp_proxy import _dump

STATE = Path(__file__).with_name("mcp_servers") / "state_server.py"
CALLS = ("counter", "peek") * 3


class GuessCounter:
    name = "script"

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(ToolCall("counter", {}), 0.9, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def _factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
    return GuessCounter(), "script"


async def _run(session: Any) -> list[str]:
    await session.list_tools()
    return [_dump(await session.call_tool(name, {})) for name in CALLS]


def _policy(server: dict[str, Any], **top: Any) -> McpPolicy:
    return policy_from_data({"servers": {"state": {"trusted": True, **server}}, "mcp": {"max_upstream_ratio": 4.0},
                             **top})


async def _proxied_run(tmp_path: Path, policy: McpPolicy, store: Path | None = None) -> tuple[list[str], Any]:
    command = [sys.executable, str(STATE), str(tmp_path / "proxy.log")]
    async with proxied(command, policy, "legacy", predictor_for=_factory, store=store) as (session, handle):
        got = await _run(session)
    return got, handle


async def _expected(tmp_path: Path) -> list[str]:
    async with direct([sys.executable, str(STATE), str(tmp_path / "direct.log")], "legacy") as session:
        return await _run(session)


@pytest.mark.parametrize("server", [{"tools": {"counter": {"observable": True}}}, {"observable_reads": True},
                                    {"observable_reads": True, "tools": {"peek": {"observable": False}}}],
                         ids=["tool", "server", "server-with-another-tool-exempt"])
async def test_observable_reads_never_run_early_unless_accepted(tmp_path: Path, server: dict[str, Any]) -> None:
    expected = await _expected(tmp_path)
    got, handle = await _proxied_run(tmp_path, _policy(server))
    assert got == expected, "a guess of an observable read showed in the server's answers"
    assert "counter" not in handle.speculated
    counts = handle.stats.tools["counter"]
    assert (counts.calls, counts.hits, counts.extra_upstream_calls) == (3, 0, 0)


async def test_accepted_observable_reads_run_early_and_their_cost_is_reported(tmp_path: Path) -> None:
    expected = await _expected(tmp_path)
    store = tmp_path / "store.sqlite"
    got, handle = await _proxied_run(tmp_path, _policy({"observable_reads": True}, accept_observable_reads=True),
                                     store=store)
    assert "counter" in handle.speculated
    assert got != expected  # what the user accepted: the wrong guesses show in the server's numbering
    counts = handle.stats.tools["counter"]
    guesses = handle.speculated.count("counter")
    # the client's own requests (a call whose guess was late raced it), and every guess
    assert counts.upstream_calls >= counts.calls - counts.hits + guesses
    assert counts.extra_upstream_calls == counts.upstream_calls - counts.calls >= guesses - counts.hits > 0
    result = CliRunner().invoke(app, ["mcp-proxy", "stats", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    (by_tools,) = [v["tools"] for v in json.loads(result.output)["by_fingerprint"].values()]
    assert by_tools["counter"]["extra_upstream_calls"] == counts.extra_upstream_calls


async def test_a_tool_exempted_from_its_server_s_observable_reads_runs_early(tmp_path: Path) -> None:
    _, handle = await _proxied_run(tmp_path, _policy({"observable_reads": True,
                                                      "tools": {"counter": {"observable": False}}}))
    assert "counter" in handle.speculated


def test_the_flag_accepts_observable_reads() -> None:
    policy = _policy({"observable_reads": True})
    assert policy.runtime.accept_observable_reads is False
    assert policy.accepting_observable_reads().runtime.accept_observable_reads is True
    entry = {"name": "counter", "annotations": {"readOnlyHint": True}}
    assert not policy.resolve(entry, "state").early
    assert policy.accepting_observable_reads().resolve(entry, "state").early
    assert policy.resolve(entry, "state").observable
