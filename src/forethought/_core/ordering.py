"""Call ordering within one session: authoritative calls take effect in the order they were issued.

Early dispatch lets a session issue a call before the previous one has finished. To stay equivalent to
serial execution, a call that writes waits for every earlier call; a call that reads waits for earlier
writes; a pure call waits for nothing. The order is fixed when the call is *issued* (synchronously), not
when it starts running.

Every call is on this path, and most find nothing in flight, so an in-flight call is a small
:class:`Pending` record; an asyncio future is made only when a later call actually has to wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from forethought._core.tools import Effect

_PURE, _ISOLATED_WRITE, _DESTRUCTIVE = Effect.PURE, Effect.ISOLATED_WRITE, Effect.DESTRUCTIVE
_PRUNE_READS_AT = 32
"""Finished reads are dropped from the list a write must check once it holds this many."""


class Pending:
    """One issued, not yet finished, reading or writing call."""

    __slots__ = ("done", "waiter")

    def __init__(self) -> None:
        self.done = False
        self.waiter: asyncio.Future[None] | None = None

    def wait(self) -> asyncio.Future[None]:
        """A future that completes when this call is done (made on first request)."""
        if self.waiter is None:
            self.waiter = asyncio.get_running_loop().create_future()
            if self.done:
                self.waiter.set_result(None)
        return self.waiter

    def finish(self) -> None:
        if not self.done:
            self.done = True
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)


class CallOrder:
    """Reader/writer ordering by issue time for one session's authoritative calls."""

    def __init__(self) -> None:
        self._last_write: Pending | None = None
        self._reads_since_write: list[Pending] = []

    def begin(self, effect: Effect) -> tuple[Pending | None, list[asyncio.Future[None]]]:
        """Register a call now; return its ticket and the futures it must wait for before it runs.

        Every ticket must be passed to :meth:`end` once the call has taken effect (or failed), else later
        calls wait forever; :meth:`issue` pairs the two. Pure calls get no ticket.
        """
        if effect is _PURE:
            return None, []
        ticket = Pending()
        last = self._last_write
        if effect is _ISOLATED_WRITE or effect is _DESTRUCTIVE:
            waits = [r.wait() for r in self._reads_since_write if not r.done]
            if last is not None and not last.done:
                waits.append(last.wait())
            self._last_write = ticket
            self._reads_since_write = []
        else:
            waits = [last.wait()] if last is not None and not last.done else []
            reads = self._reads_since_write
            if len(reads) >= _PRUNE_READS_AT:
                reads = self._reads_since_write = [r for r in reads if not r.done]
            reads.append(ticket)
        return ticket, waits

    def clear_for(self, effect: Effect) -> bool:
        """Whether a call of ``effect`` issued now would wait for nothing.

        A call that is clear *and* completes without yielding to the event loop can skip :meth:`begin`:
        no other call can be issued while it runs, so registering it could change nothing.
        """
        if effect is _PURE:
            return True
        last = self._last_write
        if last is not None and not last.done:
            return False
        if effect is _ISOLATED_WRITE or effect is _DESTRUCTIVE:
            return not any(not r.done for r in self._reads_since_write)
        return True

    @staticmethod
    def end(ticket: Pending | None) -> None:
        """Mark a call begun with :meth:`begin` as done, releasing the calls waiting for it."""
        if ticket is not None:
            ticket.finish()

    @contextlib.contextmanager
    def issue(self, effect: Effect) -> Iterator[list[asyncio.Future[None]]]:
        """Register a call now; yields the futures it must wait for. Leaving marks it done."""
        ticket, waits = self.begin(effect)
        try:
            yield waits
        finally:
            self.end(ticket)
