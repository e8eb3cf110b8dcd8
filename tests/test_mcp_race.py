"""The race between a guess and the client's own request, hedged: the client's request goes upstream only
once its guess has run ``hedge_s`` without answering, and a guess that hangs is still overtaken."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'forethought[mcp]')")

from mcp_types import JSONRPCRequest

from forethought.mcp.race import GuessRace
from forethought.mcp.upstream import Answer, Kind, Pending

OWN = Answer(result={"content": [{"type": "text", "text": "own"}]})
GUESSED = Answer(result={"content": [{"type": "text", "text": "guessed"}]})


def _request(n: int) -> JSONRPCRequest:
    return JSONRPCRequest(jsonrpc="2.0", id=n, method="tools/call", params={"name": "t", "arguments": {}})


class Upstream:
    """Answers the client's own requests at once, counting them."""

    def __init__(self) -> None:
        self.sent: list[JSONRPCRequest] = []

    async def send(self, request: JSONRPCRequest) -> Pending:
        self.sent.append(request)
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        answer.set_result(OWN)
        return Pending(request.id, Kind.CLIENT, answer)


async def test_a_guess_that_answers_within_the_hedge_sends_no_second_request() -> None:
    upstream = Upstream()
    race = GuessRace(upstream.send)
    answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    guess = asyncio.ensure_future(race.guess("k", answer))
    await asyncio.sleep(0)
    race.claim("k", _request(1), hedge_s=30.0)
    answer.set_result(GUESSED)
    assert await guess == (GUESSED, False)
    race.settled(_request(1))
    await asyncio.sleep(0)
    assert upstream.sent == [] and race.raced == 0


async def test_a_guess_that_hangs_is_overtaken_once_the_hedge_passes() -> None:
    upstream = Upstream()
    race = GuessRace(upstream.send)
    hanging: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    guess = asyncio.ensure_future(race.guess("k", hanging))
    await asyncio.sleep(0)
    race.claim("k", _request(1), hedge_s=0.01)
    assert await asyncio.wait_for(guess, 10) == (OWN, True)
    assert [r.id for r in upstream.sent] == [1] and race.raced == 1
    assert hanging.cancelled()  # abandoned: the link consumes its late answer


async def test_no_hedge_races_at_once() -> None:
    upstream = Upstream()
    race = GuessRace(upstream.send)
    hanging: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    guess = asyncio.ensure_future(race.guess("k", hanging))
    await asyncio.sleep(0)
    race.claim("k", _request(1))
    assert race.raced == 1 and race.own(_request(1)) is not None
    assert await asyncio.wait_for(guess, 10) == (OWN, True)


async def test_a_caller_that_sends_the_request_itself_stops_the_hedge() -> None:
    """The runtime gave up on the guess and runs the call itself: the hedge must not send it a second time."""
    upstream = Upstream()
    race = GuessRace(upstream.send)
    hanging: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    guess = asyncio.ensure_future(race.guess("k", hanging))
    await asyncio.sleep(0)
    race.claim("k", _request(1), hedge_s=0.01)
    assert race.own(_request(1)) is None  # not sent: the caller sends it
    await asyncio.sleep(0.05)
    assert upstream.sent == []
    guess.cancel()
    race.abandon()


async def test_abandon_stops_waiting_hedges() -> None:
    upstream = Upstream()
    race = GuessRace(upstream.send)
    hanging: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    guess = asyncio.ensure_future(race.guess("k", hanging))
    await asyncio.sleep(0)
    race.claim("k", _request(1), hedge_s=0.01)
    race.abandon()
    await asyncio.sleep(0.05)
    assert upstream.sent == []
    guess.cancel()
