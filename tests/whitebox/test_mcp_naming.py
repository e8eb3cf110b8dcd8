"""A policy's ``[servers.NAME]`` tables apply under every handshake the ``mcp`` SDK speaks (issue 28).

The 2026 client opens with ``server/discover`` (or no handshake at all), where the proxy once learnt a name
only from ``initialize``: every named table was ignored silently, so under ``--trust`` a tool the policy calls
destructive ran early, ``trusted = true`` gave no early reads, and a private tool's arguments reached the
pattern store. Here each of those is attacked under each handshake, against a real SDK server; a server that
never says its name makes resolution fail closed (nothing early, nothing stored) and says so. The unit tests
of :class:`ServerName` attack the handshake bookkeeping itself: answer orders, refusals, the proxy's own probe.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

from forethought.mcp.effects import McpPolicy, policy_from_data
from forethought.telemetry import Event, EventKind
from mcp_handshakes import HANDSHAKES, direct, proxied
from test_mcp_proxy import _dump

SERVERS = Path(__file__).parent.with_name("mcp_servers")
KEYS = ("a", "b") * 4
SECRET = "zebra-secret-1729"


def _probe(log: Path) -> list[str]:
    return [sys.executable, str(SERVERS / "probe_server.py"), str(log)]


def _anonymous(log: Path) -> list[str]:
    return [sys.executable, str(SERVERS / "anonymous_server.py"), str(log)]


async def _lookups(session: Any, keys: tuple[str, ...] = KEYS) -> list[str]:
    out = [_dump(await session.list_tools())]
    for key in keys:
        out.append(_dump(await session.call_tool("lookup", {"key": key})))
    return out


async def _expected(command: list[str], handshake: str, keys: tuple[str, ...] = KEYS) -> list[str]:
    async with direct(command, handshake) as session:
        return await _lookups(session, keys)


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_a_trusted_table_speculates_under_every_handshake(tmp_path: Path, handshake: str) -> None:
    expected = await _expected(_probe(tmp_path / "direct.log"), handshake)
    policy = policy_from_data({"servers": {"probe": {"trusted": True}}})  # no --trust: only the table trusts
    async with proxied(_probe(tmp_path / "proxy.log"), policy, handshake) as (session, handle):
        got = await _lookups(session)
    assert got == expected
    assert handle.stats.hits > 0, "trusted = true in [servers.probe] gave no early reads"
    assert set(handle.speculated) == {"lookup"}


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_a_tool_the_table_calls_destructive_never_runs_early_under_trust(tmp_path: Path,
                                                                              handshake: str) -> None:
    expected = await _expected(_probe(tmp_path / "direct.log"), handshake)
    policy = policy_from_data({"servers": {"probe": {"tools": {"lookup": {"effect": "destructive"}}}}}).trusting()
    async with proxied(_probe(tmp_path / "proxy.log"), policy, handshake) as (session, handle):
        got = await _lookups(session)
    assert got == expected
    assert handle.speculated == [], "a tool the policy calls destructive ran early"
    assert handle.stats.hits == 0 and handle.stats.speculative_calls == 0


def _stored_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store.parent.glob(store.name + "*"))


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_a_private_tool_is_never_learnt_or_stored(tmp_path: Path, handshake: str) -> None:
    keys = (SECRET, "other") * 4
    expected = await _expected(_probe(tmp_path / "direct.log"), handshake, keys)
    store = tmp_path / "store.sqlite"
    policy = policy_from_data({"servers": {"probe": {"tools": {"lookup": {"private": True}}}}}).trusting()
    async with proxied(_probe(tmp_path / "proxy.log"), policy, handshake, store=store) as (session, _):
        got = await _lookups(session, keys)
    assert got == expected
    assert store.exists()
    assert SECRET.encode() not in _stored_bytes(store), "a private tool's argument reached the pattern store"


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_a_private_tool_s_name_is_not_learnt_from_the_calls_of_other_tools(tmp_path: Path,
                                                                                handshake: str) -> None:
    store = tmp_path / "store.sqlite"
    policy = policy_from_data({"servers": {"probe": {"tools": {"lookup": {"private": True}}}}}).trusting()
    async with proxied(_probe(tmp_path / "proxy.log"), policy, handshake, store=store) as (session, _):
        for key in ("a", "b") * 4:
            await session.call_tool("lookup", {"key": key})
            await session.call_tool("slow", {"seconds": 0})
    assert store.exists()
    assert b"lookup" not in _stored_bytes(store), "a private tool was learnt as a candidate of the others' calls"


async def test_the_name_given_on_the_command_line_wins(tmp_path: Path) -> None:
    command = _probe(tmp_path / "proxy.log")
    policy = policy_from_data({"servers": {"probe": {"trusted": True}}})
    async with proxied(command, policy, "discover", name="elsewhere") as (session, handle):
        await _lookups(session)
    assert handle.speculated == []  # the table of probe is not this server's: nothing is trusted
    policy = policy_from_data({"servers": {"elsewhere": {"trusted": True}}})
    async with proxied(command, policy, "discover", name="elsewhere") as (session, handle):
        await _lookups(session)
    assert handle.stats.hits > 0


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_a_server_that_never_says_its_name_fails_closed_and_says_so(
        tmp_path: Path, handshake: str, caplog: pytest.LogCaptureFixture) -> None:
    keys = (SECRET, "other") * 4
    expected = await _expected(_anonymous(tmp_path / "direct.log"), handshake, keys)
    store = tmp_path / "store.sqlite"
    policy = policy_from_data({"servers": {"probe": {"trusted": True}, "*": {"trusted": True}}})
    events: list[Event] = []
    caplog.set_level(logging.WARNING)
    async with proxied(_anonymous(tmp_path / "proxy.log"), policy, handshake, store=store) as (session, handle):
        handle.proxy.runtime.telemetry.subscribe(events.append)
        got = await _lookups(session, keys)
    assert got == expected
    assert handle.speculated == [] and handle.stats.hits == 0  # nothing of it runs early
    assert SECRET.encode() not in _stored_bytes(store)  # and it is private
    assert any(e.kind is EventKind.POLICY for e in events)
    assert "did not say its name" in caplog.text


@pytest.mark.parametrize("handshake", HANDSHAKES)
async def test_without_named_tables_an_unknown_name_still_gets_the_any_table(tmp_path: Path, handshake: str) -> None:
    policy = policy_from_data({"servers": {"*": {"trusted": True}}})
    async with proxied(_anonymous(tmp_path / "proxy.log"), policy, handshake) as (session, handle):
        await _lookups(session)
    assert handle.stats.hits > 0  # failing closed is for tables that cannot be matched, not for "*"


async def test_a_trusting_policy_without_tables_speculates_an_anonymous_server(tmp_path: Path) -> None:
    async with proxied(_anonymous(tmp_path / "proxy.log"), McpPolicy().trusting(), "pinned") as (session, handle):
        await _lookups(session)
    assert handle.stats.hits > 0


# --- the bookkeeping, unit by unit --------------------------------------------------------------------------

from forethought._core.policy import UNKNOWN_SERVER  # noqa: E402
from forethought.mcp.naming import SERVER_INFO_KEY, VERSION_KEY, ServerName  # noqa: E402

ENVELOPE = {VERSION_KEY: "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}


def _request(i: Any, method: str, meta: dict[str, Any] | None = None) -> JSONRPCRequest:
    return JSONRPCRequest(jsonrpc="2.0", id=i, method=method, params={"_meta": meta} if meta is not None else None)


def _result(i: Any, result: dict[str, Any]) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=i, result=result)


def _error(i: Any) -> JSONRPCError:
    return JSONRPCError.model_validate({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no"}})


def _ids() -> Any:
    n = iter(range(1000))
    return lambda: f"own-{next(n)}"


def test_initialize_answers_the_name() -> None:
    name = ServerName()
    assert name.client_request(_request(1, "initialize"), _ids()) is None
    name.upstream_answered(_result(1, {"serverInfo": {"name": "sqlite", "version": "1"}}))
    assert name.settled == "sqlite"


def test_discover_answers_the_name_in_its_stamp_or_settles_unknown() -> None:
    name = ServerName()
    name.client_request(_request(1, "server/discover", ENVELOPE), _ids())
    name.upstream_answered(_result(1, {"supportedVersions": ["2026-07-28"], "_meta": {
        SERVER_INFO_KEY: {"name": "mcp-git", "version": "1"}}}))
    assert name.settled == "mcp-git"
    bare = ServerName()
    bare.client_request(_request(1, "server/discover", ENVELOPE), _ids())
    bare.upstream_answered(_result(1, {"supportedVersions": ["2026-07-28"]}))
    assert bare.settled is UNKNOWN_SERVER


@pytest.mark.parametrize("info", [{"name": ""}, {"name": 3}, {}, "sqlite", None])
def test_a_handshake_answer_without_a_usable_name_settles_unknown(info: Any) -> None:
    name = ServerName()
    name.client_request(_request(1, "initialize"), _ids())
    name.upstream_answered(_result(1, {"serverInfo": info}))
    assert name.settled is UNKNOWN_SERVER


def test_a_refused_discover_waits_for_the_initialize_that_follows() -> None:
    name = ServerName()
    name.client_request(_request(1, "server/discover", ENVELOPE), _ids())
    name.upstream_answered(_error(1))  # a 2025 server refuses it; the SDK client falls back to initialize
    assert name.settled is None
    name.client_request(_request(2, "initialize"), _ids())
    name.upstream_answered(_result(2, {"serverInfo": {"name": "filesystem"}}))
    assert name.settled == "filesystem"


def test_a_client_without_a_handshake_gets_the_proxy_s_own_discover() -> None:
    name = ServerName()
    probe = name.client_request(_request(1, "tools/list", {**ENVELOPE, "progressToken": 5}), _ids())
    assert probe is not None and probe.method == "server/discover" and probe.id == "own-0"
    assert probe.params == {"_meta": ENVELOPE}  # the client's version, info and capabilities, nothing else
    assert name.client_request(_request(2, "tools/call", ENVELOPE), _ids()) is None  # asked once
    name.upstream_answered(_result("own-0", {"_meta": {SERVER_INFO_KEY: {"name": "probe"}}}))
    assert name.settled == "probe"


def test_a_refused_probe_settles_unknown() -> None:
    name = ServerName()
    probe = name.client_request(_request(1, "tools/list", ENVELOPE), _ids())
    assert probe is not None
    name.upstream_answered(_error(probe.id))
    assert name.settled is UNKNOWN_SERVER


def test_a_first_request_with_no_handshake_and_no_version_settles_unknown_and_sends_nothing() -> None:
    name = ServerName()
    assert name.client_request(_request(1, "tools/list"), _ids()) is None
    assert name.settled is UNKNOWN_SERVER


def test_a_ping_before_the_handshake_changes_nothing() -> None:
    name = ServerName()
    assert name.client_request(_request(1, "ping"), _ids()) is None
    name.client_request(_request(2, "initialize"), _ids())
    name.upstream_answered(_result(2, {"serverInfo": {"name": "time"}}))
    assert name.settled == "time"


def test_a_stamped_result_names_the_server() -> None:
    name = ServerName()
    name.client_request(_request(1, "server/discover", ENVELOPE), _ids())
    name.upstream_answered(_result(9, {"tools": [], "_meta": {SERVER_INFO_KEY: {"name": "stamped"}}}))
    assert name.settled == "stamped"


def test_it_settles_once_and_a_given_name_wins() -> None:
    name = ServerName()
    name.client_request(_request(1, "initialize"), _ids())
    name.upstream_answered(_result(1, {"serverInfo": {"name": "first"}}))
    name.upstream_answered(_result(2, {"_meta": {SERVER_INFO_KEY: {"name": "second"}}}))
    name.give_up("late")
    assert name.settled == "first"
    given = ServerName("mine")
    assert given.client_request(_request(1, "tools/list"), _ids()) is None
    given.client_request(_request(2, "initialize"), _ids())
    given.upstream_answered(_result(2, {"serverInfo": {"name": "theirs"}}))
    assert given.settled == "mine"


async def test_waiting_for_a_name_that_never_comes_gives_unknown() -> None:
    name = ServerName()
    name.client_request(_request(1, "initialize"), _ids())
    assert await name.wait(0.01) is UNKNOWN_SERVER
    assert name.settled is UNKNOWN_SERVER
    named = ServerName()
    named.client_request(_request(1, "initialize"), _ids())
    named.upstream_answered(_result(1, {"serverInfo": {"name": "s"}}))
    assert await named.wait(0) == "s"
