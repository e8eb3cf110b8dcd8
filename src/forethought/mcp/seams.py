"""What a session speculator (:mod:`~forethought.mcp.speculation`) is built from and what it reports: how a
call was answered, its link to the daemon, how it makes a predictor, and what the proxy's sessions share of
what they learn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from forethought.mcp.calibration import Calibrator
from forethought.mcp.firstcalls import FirstCalls
from forethought.mcp.upstream import Answer
from forethought.predictors.base import Predictor

__all__ = ["CallReport", "DaemonSide", "Learning", "PredictorFactory"]


@dataclass(frozen=True, slots=True)
class CallReport:
    """How one client call was answered."""

    answer: Answer
    kind: str
    """``hit``, ``miss`` or ``passthrough``."""


class DaemonSide(Protocol):
    """A session's link to ``forethought serve`` (:mod:`~forethought.mcp.daemon_hook`), as the speculator sees it."""

    @property
    def in_charge(self) -> bool:
        """Whether the daemon guesses for this session (linked, or linking): the proxy's own guessing is off."""

    def listed(self, listing: Mapping[str, Mapping[str, Any]]) -> None:
        """The upstream's tools as a complete ``tools/list`` gave them (name -> entry)."""


class PredictorFactory(Protocol):
    """Builds the predictor of a tool set (``schemas``: name -> input schema) and names its fingerprint."""

    def __call__(self, schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]: ...


@dataclass(frozen=True, slots=True)
class Learning:
    """What the client sessions of one proxy share of what they learn: the pricing of guesses (runtimes, hit
    rates, the server's concurrency) and how sessions begin. ``listed`` is told each tool set a session lists
    (the proxy loads what its store holds for it then)."""

    calibrator: Calibrator
    first_calls: FirstCalls
    listed: Callable[[str], None] = lambda _fingerprint: None
    credit: Callable[[str], float] = lambda _fingerprint: 0.0
    """Upstream requests earlier sessions of a tool set left unspent under the bound (see ``within_bound``)."""
