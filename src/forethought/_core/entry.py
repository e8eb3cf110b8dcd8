"""The speculation as a value, and the values a session hands back about guesses and calls.

An :class:`Entry` is one speculation: its call and key, its provenance (which predictors, at what
confidence), its price, its slot, its snapshot, and its :class:`~forethought._core.lifecycle.State` — the one
field that says where it is in its life (:mod:`forethought._core.lifecycle` moves it). Timestamps, the error
and the task are data about its run, never a second notion of its state.

What a session hands back is a value too, with an enum in it: a :class:`SpeculationTicket` (what became of a
guess: :class:`TicketStatus`), a :class:`CallOutcome` (how an authoritative call was served: :class:`CallKind`)
and a :class:`SettledSpeculation` (how a watched speculation ended). Both enums are ``StrEnum``, so
``ticket.status == "launched"`` keeps working.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import CallKey, ToolCall
from forethought._core.capacity import SlotRequest
from forethought._core.lifecycle import STATE_LOCK, State, TransitionSink, start
from forethought._core.tools import Snapshot, Tool, invoke_tool
from forethought._core.versions import ReadToken, Version

__all__ = ["PRICED_OUT", "CallKind", "CallOutcome", "DroppedError", "Entry", "SettledSpeculation",
           "SpeculationTicket", "TicketStatus", "discard_quietly", "isolated", "own_arguments", "settled_of"]

_log = logging.getLogger(__name__)


class DroppedError(Exception):
    """The speculation left the store before its tool started, so the tool must not run."""


def discard_quietly(snapshot: Snapshot, tool: str, traceback: bool = True) -> None:
    """Discard ``snapshot``; a failing discard is logged, never raised (the live state is untouched).

    ``tool`` is the name logs may show (a private tool's label); ``traceback=False`` for private calls.
    """
    try:
        snapshot.discard()
    except BaseException as exc:  # a speculation's leftovers never surface, whatever they raise
        _log.error("discarding a %s snapshot failed: %s", tool, type(exc).__name__, exc_info=traceback)


_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes, complex, range})


def _copy_tree(value: Any) -> Any:
    """A copy of a JSON-like tree (dicts, lists, scalars) several times faster than ``copy.deepcopy``;
    anything else inside is deep-copied."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        return {k: _copy_tree(v) for k, v in value.items()}
    if kind is list:
        return [_copy_tree(v) for v in value]
    return copy.deepcopy(value)


def own_arguments(arguments: Mapping[str, Any], top: bool = True) -> Mapping[str, Any]:
    """A private copy of a call's arguments, same values and types: a tool can keep or change what it
    receives without touching the caller's objects (or a predictor's, shared between guesses).

    With ``top=False`` a mapping of immutable values is returned as it is: it is only unpacked into the
    tool's keyword arguments (a fresh dict) at once, so nothing can change it in between.
    """
    for value in arguments.values():
        if type(value) not in _IMMUTABLE:
            return {k: _copy_tree(v) for k, v in arguments.items()}
    return dict(arguments) if top else arguments


def isolated(value: Any, strict: bool = False) -> Any:
    """A copy of a speculative result that nobody else holds (immutable scalars as they are).

    The original result of a speculation goes to at most one caller, the exact hit (the entry leaves the
    store then: served once). Everyone else who gets something from the entry gets a copy: partial hits
    narrow a copy, watchers (:meth:`Session.on_settled`) each get their own, and an exact hit of a watched
    entry gets a copy too, since a watcher's callback may run after the caller already changed the value.
    A value that cannot be copied is handed over as it is (``strict=False``) or the copy error is raised
    (``strict``: a partial hit, which would share it, is then skipped).
    """
    if type(value) in _IMMUTABLE:
        return value
    try:
        return _copy_tree(value)
    except RecursionError:
        if strict:
            raise
        return value
    except Exception:
        if strict:
            raise
        return value


_set_attribute = object.__setattr__

PRICED_OUT = "worth "
"""How the reason of a guess rejected for its price begins (:attr:`SpeculationTicket.priced_out`)."""


class TicketStatus(enum.StrEnum):
    """What ``speculate`` did with a guess."""

    LAUNCHED = "launched"
    """A new speculation was admitted (it waits for a slot, then runs)."""
    DEDUPLICATED = "deduplicated"
    """An identical speculation was already in the store: the guess joined it."""
    REJECTED = "rejected"
    """Not run: the reason says why (policy, effect, confidence, price, budget, breaker, a closed session)."""


class CallKind(enum.StrEnum):
    """How an authoritative call was served."""

    HIT = "hit"
    """By a speculation with its key."""
    PARTIAL_HIT = "partial_hit"
    """From a broader speculation of the same tool, narrowed by the tool's partial rule."""
    MISS = "miss"
    """By running the tool."""


_LAUNCHED = TicketStatus.LAUNCHED
_REJECTED = TicketStatus.REJECTED


@dataclass(frozen=True, init=False)
class SpeculationTicket:
    """What ``speculate`` did with a guess: ``status`` is launched, deduplicated or rejected."""

    status: TicketStatus
    key: CallKey | None = None
    reason: str = ""

    def __init__(self, status: TicketStatus, key: CallKey | None = None, reason: str = "") -> None:
        # One store instead of one object.__setattr__ per field (the generated frozen __init__): this value
        # is built on every speculate, and the hot path is measured in microseconds.
        _set_attribute(self, "__dict__", {"status": status, "key": key, "reason": reason})

    @property
    def launched(self) -> bool:
        return self.status is _LAUNCHED

    @property
    def priced_out(self) -> bool:
        """Rejected for its price alone (worth less than the policy's minimum): a higher chance could run it."""
        return self.status is _REJECTED and self.reason.startswith(PRICED_OUT)

    def __repr__(self) -> str:
        # The key holds the call's name and argument values, either of which may be private: never shown.
        return f"SpeculationTicket(status={str(self.status)!r}, reason={self.reason!r})"


@dataclass(frozen=True, init=False)
class CallOutcome:
    """The authoritative result of one call and how it was obtained (its repr never shows the value)."""

    value: Any
    kind: CallKind
    waited_s: float
    saved_s: float
    source: str = ""

    def __init__(self, value: Any, kind: CallKind, waited_s: float, saved_s: float, source: str = "") -> None:
        # Built on every call: one store instead of five (see SpeculationTicket).
        _set_attribute(self, "__dict__", {"value": value, "kind": kind, "waited_s": waited_s, "saved_s": saved_s,
                                          "source": source})

    def __repr__(self) -> str:
        return (f"CallOutcome(kind={str(self.kind)!r}, waited_s={self.waited_s!r}, saved_s={self.saved_s!r}, "
                f"source={self.source!r}, value=<{type(self.value).__name__}>)")


@dataclass(slots=True, eq=False)
class Entry:
    """One speculation: its call, provenance, price, state and (once admitted) its task.

    ``arguments`` are the canonical arguments (for partial-hit rules); ``given`` is what the tool receives:
    a private copy, taken at speculate time, of the arguments exactly as the predictor spelled them.

    ``state`` is where it is in its life; only :mod:`forethought._core.lifecycle` assigns it. The rest is data:
    ``started``/``finished`` bracket the tool function itself (not the queueing, the validator or the snapshot
    copy), so :attr:`run_seconds` is real tool time; ``error`` holds what the speculative run raised (the task
    itself never fails, so nothing is ever reported as unretrieved); ``credited_s`` is the saved time already
    counted from it, ``partial_hits`` how many calls it served partially (it stays in the store for more); ``reads``
    the versions of the states its result depends on and ``versions`` their values when its tool started (``None``:
    one was being written); ``watched``: someone asked to be told when it settles, so even its exact hit is served a
    copy. ``now`` is the session's clock, which every timestamp here is on. ``votes`` are the (source, confidence)
    of every guess that asked for this call (for calibration); ``value`` its worth in expected seconds
    (:mod:`forethought._core.pricing`), ``slot`` its claim on capacity.
    """

    key: CallKey
    call: ToolCall
    arguments: dict[str, Any]
    given: Mapping[str, Any]
    tool: Tool
    source: str
    confidence: float
    created: float
    expires: float
    now: Callable[[], float]
    votes: list[tuple[str, float]] = field(default_factory=list)
    state: State = State.PROPOSED
    sink: TransitionSink | None = None
    task: asyncio.Task[Any] | None = None
    value: float = 0.0
    slot: SlotRequest | None = None
    snapshot: Snapshot | None = None
    freshness: Any = None
    started: float | None = None
    finished: float | None = None
    error: BaseException | None = None
    versions: ReadToken = ()
    reads: tuple[Version, ...] = ()
    watched: bool = False
    credited_s: float = 0.0
    partial_hits: int = 0

    @property
    def run_seconds(self) -> float:
        """Seconds the speculative run took (or has taken so far); 0 if it never started."""
        if self.started is None:
            return 0.0
        end = self.finished if self.finished is not None else self.now()
        return max(0.0, end - self.started)

    def invoke(self, starting: bool = True) -> Any:
        """Call the speculation's tool (on the loop or a worker thread), on a snapshot when it has state.

        A snapshot is taken here, so a worker thread pays for the copy. With ``starting`` the entry moves
        QUEUED -> RUNNING as the tool begins (:func:`~forethought._core.lifecycle.start`); if it left the
        store meanwhile, the snapshot is discarded at once and the tool does not run. Without it the entry
        is already RUNNING (a shared run obtains its value through this call) and must still be.
        """
        t = self.tool
        snapshot = t.state.snapshot() if t.state is not None else None
        if starting:
            ok = start(self, self.now(), snapshot)
        else:
            with STATE_LOCK:
                ok = self.state is State.RUNNING
                if ok:
                    self.snapshot = snapshot
        if not ok:
            if snapshot is not None:
                discard_quietly(snapshot, t.label, not t.hide_key)
            raise DroppedError(t.label)
        return invoke_tool(t, snapshot.target if snapshot is not None else None, self.given)

    def drop_snapshot(self) -> None:
        """Discard its snapshot, if any (atomic against a worker thread attaching one as its tool starts)."""
        if self.tool.state is None:
            return
        with STATE_LOCK:
            snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            discard_quietly(snapshot, self.tool.label, not self.tool.hide_key)

    def succeeded(self) -> bool:
        """Whether the speculative run finished with a value."""
        task = self.task
        return (task is not None and task.done() and not task.cancelled() and self.error is None
                and self.started is not None and task.exception() is None)


@dataclass(frozen=True, slots=True)
class SettledSpeculation:
    """How one speculation ended, handed to whoever watches it (:meth:`Session.on_settled`).

    ``ok``: the tool finished with ``value``; ``error``: what the speculative run raised (``None`` when ok
    or cancelled); ``cancelled``: it was stopped (or dropped) before it finished. ``expires_at`` is the
    time on the runtime's clock after which no claim would be served from it.
    """

    key: CallKey = field(repr=False)
    tool: Tool
    arguments: Mapping[str, Any] = field(repr=False)
    ok: bool
    value: Any = field(repr=False)
    error: BaseException | None = field(repr=False)
    cancelled: bool
    expires_at: float


def settled_of(entry: Entry, copy: bool = True) -> SettledSpeculation:
    """How ``entry`` ended, as its watchers see it (a copy of its value when it succeeded, unless ``copy`` is
    off: a watcher that only reads it at once)."""
    task = entry.task
    assert task is not None
    cancelled = task.cancelled() or (entry.started is None and entry.error is None)
    ok = not cancelled and entry.succeeded()
    value = (isolated(task.result()) if copy else task.result()) if ok else None
    return SettledSpeculation(entry.key, entry.tool, entry.arguments, ok, value,
                              None if cancelled else entry.error, cancelled, entry.expires)
