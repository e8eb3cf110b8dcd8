"""Which upstream tools may run early: hints count only on trusted servers, the policy file overrides. The
proxy asks the core's one resolution (``McpPolicy.resolve``), for the server's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought import Effect, Policy, ToolPolicy
from forethought._core.policy import Resolved, ServerPolicy
from forethought.mcp.effects import McpPolicy, ProxySettings, load_mcp_policy, policy_from_data
from forethought.mcp.errors import McpPolicyError

HINTS = st.fixed_dictionaries({}, optional={
    "readOnlyHint": st.one_of(st.booleans(), st.none(), st.text(max_size=3), st.integers()),
    "destructiveHint": st.one_of(st.booleans(), st.none()),
    "idempotentHint": st.one_of(st.booleans(), st.none()),
    "openWorldHint": st.one_of(st.booleans(), st.none()),
})


def decide(tool: dict[str, Any], server: ServerPolicy) -> Resolved:
    """The core's resolution of ``tool`` on a server named ``s`` whose table is ``server``."""
    return McpPolicy(Policy(servers={"s": server})).resolve(tool, "s")


def _tool(annotations: Any = None, name: str = "t") -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if annotations is not None:
        tool["annotations"] = annotations
    return tool


@given(HINTS)
def test_untrusted_server_never_runs_anything_early(hints: dict[str, Any]) -> None:
    decision = decide(_tool(hints), ServerPolicy(trusted=False))
    assert decision.effect is Effect.DESTRUCTIVE and not decision.early


@given(HINTS)
def test_trusted_server_runs_early_exactly_the_read_only_hinted(hints: dict[str, Any]) -> None:
    decision = decide(_tool(hints), ServerPolicy(trusted=True))
    assert decision.early == (hints.get("readOnlyHint") is True)


def test_idempotent_or_non_destructive_hints_are_not_read_only() -> None:
    hints = {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}
    assert not decide(_tool(hints), ServerPolicy(trusted=True)).early
    assert not decide(_tool(None), ServerPolicy(trusted=True)).early
    assert not decide(_tool("not a mapping"), ServerPolicy(trusted=True)).early


def test_policy_overrides_effect_speculation_ttl_and_privacy() -> None:
    server = ServerPolicy(trusted=False, tools={
        "q": ToolPolicy(effect=Effect.READ_ONLY, ttl_s=5.0, private=True, cost_units=3.0),
        "r": ToolPolicy(speculate=False),
    })
    q = decide(_tool(None, "q"), server)
    assert (q.effect, q.early, q.ttl_s, q.private, q.cost_units) == (Effect.READ_ONLY, True, 5.0, True, 3.0)
    trusted = ServerPolicy(trusted=True, tools=server.tools)
    assert not decide(_tool({"readOnlyHint": True}, "r"), trusted).early  # denied by policy


def test_policy_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("""
max_calls_per_turn = 4
[mcp]
guesses = 2
min_confidence = 0.5
[servers.sqlite]
trusted = true
[servers.sqlite.tools.write_query]
speculate = false
[servers."*"]
trusted = false
""")
    policy = load_mcp_policy(path)
    assert policy.runtime.max_calls_per_turn == 4
    assert policy.settings == ProxySettings(guesses=2, min_confidence=0.5)
    assert policy.runtime.server("sqlite").trusted and not policy.runtime.server("other").trusted
    assert policy.runtime.server("sqlite").tools["write_query"].speculate is False
    assert policy.resolve({"name": "write_query", "annotations": {"readOnlyHint": True}}, "sqlite").early is False
    assert policy.trusting().runtime.server("other").trusted


@pytest.mark.parametrize(("data", "names"), [
    ({"servers": {"s": {"trusted": "yes"}}}, "servers.s.trusted"),
    ({"servers": {"s": {"colour": 1}}}, "servers.s.colour"),
    ({"servers": {"s": {"tools": {"t": {"effect": "sideways"}}}}}, "tools.t.effect"),
    ({"mcp": {"guesses": 1.5}}, "mcp.guesses"),
    ({"mcp": {"speed": 1}}, "mcp.speed"),
    ({"servers": []}, "servers"),
])
def test_bad_policy_names_the_key(data: dict[str, Any], names: str) -> None:
    with pytest.raises(McpPolicyError, match=names.replace(".", r"\.")):
        policy_from_data(data)


def test_missing_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(McpPolicyError, match="cannot read"):
        load_mcp_policy(tmp_path / "absent.toml")
    assert load_mcp_policy(None) == McpPolicy()
