"""Whether a server serialises its calls, learnt from the order its answers come in.

On a server that handles one call at a time, a guess still running when the client's own call arrives makes
that call wait at the server: speculation there must never leave a wrong guess in the way. So the proxy learns
it, online, from requests that overlap on one connection. A request answered while one sent before it is
still running overtook it: only a server that handles calls at once does that. A request that was expected to
overtake (its typical runtime is shorter than what the earlier one had left when it was sent) and did not
looks serial. :class:`Concurrency` counts that evidence (carried across sessions in the store) and says how
likely the server is to serialise (:attr:`Concurrency.serial_p`: Laplace-smoothed, 0.5 before any evidence,
which the pricing treats as "may well be"). The pricing (:mod:`~forethought.mcp.calibration`) charges a guess
the delay a wrong one would cause the client's next call on such a server, and the proxy discards the running
guesses a client's call cannot claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mcp_types import RequestId

MIN_LEAD_S = 0.002
"""How much sooner a request must at least be expected to end than an earlier one for their order to count."""
LEAD_SHARE = 0.5
"""... and by at least this share of its own typical runtime (runtimes vary: only a clear expectation counts)."""


@dataclass(slots=True)
class _Running:
    tool: str
    sent: float


class Concurrency:
    """Evidence of one server's concurrency (shared by the client sessions of a proxy process)."""

    def __init__(self, typical_s: Callable[[str], float | None], serial: int = 0, concurrent: int = 0) -> None:
        """``typical_s``: a tool's typical runtime as measured so far (``None``: not yet measured)."""
        self._typical_s = typical_s
        self.serial = serial
        """Requests that should have overtaken an earlier one and did not."""
        self.concurrent = concurrent
        """Requests that overtook an earlier one (only a server handling calls at once does that)."""
        self._running: dict[tuple[int, RequestId], _Running] = {}

    @property
    def serial_p(self) -> float:
        """How likely the server is to handle one call at a time (0.5 with no evidence)."""
        return (self.serial + 1) / (self.serial + self.concurrent + 2)

    def sent(self, link: int, request_id: RequestId, tool: str, now: float) -> None:
        """A ``tools/call`` went out on connection ``link`` (request ids are unique per connection)."""
        self._running[(link, request_id)] = _Running(tool, now)

    def ended(self, link: int, request_id: RequestId, now: float, answered: bool) -> None:
        """The request ended: answered (evidence, against the requests still running on its connection), or
        failed or abandoned (forgotten)."""
        me = self._running.pop((link, request_id), None)
        if me is None or not answered:
            return
        mine = self._typical_s(me.tool)
        for (other_link, _), other in self._running.items():
            if other_link != link:
                continue
            if other.sent < me.sent:
                self.concurrent += 1  # answered before a request sent earlier
                continue
            theirs = self._typical_s(other.tool)
            if (mine is not None and theirs is not None
                    and other.sent + theirs + max(MIN_LEAD_S, LEAD_SHARE * theirs) < me.sent + mine):
                self.serial += 1  # sent later, expected to end first, and still running
