"""The speculation state machine: an enum of states and the one function that moves a speculation.

Every guess starts PROPOSED. One the session will not run is REFUSED (policy, effect, confidence, price,
budget, breaker, a closed session); one identical to a speculation already in the store JOINS it; one worth
more once evidence due soon has come is DEFERRED (held, and proposed again later or learnt at the turn's
end). An admitted guess becomes a speculation (an :class:`~forethought._core.entry.Entry`), QUEUED for a
speculative slot. It is RUNNING once its tool function has begun, then READY (a value) or FAILED (it raised
or timed out). An authoritative call with its key CLAIMS it whatever its state (it leaves the store then),
and it ends SERVED (a hit), COMMITTED (a hit whose snapshot became the live state) or DISCARDED (not
served: cancelled, expired, stale, a conflict, preempted, withdrawn, the turn's end)::

    PROPOSED ──► REFUSED | JOINED | DEFERRED
        │ admitted
        ▼
     QUEUED ──► RUNNING ──► READY | FAILED
        │          │           │
        └──────────┴─────┬─────┘
              claim      │        unclaimed end
                ▼        └──────────────────────► DISCARDED
             CLAIMED ──► SERVED | COMMITTED | DISCARDED

:func:`move` is the only place a speculation's ``state`` changes (:func:`start` is the same move from a
worker thread, atomic with attaching its snapshot); it checks the transition against :data:`ALLOWED` and
tells the session's :class:`TransitionSink`, which publishes it as a
:class:`~forethought.telemetry.Transition`. Finished states (:data:`FINISHED`) never move again.

# Invariant: an entry is in its session's store exactly while its state is QUEUED, RUNNING, READY or FAILED.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Protocol

__all__ = ["ALLOWED", "FINISHED", "IN_STORE", "STATE_LOCK", "IllegalTransition", "State", "TransitionSink",
           "move", "proposed", "start"]


class State(enum.StrEnum):
    """Where a guess or a speculation is in its life (see the module docstring for the diagram)."""

    PROPOSED = "proposed"
    """Offered by a predictor or an edge; not decided yet."""
    REFUSED = "refused"
    """Not run (finished)."""
    JOINED = "joined"
    """Merged into an identical speculation already in the store (finished: that one goes on)."""
    DEFERRED = "deferred"
    """Held back for evidence due soon; proposed again later, or learnt as a miss at the turn's end."""
    QUEUED = "queued"
    """Admitted: waiting for a speculative slot; its tool has not begun."""
    RUNNING = "running"
    """Its tool function has begun."""
    READY = "ready"
    """Its tool finished with a value; waiting for a claim."""
    FAILED = "failed"
    """Its tool (or its validator, before the tool began) raised or timed out; never served."""
    CLAIMED = "claimed"
    """An authoritative call with its key took it out of the store; never preempted from here on."""
    SERVED = "served"
    """Its value went to that call: a hit (finished)."""
    COMMITTED = "committed"
    """A hit whose snapshot became the live state (finished)."""
    DISCARDED = "discarded"
    """Left unserved (finished)."""

    __hash__ = object.__hash__


_S = State
ALLOWED: dict[State, frozenset[State]] = {
    _S.PROPOSED: frozenset({_S.REFUSED, _S.JOINED, _S.DEFERRED, _S.QUEUED}),
    _S.DEFERRED: frozenset({_S.PROPOSED}),
    _S.QUEUED: frozenset({_S.RUNNING, _S.FAILED, _S.CLAIMED, _S.DISCARDED}),
    _S.RUNNING: frozenset({_S.READY, _S.FAILED, _S.CLAIMED, _S.DISCARDED}),
    _S.READY: frozenset({_S.CLAIMED, _S.DISCARDED}),
    _S.FAILED: frozenset({_S.CLAIMED, _S.DISCARDED}),
    _S.CLAIMED: frozenset({_S.SERVED, _S.COMMITTED, _S.DISCARDED}),
    _S.REFUSED: frozenset(), _S.JOINED: frozenset(), _S.SERVED: frozenset(), _S.COMMITTED: frozenset(),
    _S.DISCARDED: frozenset(),
}
"""Every legal transition: ``ALLOWED[old]`` holds the states ``old`` may move to."""

FINISHED = frozenset(state for state, after in ALLOWED.items() if not after)
"""States a guess never leaves."""
IN_STORE = frozenset({_S.QUEUED, _S.RUNNING, _S.READY, _S.FAILED})
"""States of a speculation waiting in its session's store (unclaimed, not ended)."""

STATE_LOCK = threading.Lock()
"""Makes a move out of QUEUED atomic with what a worker thread does at the same moment (starting the tool,
attaching its snapshot) against what the loop does (discarding or claiming it). Only :func:`start` moves a
speculation off the loop, and only out of QUEUED, so moves out of any other state need no lock."""
_QUEUED = State.QUEUED


class IllegalTransition(RuntimeError):
    """A move the state machine does not allow: a bug in forethought, never a user error."""


class TransitionSink(Protocol):
    """Where a session's moves are published (its ledger); may be told from a worker thread.

    ``watchers`` is truthy while anyone listens: a move tells the sink nothing otherwise (the hot path).
    """

    watchers: Any

    def moved(self, subject: Any, old: State, new: State, cause: str) -> None:
        """``subject`` (an entry, or a guess's tool for one that never became one) moved ``old`` -> ``new``."""


class _Moving(Protocol):
    state: State
    sink: TransitionSink | None


def move(entry: _Moving, new: State, cause: str = "") -> State:
    """Move ``entry`` to ``new`` (``cause``: why, e.g. the outcome event's name); returns the old state.

    Raises :class:`IllegalTransition` for a move :data:`ALLOWED` does not list.
    """
    old = entry.state
    if old is _QUEUED:  # the only state a worker thread moves out of (start): decide under the lock
        with STATE_LOCK:
            old = entry.state
            if new not in ALLOWED[old]:
                raise IllegalTransition(f"a speculation cannot move from {old} to {new}")
            entry.state = new
    else:
        if new not in ALLOWED[old]:
            raise IllegalTransition(f"a speculation cannot move from {old} to {new}")
        entry.state = new
    sink = entry.sink
    if sink is not None and sink.watchers:
        sink.moved(entry, old, new, cause)
    return old


class _Starting(_Moving, Protocol):
    started: float | None
    snapshot: Any


def start(entry: _Starting, now: float, snapshot: Any = None) -> bool:
    """QUEUED -> RUNNING as the tool function begins (from a worker thread too), attaching its snapshot in
    the same atomic step; ``False`` (nothing moved) when the entry has already left the store."""
    with STATE_LOCK:
        if entry.state is not _S.QUEUED:
            return False
        entry.state = _S.RUNNING
        entry.started = now
        entry.snapshot = snapshot
    sink = entry.sink
    if sink is not None and sink.watchers:
        sink.moved(entry, _S.QUEUED, _S.RUNNING, "")
    return True


def proposed(sink: TransitionSink, subject: Any, new: State, cause: str = "") -> None:
    """A guess that never becomes a speculation of its own moved PROPOSED -> ``new`` (refused, joined,
    deferred); a deferred one proposed again moves DEFERRED -> PROPOSED."""
    old = _S.DEFERRED if new is _S.PROPOSED else _S.PROPOSED
    if new not in ALLOWED[old]:
        raise IllegalTransition(f"a guess cannot move from {old} to {new}")
    if sink.watchers:
        sink.moved(subject, old, new, cause)
