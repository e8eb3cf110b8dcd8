"""A write is in progress until its upstream request has really ended, never merely until the client stopped
waiting (issue 28): a write the client cancels while the server goes on writing must not let a read guessed
meanwhile be served stale.

The state server's ``write`` lands ``delay_s`` after it began, whether or not the client cancelled the call,
and a cancelled call gets no answer (as the SDK's server does). A scripted predictor guesses ``read`` after
every answer. The attack: start a write, cancel it, make a guess of ``read`` run while the server is still
writing, let the write land, then call ``read``: the client must get the new value, as a direct client does.
Variants: the guess through the same proxy, through another client session of the same proxy, and through
another proxy process's clock sharing the store; and the bound after which a cancelled request that never
gets an answer counts as ended (speculation resumes).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp import ClientSession

from forethought import ToolCall
from forethought.mcp.effects import McpPolicy, policy_from_data
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from mcp_handshakes import direct, proxied

STATE = Path(__file__).with_name("mcp_servers") / "state_server.py"
LANDS_S = 1.0
"""When the write lands, after it began."""
CANCEL_S = 0.2
"""When the client gives up on the write."""


class GuessRead:
    """Guesses ``read()`` after every call, nothing else."""

    name = "script"

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        return [Prediction(ToolCall("read", {}), 0.9, self.name)]

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def _guess_read(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
    return GuessRead(), "script"


def _state(log: Path, shared: Path | None = None) -> list[str]:
    return [sys.executable, str(STATE), str(log), *([str(shared)] if shared is not None else [])]


def _policy(**mcp: float) -> McpPolicy:
    return policy_from_data({"servers": {"state": {"trusted": True}}, "mcp": {"max_upstream_ratio": 4.0, **mcp}})


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _cancelled_write(session: ClientSession) -> None:
    with anyio.move_on_after(CANCEL_S):
        await session.call_tool("write", {"value": "new", "delay_s": LANDS_S})
        raise AssertionError("the write answered before the client gave up on it")


async def _attack(writer: ClientSession, reader: ClientSession) -> tuple[str, str]:
    """Cancel a write through ``writer``; have ``reader`` guess a read while the server still writes, then
    call it once the write has landed. Returns what ``reader`` read before and after."""
    before = _text(await reader.call_tool("read", {}))
    await _cancelled_write(writer)
    await reader.call_tool("peek", {})  # its answer makes the proxy guess read(): the write is still running
    await asyncio.sleep(LANDS_S)  # the write lands; the guess has long had its (old) answer
    return before, _text(await reader.call_tool("read", {}))


async def test_direct_sees_the_write_land(tmp_path: Path) -> None:
    async with direct(_state(tmp_path / "log"), "legacy") as session:
        await session.list_tools()
        assert await _attack(session, session) == ("initial", "new")


async def test_a_cancelled_write_still_running_stales_a_guessed_read(tmp_path: Path) -> None:
    async with proxied(_state(tmp_path / "log"), _policy(), "legacy", predictor_for=_guess_read) as (session, h):
        await session.list_tools()
        assert await _attack(session, session) == ("initial", "new"), "a guessed read was served stale"
    assert "read" in h.speculated  # the guess did run (while the server was writing)


async def test_a_cancelled_write_in_one_session_stales_a_guess_of_another_session(tmp_path: Path) -> None:
    shared = tmp_path / "value.txt"
    async with proxied(_state(tmp_path / "a.log", shared), _policy(), "legacy", predictor_for=_guess_read,
                       settle=False) as (writer, handle):
        proxy = handle.proxy
        to_proxy, proxy_in = anyio.create_memory_object_stream[Any](16)
        proxy_out, from_proxy = anyio.create_memory_object_stream[Any](16)
        second = asyncio.create_task(proxy.serve_session(proxy_in, proxy_out))  # the same proxy's second session
        try:
            async with ClientSession(from_proxy, to_proxy) as reader:
                await reader.initialize()
                await writer.list_tools()
                await reader.list_tools()
                await proxy.ready()
                plain = reader.call_tool

                async def settled(*args: Any, **kwargs: Any) -> Any:
                    result = await plain(*args, **kwargs)
                    await proxy.settled()
                    return result

                reader.call_tool = settled  # type: ignore[method-assign]
                assert await _attack(writer, reader) == ("initial", "new"), "a guessed read was served stale"
        finally:
            to_proxy.close()
            await asyncio.wait_for(second, 30)


async def test_a_cancelled_write_through_another_proxy_sharing_the_store_stales_a_guess(tmp_path: Path) -> None:
    shared, store = tmp_path / "value.txt", tmp_path / "store.sqlite"
    async with proxied(_state(tmp_path / "a.log", shared), _policy(), "legacy", store=store) as (writer, _), \
            proxied(_state(tmp_path / "b.log", shared), _policy(), "legacy", store=store,
                    predictor_for=_guess_read) as (reader, handle):
        await writer.list_tools()
        await reader.list_tools()
        assert await _attack(writer, reader) == ("initial", "new"), "a guessed read was served stale"
    assert "read" in handle.speculated


async def test_a_cancelled_write_never_answered_ends_after_the_bound(tmp_path: Path) -> None:
    """Liveness: a server never answers a cancelled request, so after ``abandoned_s`` it counts as ended and
    a read guessed after the write has landed is served again."""
    async with proxied(_state(tmp_path / "log"), _policy(abandoned_s=0.3), "legacy",
                       predictor_for=_guess_read) as (session, handle):
        await session.list_tools()
        with anyio.move_on_after(CANCEL_S):
            await session.call_tool("write", {"value": "new", "delay_s": 0.1})  # lands before the cancel
        await asyncio.sleep(0.5)  # past the bound: the write counts as ended
        await session.call_tool("peek", {})
        await asyncio.sleep(0.1)
        assert _text(await session.call_tool("read", {})) == "new"
    assert handle.stats.hits == 1
