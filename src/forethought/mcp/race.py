"""A slow guess never delays a call for long: a client's call that finds its guess still running races it.

When a client's ``tools/call`` arrives while a speculation of the very same call is still waiting for the
upstream, the runtime would wait for that speculation (it started earlier, so it usually answers first).
If it is slow or hangs, the client would wait longer than it would have directly. So the client's own
request is sent upstream as well (verbatim: its id, its ``_meta``), and the speculation returns whichever
answer comes first. Sent at once, direct use is the bound: the client's answer is never later than its own
request's. The other answer, when it comes, is consumed by the upstream link and never reaches the client
(the client's own request is never abandoned, so its late answer cannot arrive unexpected).

Sent at once, that request doubles the upstream's work for every guess the client catches up with, and
most of them would have answered first anyway (they started earlier). So the request can be *hedged*:
:meth:`GuessRace.claim` takes the time by which the guess, counted from its start, should have answered
(a multiple of the tool's measured runtime), and sends the client's request only if the guess has not
answered by then. A guess that hangs then delays the call by at most that time; a claim with no such time
(nothing measured yet) races at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from mcp_types import JSONRPCRequest, RequestId

from forethought.mcp.upstream import Answer, Pending


class GuessRace:
    """The running guesses of one session, and the client requests sent while they ran."""

    def __init__(self, begin: Callable[[JSONRPCRequest], Awaitable[Pending]]) -> None:
        self._begin = begin
        self._running: dict[str, asyncio.Future[Answer]] = {}
        """Call key -> where the client's own answer goes while a guess of that call runs."""
        self._started: dict[str, float] = {}
        """Call key -> when its running guess was sent (the event loop's clock)."""
        self._hedges: dict[RequestId, asyncio.Task[None]] = {}
        """Client request id -> the timer that sends it if its guess has not answered in time."""
        self._sent: dict[RequestId, asyncio.Task[Pending]] = {}
        """Client request id -> its request (once sent), sent while a guess of it ran."""
        self._tasks: set[asyncio.Task[Pending]] = set()
        self.raced = 0
        """Client requests sent while their guess was still running."""

    async def guess(self, key: str, answer: Awaitable[Answer]) -> tuple[Answer, bool]:
        """Await a guess's ``answer``, or the client's own answer to the same call if that comes first.

        Returns the answer and whether it is the client's own.
        """
        loop = asyncio.get_running_loop()
        slot: asyncio.Future[Answer] = loop.create_future()
        self._running[key] = slot
        self._started[key] = loop.time()
        spec = asyncio.ensure_future(answer)
        try:
            await asyncio.wait({spec, slot}, return_when=asyncio.FIRST_COMPLETED)
            if spec.done():
                return spec.result(), False
            return slot.result(), True
        finally:
            if self._running.get(key) is slot:
                del self._running[key]
                self._started.pop(key, None)
            if not spec.done():
                spec.cancel()  # abandoned: the link consumes its late answer
            elif not spec.cancelled():
                spec.exception()  # ended as this guess was given up (the link closed): nobody else reads it

    def claim(self, key: str, request: JSONRPCRequest, hedge_s: float = 0.0) -> None:
        """The client asks for ``key``: if its guess is still running, send the client's request now, or
        (``hedge_s`` > 0) once the guess has run ``hedge_s`` seconds without answering."""
        slot = self._running.get(key)
        if slot is None or slot.done() or request.id in self._sent or request.id in self._hedges:
            return
        delay = hedge_s - (asyncio.get_running_loop().time() - self._started.get(key, 0.0))
        if delay > 0:
            timer = asyncio.ensure_future(self._hedge(key, slot, request, delay))
            self._hedges[request.id] = timer
            timer.add_done_callback(lambda _: self._hedges.pop(request.id, None)
                                    if self._hedges.get(request.id) is timer else None)
            return
        self._race(slot, request)

    async def _hedge(self, key: str, slot: asyncio.Future[Answer], request: JSONRPCRequest, delay: float) -> None:
        await asyncio.sleep(delay)
        if self._running.get(key) is slot and not slot.done():  # the guess is late: the client's request goes
            self._hedges.pop(request.id, None)
            self._race(slot, request)

    def _race(self, slot: asyncio.Future[Answer], request: JSONRPCRequest) -> None:
        task = asyncio.ensure_future(self._begin(request))
        self.raced += 1
        self._sent[request.id] = task
        self._tasks.add(task)

        def answered(answer: asyncio.Future[Answer]) -> None:
            if not slot.done() and not answer.cancelled() and answer.exception() is None:
                slot.set_result(answer.result())

        def sent(t: asyncio.Task[Pending]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is None:
                t.result().answer.add_done_callback(answered)

        task.add_done_callback(sent)

    def running(self) -> list[str]:
        """The keys of the guesses still waiting for the upstream."""
        return [key for key, slot in self._running.items() if not slot.done()]

    def own(self, request: JSONRPCRequest) -> asyncio.Task[Pending] | None:
        """The client's request if :meth:`claim` already sent it (the authoritative run awaits its answer).

        Otherwise the caller sends it itself, so a hedge still waiting to send it is stopped."""
        self._stop_hedge(request.id)
        return self._sent.get(request.id)

    def settled(self, request: JSONRPCRequest) -> None:
        """The client's call is answered: forget its request (still running, it ends on its own)."""
        self._stop_hedge(request.id)
        self._sent.pop(request.id, None)

    def _stop_hedge(self, request_id: RequestId) -> None:
        timer = self._hedges.pop(request_id, None)
        if timer is not None:
            timer.cancel()

    def abandon(self) -> None:
        """The client session is over: stop waiting for the answers nobody will read."""
        for task in [*self._tasks, *self._hedges.values()]:
            task.cancel()
        self._tasks.clear()
        self._hedges.clear()
        self._sent.clear()
