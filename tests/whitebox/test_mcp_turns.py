"""``results_per_turn``: an unclaimed guess may be claimed by a later call than the next one, while fresh.

A fake predictor guesses two calls after the first result and nothing after that. With one result per
runtime turn, the second guess is discarded at the next result. With three it is still there for the
call after next, unless a write came between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from forethought import Effect, Policy, ToolCall, ToolPolicy
from forethought._core.policy import ServerPolicy
from forethought.errors import PolicyError
from forethought.mcp.effects import McpPolicy, ProxySettings, policy_from_data
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, Predictor
from test_mcp_proxy import _dump, _probe, direct, proxied

LOOKUP_B = ToolCall("lookup", {"key": "b"})
LOOKUP_C = ToolCall("lookup", {"key": "c"})


class TwoAhead:
    """After the first call: the next two lookups; afterwards nothing."""

    name = "two-ahead"

    def __init__(self) -> None:
        self.asked = 0

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        self.asked += 1
        return [Prediction(LOOKUP_B, 0.9, self.name), Prediction(LOOKUP_C, 0.9, self.name)] if self.asked == 1 else []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        return None


def _factory(schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]:
    return TwoAhead(), "two-ahead"


async def _run(session: Any, middle: tuple[str, dict[str, Any]]) -> list[str]:
    out = []
    for name, arguments in (("lookup", {"key": "a"}), middle, ("lookup", {"key": "c"})):
        out.append(_dump(await session.call_tool(name, arguments)))
        await asyncio.sleep(0.05)  # think time: the guesses run
    return out


async def _hits(tmp_path: Path, lifetime: int, middle: tuple[str, dict[str, Any]]) -> tuple[int, bool]:
    settings = ProxySettings(guesses=2, max_upstream_ratio=3.0, results_per_turn=lifetime)
    writes = {"counted": ToolPolicy(effect=Effect.DESTRUCTIVE)}  # stands in for a write tool
    policy = McpPolicy(Policy(servers={"*": ServerPolicy(trusted=True, tools=writes)}), settings)
    name = f"{lifetime}-{middle[0]}"
    async with direct(_probe(tmp_path / f"direct-{name}.log")) as session:
        await session.list_tools()
        expected = await _run(session, middle)
    async with proxied(_probe(tmp_path / f"proxy-{name}.log"), policy) as (session, handle):
        handle.proxy._factory = _factory
        await session.list_tools()
        got = await _run(session, middle)
    return handle.stats.hits, got == expected


async def test_a_guess_outlives_one_result_only_in_a_longer_turn(tmp_path: Path) -> None:
    middle = ("lookup", {"key": "b"})
    assert await _hits(tmp_path, 1, middle) == (1, True)  # b hits; c was discarded at b's result
    assert await _hits(tmp_path, 3, middle) == (2, True)  # c is still there for the call after next


async def test_a_write_in_between_still_stales_a_kept_guess(tmp_path: Path) -> None:
    # a call of a tool that is not read-only makes every read guessed before it stale, kept or not
    assert await _hits(tmp_path, 3, ("counted", {"steps": 1})) == (0, True)


def test_results_per_turn_is_a_positive_policy_setting() -> None:
    assert policy_from_data({"mcp": {"results_per_turn": 3}}).settings.results_per_turn == 3
    with pytest.raises(PolicyError):
        ProxySettings(results_per_turn=0)
