"""How clients name MCP tools: the names the daemon computes, and that a streamed name maps only by exact
lookup (never parsed, never to the wrong tool)."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given
from hypothesis import strategies as st

from forethought.daemon.naming import CLIENT_READS, CODEX_MAX_NAME, Client, Named, NameTable, model_names

_VALID = re.compile(r"^[A-Za-z0-9_-]+$")


def test_claude_code_names_and_normalises_both_parts() -> None:
    assert model_names(Client.CLAUDE_CODE, "git", "git_status") == ("mcp__git__git_status",)
    assert model_names(Client.CLAUDE_CODE, "my.server", "read file") == ("mcp__my_server__read_file",)


def test_codex_names_old_and_new_forms_and_hashes_long_names() -> None:
    assert model_names(Client.CODEX, "git", "git_status") == ("mcp__git__git_status", "git__git_status")
    long_server = "s" * 40
    raw = f"mcp__{long_server}__tool_with_a_long_name"
    first = model_names(Client.CODEX, long_server, "tool_with_a_long_name")[0]
    assert len(first) == CODEX_MAX_NAME and first.endswith(hashlib.sha1(raw.encode()).hexdigest())


def test_a_name_two_tools_would_get_maps_to_neither() -> None:
    table = NameTable(Client.CLAUDE_CODE, {"a.b": ["x"], "a_b": ["x"], "git": ["status"]})
    assert table.get("mcp__a_b__x") is None  # "a.b" and "a_b" both normalise to a_b
    assert table.get("mcp__git__status") == Named("git", "status")
    assert table.get("mcp__git__other") is None and table.get("status") is None


def test_a_server_known_by_two_names_maps_under_each() -> None:
    table = NameTable(Client.GENERIC, {"git": ["status"], "mcp-git": ["status"]})
    assert table.get("mcp__git__status") == Named("git", "status")
    assert table.get("mcp__mcp-git__status") == Named("mcp-git", "status")
    assert table.get("git__status") == Named("git", "status")


def test_only_known_reads_of_a_client_are_its_reads() -> None:
    claude = NameTable(Client.CLAUDE_CODE, {})
    assert claude.is_client_read("Read") and claude.is_client_read("Grep")
    assert not claude.is_client_read("Bash") and not claude.is_client_read("Edit")
    assert not NameTable(Client.GENERIC, {}).is_client_read("Read")
    assert CLIENT_READS[Client.GENERIC] == frozenset()


names = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1,
                max_size=50)


@given(server=names, tool=names, client=st.sampled_from(list(Client)))
def test_every_computed_name_is_valid_and_maps_back(server: str, tool: str, client: Client) -> None:
    computed = model_names(client, server, tool)
    table = NameTable(client, {server: [tool]})
    for name in computed:
        assert _VALID.match(name), name
        if client is Client.CODEX:
            assert len(name) <= CODEX_MAX_NAME
        assert table.get(name) == Named(server, tool)
    assert model_names(client, server, tool) == computed  # deterministic


@given(servers=st.dictionaries(names, st.lists(names, min_size=1, max_size=4), min_size=1, max_size=5),
       probe=names)
def test_a_lookup_is_never_wrong(servers: dict[str, list[str]], probe: str) -> None:
    """Whatever the registry, a name maps only to a (server, tool) that the client's rule gives that name."""
    table = NameTable(Client.GENERIC, servers)
    for name in [probe, *(n for s, tools in servers.items() for t in tools for n in model_names(Client.GENERIC, s, t))]:
        named = table.get(name)
        if named is not None:
            assert named.tool in servers[named.server]
            assert name in model_names(Client.GENERIC, named.server, named.tool)
