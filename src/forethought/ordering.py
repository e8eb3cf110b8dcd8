"""Call ordering within one session: authoritative calls take effect in the order they were issued.

Early dispatch lets a session issue a call before the previous one has finished. To stay equivalent to
serial execution, a call that writes waits for every earlier call; a call that reads waits for earlier
writes; a pure call waits for nothing. The order is fixed when the call is *issued* (synchronously), not
when it starts running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from forethought.tools import Effect


class CallOrder:
    """Reader/writer ordering by issue time for one session's authoritative calls."""

    def __init__(self) -> None:
        self._last_write: asyncio.Future[None] | None = None
        self._reads_since_write: list[asyncio.Future[None]] = []

    @contextlib.contextmanager
    def issue(self, effect: Effect) -> Iterator[list[asyncio.Future[None]]]:
        """Register a call now; yields the futures it must wait for. Leaving marks it done."""
        if effect is Effect.PURE:
            yield []
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if effect.writes:
            waits = [f for f in (self._last_write, *self._reads_since_write) if f is not None]
            self._last_write = done
            self._reads_since_write = []
        else:
            waits = [self._last_write] if self._last_write is not None else []
            self._reads_since_write = [f for f in self._reads_since_write if not f.done()]
            self._reads_since_write.append(done)
        try:
            yield [w for w in waits if not w.done()]
        finally:
            if not done.done():
                done.set_result(None)
