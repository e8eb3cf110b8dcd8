"""The proxy in front of a faulty upstream (tests/mcp_servers/faulty_server.py): the client gets exactly what a
direct client gets, an error is never turned into a success or the reverse, and a guess that hangs or fails
never surfaces nor delays the client's call.

Guesses are launched white-box (``Session.speculate`` on the proxy's runtime session) so that each test knows
which call was guessed; everything else goes through a real ``mcp`` SDK client and the proxy's relay.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp import ClientSession

from forethought import Runtime, ToolCall
from forethought._core.versions import StateVersion
from forethought.mcp.effects import McpPolicy, ProxySettings
from forethought.mcp.proxy import Proxy
from forethought.mcp.speculation import SessionSpeculator
from forethought.mcp.upstream import OWN_ID_PREFIX, UpstreamLink
from test_mcp_proxy import _dump, direct, proxied

FAULTY = Path(__file__).parent.with_name("mcp_servers") / "faulty_server.py"
TRUST = McpPolicy(settings=ProxySettings(guesses=0)).trusting()
"""Every tool may run early, and only the tests' own guesses do (the predictor's are turned off)."""
SHORT_S = 0.25
"""The client's read timeout on calls that never get a parsable answer (in both arms)."""
LONG_S = 20.0
"""The client's read timeout on calls that must be answered: far above any answer, far below a hung guess's
claim wait (the runtime's 30 s speculation timeout for a tool it has not timed)."""


def _command(log: Path) -> list[str]:
    return [sys.executable, str(FAULTY), str(log)]


def _logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def _outcome(session: ClientSession, name: str, key: str, wait_s: float = LONG_S) -> tuple[str, str]:
    """What the client saw: ``("result", dump)`` or ``("error", type and message)``."""
    try:
        return "result", _dump(await session.call_tool(name, {"key": key}, read_timeout_seconds=wait_s))
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {exc}"


async def _guess(proxy: Proxy, log: Path, name: str, key: str) -> None:
    """Launch a guess of ``name(key)`` and wait until the upstream has received it."""
    session = proxy.speculators[-1].session
    assert session is not None, "the client has not listed the tools yet"
    ticket = session.speculate(ToolCall(name, {"key": key}), source="test")
    assert ticket.status == "launched", ticket
    for _ in range(1000):
        if any(str(e["id"]).startswith(OWN_ID_PREFIX) and e["tool"] == name for e in _logged(log)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the guess of {name} never reached the upstream")


async def _direct_outcomes(log: Path, calls: Sequence[tuple[str, str, float]]) -> list[tuple[str, str]]:
    async with direct(_command(log)) as session:
        await session.list_tools()
        return [await _outcome(session, name, key, timeout) for name, key, timeout in calls]


async def test_a_hanging_guess_never_delays_the_call(tmp_path: Path) -> None:
    calls = [("lookup", "a", LONG_S), ("guess_hangs", "k", LONG_S), ("lookup", "b", LONG_S)]
    expected = await _direct_outcomes(tmp_path / "direct.log", calls)
    log = tmp_path / "proxy.log"
    async with proxied(_command(log), TRUST) as (session, handle):
        await session.list_tools()
        got = [await _outcome(session, "lookup", "a")]
        await _guess(handle.proxy, log, "guess_hangs", "k")
        got.append(await _outcome(session, "guess_hangs", "k"))  # the guess hangs: the client's own request wins
        got.append(await _outcome(session, "lookup", "b"))
    assert got == expected
    assert all(kind == "result" for kind, _ in got)
    assert handle.stats.hits == 0 and handle.stats.misses == 3
    tools = [(str(e["id"]).startswith(OWN_ID_PREFIX), e["tool"]) for e in _logged(log)]
    assert (False, "guess_hangs") in tools and (True, "guess_hangs") in tools


async def test_a_hanging_call_behaves_as_direct(tmp_path: Path) -> None:
    calls = [("hang", "k", SHORT_S), ("lookup", "a", LONG_S)]
    expected = await _direct_outcomes(tmp_path / "direct.log", calls)
    assert expected[0][0] == "error" and expected[1][0] == "result"
    async with proxied(_command(tmp_path / "proxy.log"), TRUST) as (session, _):
        await session.list_tools()
        got = [await _outcome(session, name, key, timeout) for name, key, timeout in calls]
    assert got == expected


MALFORMED = (("bad_json", SHORT_S), ("bad_shape", LONG_S), ("not_object", SHORT_S), ("rpc_error", LONG_S))


@pytest.mark.parametrize("guessed", [False, True], ids=["asked", "guessed-first"])
async def test_malformed_answers_reach_the_client_as_they_would_directly(tmp_path: Path, guessed: bool) -> None:
    calls = [c for name, timeout in MALFORMED for c in ((name, "k", timeout), ("lookup", name, LONG_S))]
    expected = await _direct_outcomes(tmp_path / "direct.log", calls)
    assert [kind for kind, _ in expected] == ["error", "result"] * len(MALFORMED)  # each fails, the session lives
    log = tmp_path / "proxy.log"
    async with proxied(_command(log), TRUST) as (session, handle):
        await session.list_tools()
        got = []
        for name, key, timeout in calls:
            if guessed and name != "lookup":
                await _guess(handle.proxy, log, name, key)
            got.append(await _outcome(session, name, key, timeout))
    assert got == expected
    assert handle.stats.hits == 0


async def test_errors_stay_errors_and_a_failed_guess_never_surfaces(tmp_path: Path) -> None:
    calls = [("guess_fails", "k", LONG_S), ("rpc_error", "k", LONG_S), ("lookup", "k", LONG_S)]
    expected = await _direct_outcomes(tmp_path / "direct.log", calls)
    assert [kind for kind, _ in expected] == ["result", "error", "result"]
    log = tmp_path / "proxy.log"
    async with proxied(_command(log), TRUST) as (session, handle):
        await session.list_tools()
        got = []
        for name, key, _ in calls:
            await _guess(handle.proxy, log, name, key)
            spec = handle.proxy.speculators[-1].session
            assert spec is not None
            await spec.wait_speculations(LONG_S)  # the guess has its answer (an error for the first two)
            got.append(await _outcome(session, name, key))
    assert got == expected
    assert handle.stats.hits == 1  # only the guess that succeeded (lookup) was served


async def _lookups(log: Path, ratio: float, calls: int) -> tuple[int, int, int]:
    """``calls`` lookups over six keys, guessing freely under ``ratio``: (upstream requests, guesses, raced)."""
    policy = McpPolicy(settings=ProxySettings(guesses=8, min_confidence=0.0, max_upstream_ratio=ratio,
                                              upstream_slack=0)).trusting()
    async with proxied(_command(log), policy) as (session, handle):
        await session.list_tools()
        speculator = handle.proxy.speculators[-1]
        for i in range(calls):
            assert (await _outcome(session, "lookup", "abcdef"[i % 6]))[0] == "result"
            await asyncio.sleep(0.02)  # think time: the guesses run
    link = handle.proxy.links[-1]
    upstream = link.client_calls + link.speculative_calls + link.validator_calls
    assert len(_logged(log)) == upstream  # the upstream's own count agrees
    return upstream, link.speculative_calls, speculator.raced


async def test_guesses_stay_within_the_upstream_bound(tmp_path: Path) -> None:
    ratio, calls = 1.25, 30
    upstream, guessed, raced = await _lookups(tmp_path / "proxy.log", ratio, calls)
    assert guessed > 0
    # every client call finds the upstream within the bound; the session's last guess may pass it by less
    # than one request; a raced client request is the one thing not budgeted
    assert upstream <= ratio * calls + (ratio - 1) + raced


def test_the_bound_counts_every_upstream_request() -> None:
    class Sink:
        async def send(self, item: object, /) -> None: ...

    link = UpstreamLink(Sink())
    policy = McpPolicy(settings=ProxySettings(max_upstream_ratio=1.5, upstream_slack=0))
    runtime = Runtime()
    speculator = SessionSpeculator(link, policy, runtime, lambda _: (None, ""),  # type: ignore[arg-type,return-value]
                                   StateVersion())
    runtime.close()
    speculator.calls = 10
    link.client_calls, link.speculative_calls, link.validator_calls = 8, 5, 0  # 2 hits so far
    # a guess for call 11 must leave room for that call to go upstream too: 13 + 2 + 1 <= 16.5 < 13 + 3 + 1
    assert speculator.within_bound(2) and not speculator.within_bound(3)
    link.validator_calls = 2
    assert not speculator.within_bound(1)  # validator calls count too
    assert speculator.stats().extra_upstream_calls == 5
    speculator.calls = 1
    link.client_calls, link.speculative_calls, link.validator_calls = 1, 0, 0
    assert speculator.within_bound(1)  # after the first call: 1 + 1 + 1 <= 1.5 * 2, a miss keeps 3 <= 3
    speculator.calls = 0
    link.client_calls = 0
    assert not speculator.within_bound(1)  # before any call: a miss would make 2 upstream requests for 1
