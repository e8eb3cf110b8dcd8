"""The proxy at edges an outside review found broken (wave 3): what a guess's run sends besides its answer,
the ``_meta`` a call carries, an HTTP upstream that dies mid-session, a call relayed during warm-up, and a
tool that stops being a read while the session runs.

Each test runs the same client both directly against the server and through the proxy where it can, and
compares what the client sees.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from forethought import ToolCall
from forethought.mcp.effects import policy_from_data
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import direct, http_upstream, proxied, proxied_url

SERVERS = Path(__file__).with_name("mcp_servers")
STATE = SERVERS / "state_server.py"
PROBE = SERVERS / "probe_server.py"
POLICY = {"servers": {"state": {"trusted": True}}, "mcp": {"max_upstream_ratio": 4.0}}


class Guesses:
    """Guesses the same calls after every answer."""

    name = "script"

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = calls

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(call, 0.9, self.name) for call in self.calls]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def _guessing(*calls: ToolCall) -> Any:
    def factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
        return Guesses(*calls), "script"

    return factory


# --- a guess's log notifications ------------------------------------------------------------------------


async def _logged_session(session: ClientSession, logs: list[str]) -> list[str]:
    await session.list_tools()
    texts = []
    for n in (1, 2, 1):  # after each answer the proxy guesses logged(n=1): hits, and guesses that serve nothing
        await session.call_tool("peek", {})
        await asyncio.sleep(0.2)  # the guess has run and logged while no call of the client was waiting
        result = await session.call_tool("logged", {"n": n})
        texts.append(result.content[0].text)  # type: ignore[union-attr]
        await asyncio.sleep(0.2)  # (a log that comes while a call of the client waits too is relayed: see docs)
    await session.call_tool("peek", {})
    await asyncio.sleep(0.2)  # a last guess that serves nothing
    return texts


@pytest.mark.parametrize("handshake", ["legacy", "pinned"])
async def test_a_guess_s_log_reaches_the_client_only_with_the_call_it_serves(tmp_path: Path, handshake: str) -> None:
    command = [sys.executable, str(STATE), str(tmp_path / "log")]

    def collector(into: list[str]) -> Any:
        async def collect(params: Any) -> None:
            into.append(str(params.data))
        return collect

    plain_logs: list[str] = []
    async with direct(command, handshake, logging_callback=collector(plain_logs), log_level="info") as session:
        plain = await _logged_session(session, plain_logs)
    proxied_logs: list[str] = []
    guess = _guessing(ToolCall("logged", {"n": 1}))
    async with proxied(command, policy_from_data(POLICY), handshake, predictor_for=guess,
                       logging_callback=collector(proxied_logs), log_level="info") as (session, handle):
        got = await _logged_session(session, proxied_logs)
    assert got == plain == ["logged 1", "logged 2", "logged 1"]
    assert plain_logs == ["logged 1", "logged 2", "logged 1"]
    assert proxied_logs == plain_logs  # the hits' logs once each, before their answers; the others' never
    assert handle.stats.hits == 2 and handle.speculated.count("logged") >= 4


# --- a call's _meta ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("handshake", ["legacy", "pinned"])
async def test_a_guess_never_serves_a_call_whose_meta_the_server_can_tell_apart(tmp_path: Path,
                                                                                handshake: str) -> None:
    command = [sys.executable, str(STATE), str(tmp_path / "log")]
    async with proxied(command, policy_from_data(POLICY), handshake, predictor_for=_guessing(ToolCall("tenant", {}))) \
            as (session, handle):
        await session.list_tools()
        answers = []
        for meta in ({"acme/tenant": "alice"}, {"acme/tenant": "alice"}, None, {"acme/tenant": "bob"}):
            await session.call_tool("peek", {})
            await asyncio.sleep(0.2)  # its guess of tenant() has run, sent without the client's _meta
            result = await session.call_tool("tenant", {}, meta=meta)
            answers.append(result.content[0].text)  # type: ignore[union-attr]
    assert answers == ["tenant alice", "tenant alice", "tenant None", "tenant bob"]
    assert handle.stats.hits == 1  # only the call that carried no _meta of its own was served by its guess


# --- an HTTP upstream that dies ----------------------------------------------------------------------------


@pytest.mark.parametrize("handshake", ["legacy", "pinned"])
async def test_an_http_upstream_that_dies_answers_every_later_call_at_once(tmp_path: Path, handshake: str) -> None:
    errors = []
    async with http_upstream(PROBE, tmp_path / "log") as (url, upstream), \
            proxied_url(url + "?token=SECRET-9", handshake) as (session, serving):
        await session.list_tools()
        first = await session.call_tool("lookup", {"key": "a"})
        upstream.kill()
        await upstream.wait()
        for key in ("b", "c"):
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(session.call_tool("lookup", {"key": key}), 10)
            errors.append(str(info.value))
        assert not serving.done()  # the session goes on until the client leaves
    stats = serving.result()
    assert first.content[0].text == "value-of-a"  # type: ignore[union-attr]
    assert all("upstream MCP server is gone" in e and "SECRET-9" not in e for e in errors), errors
    assert stats.calls == 3


# --- calls relayed while the proxy still loads (warm start) -------------------------------------------------

FORETHOUGHT = Path(sys.executable).with_name("forethought")


async def test_a_call_relayed_during_warm_up_is_answered_when_the_server_dies(tmp_path: Path) -> None:
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=str(FORETHOUGHT), args=[
        "mcp-proxy", "--memory", "--trust", "--", sys.executable, str(PROBE), str(tmp_path / "log")])
    with (tmp_path / "stderr.txt").open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            # sent at once (relayed raw while the proxy loads); the server dies 3 s into it, after the takeover
            with pytest.raises(MCPError, match="upstream MCP server is gone"):
                await asyncio.wait_for(session.call_tool("crash_after", {"seconds": 3.0}), 30)
            with pytest.raises(MCPError, match="upstream MCP server is gone"):
                await asyncio.wait_for(session.call_tool("lookup", {"key": "a"}), 30)
    summary = (tmp_path / "stderr.txt").read_text().strip().splitlines()[-1]
    assert summary.startswith("forethought mcp-proxy: 2 calls"), summary


async def test_upstream_counts_include_calls_relayed_during_warm_up(tmp_path: Path) -> None:
    """What ``stats`` says the server saw (the client's calls plus the extra ones) is what it logged, whether
    or not the first call went through while the proxy loaded."""
    import json

    from mcp import StdioServerParameters, stdio_client
    from typer.testing import CliRunner

    from forethought.cli import app

    store, log = tmp_path / "store.sqlite", tmp_path / "log"
    params = StdioServerParameters(command=str(FORETHOUGHT), args=[
        "mcp-proxy", "--store", str(store), "--trust", "--", sys.executable, str(PROBE), str(log)])
    with (tmp_path / "stderr.txt").open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("lookup", {"key": "a"})  # at once: during warm-up, or just after
            await session.list_tools()
            for key in ("b", "a", "b", "a", "b"):
                await session.call_tool("lookup", {"key": key})
                await asyncio.sleep(0.05)
    served = [json.loads(line) for line in log.read_text().splitlines()]
    upstream = sum(1 for e in served if e.get("event") == "call")
    result = CliRunner().invoke(app, ["mcp-proxy", "stats", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    total = json.loads(result.output)["total"]
    assert total["calls"] == 6
    assert total["calls"] + total["extra_upstream_calls"] == upstream, (total, upstream)
    assert total["tools"]["lookup"]["calls"] == 6 and total["tools"]["lookup"]["upstream_calls"] == upstream


# --- a tool list that changes ---------------------------------------------------------------------------


@pytest.mark.parametrize("handshake", ["legacy", "pinned"])
async def test_a_tool_that_stops_being_a_read_is_never_guessed_after_the_server_says_so(tmp_path: Path,
                                                                                         handshake: str) -> None:
    """The client never lists the tools again: the proxy does, and guesses ``mutable`` no more."""
    import json

    log = tmp_path / "log"
    command = [sys.executable, str(STATE), str(log)]
    async with proxied(command, policy_from_data(POLICY), handshake,
                       predictor_for=_guessing(ToolCall("mutable", {"n": 1}))) as (session, handle):
        await session.list_tools()
        for _ in range(2):
            await session.call_tool("peek", {})
            await asyncio.sleep(0.1)
        flipped_at = len(log.read_text().splitlines())
        assert (await session.call_tool("flip", {})).content[0].text == "flipped"  # type: ignore[union-attr]
        for _ in range(4):
            await asyncio.sleep(0.2)
            await session.call_tool("peek", {})
            await session.call_tool("mutable", {"n": 1})
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    early = [i for i, c in enumerate(calls) if c["tool"] == "mutable" and str(c["id"]).startswith("forethought")]
    early_before = [i for i in early if i < flipped_at]
    early_after = [calls[i] for i in early if i >= flipped_at]
    assert early_before, "the proxy guessed the read before the change"
    assert early_after == [], early_after
    assert handle.proxy.refusals["not an early-allowed call"] > 0  # it was still predicted, and refused


# --- a store another process garbled --------------------------------------------------------------------


async def _two_sessions_garbled_between(tmp_path: Path, garble: Callable[[Any], None], priced: bool = False,
                                        keys: Sequence[str] = ("a", "b")) -> Path:
    """Two client sessions through proxies on one store, another program garbling the store between them
    (``garble`` gets an open ``sqlite3`` connection): both sessions answer every call as the server does."""
    import sqlite3

    store = tmp_path / "store.sqlite"
    command = [sys.executable, str(PROBE), str(tmp_path / "log")]
    policy = policy_from_data({"servers": {"probe": {"trusted": True}}})
    for session_number in range(2):
        async with proxied(command, policy, "legacy", store=store, priced=priced) as (session, _):
            await session.list_tools()
            texts = [(await session.call_tool("lookup", {"key": k})).content[0].text  # type: ignore[union-attr]
                     for k in keys]
        assert texts == [f"value-of-{k}" for k in keys], session_number
        if session_number == 0:
            with sqlite3.connect(store) as conn:
                garble(conn)
    return store


@pytest.mark.parametrize("garbage", [("garbage", 1000), ('{"name": 3}', 1000), ("[]", 1000),
                                     ('{"name": "lookup", "arguments": {"key": "a"}}', "many")])
async def test_a_garbled_first_call_in_the_store_costs_the_guess_never_the_session(
        tmp_path: Path, garbage: tuple[str, object]) -> None:
    import sqlite3

    from forethought.mcp.firstcalls import SqliteFirstCalls

    def garble(conn: Any) -> None:  # another program writes garbage over what was learnt
        assert conn.execute("UPDATE mcp_first_calls SET call = ?, sessions = ?", garbage).rowcount >= 1

    store = await _two_sessions_garbled_between(tmp_path, garble)
    first = SqliteFirstCalls(store)
    fingerprint, client = sqlite3.connect(store).execute("SELECT fingerprint, client FROM mcp_first_calls").fetchone()
    found = first.most_likely(fingerprint, client)
    assert found is None or found[0].name == "lookup"
    first.close()


@pytest.mark.parametrize(("table", "column", "garbage"), [
    ("mcp_runtimes", "seconds", "x"), ("mcp_runtimes", "seconds", -1.0), ("mcp_runtimes", "seconds", 1e999),
    ("mcp_payoff", "answers", "bad"), ("mcp_payoff", "saved_s", "x"), ("mcp_payoff", "answers", 1e18),
    ("mcp_concurrency", "serial", "x"), ("mcp_calibration", "guesses", "x"), ("mcp_calibration", "hits", -3),
    ("mcp_calibration", "guesses", 1e12)])
async def test_garbled_calibration_in_the_store_costs_its_learning_never_the_session(
        tmp_path: Path, table: str, column: str, garbage: object) -> None:
    """Before, a calibration value another program garbled stopped every later session of the store at its
    tool list (the proxy failed; the client saw its connection close), found by an outside review."""

    def garble(conn: Any) -> None:
        fingerprint = conn.execute("SELECT fingerprint FROM mcp_runtimes").fetchone()[0]
        # The first session made guesses only if they paid: a row of its tool set in every table regardless.
        conn.execute("INSERT OR IGNORE INTO mcp_calibration VALUES (?, 'pattern', 5, 10, 3, 4.0)", (fingerprint,))
        conn.execute("INSERT OR IGNORE INTO mcp_payoff VALUES (?, 30, 1.0, 0.5)", (fingerprint,))
        conn.execute("INSERT OR IGNORE INTO mcp_concurrency VALUES (?, 2, 1)", (fingerprint,))
        assert conn.execute(f"UPDATE {table} SET {column} = ?", (garbage,)).rowcount >= 1, table

    await _two_sessions_garbled_between(tmp_path, garble, priced=True, keys=("a", "b", "a", "b"))


@pytest.mark.parametrize("garbage", ["garbage", 1e999, None])
async def test_garbled_stats_in_the_store_cost_the_credit_never_the_session(tmp_path: Path, garbage: object) -> None:
    def garble(conn: Any) -> None:  # another program writes garbage over the totals
        if garbage is None:
            conn.execute("UPDATE mcp_proxy_tool_stats SET calls = 'x'")
        else:
            assert conn.execute("UPDATE mcp_proxy_stats SET calls = ?", (garbage,)).rowcount >= 1

    await _two_sessions_garbled_between(tmp_path, garble)
