"""The speculation store: one session's isolated speculative results, claimable by canonical key.

An :class:`Entry` holds the running task of one speculation, its provenance (which predictor, with what
confidence), its expiry and the snapshot it ran against. Entries are invisible to the session until an
authoritative call with the identical key claims them; a claim removes the entry, so a result is served at
most once. Identical keys are single-flight. Discarding an entry cancels its running work.

The module also defines the values a session hands back: a :class:`SpeculationTicket` (what became of
a guess), a :class:`CallOutcome` (how an authoritative call was served) and a :class:`SettledSpeculation`
(how a watched speculation ended).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import CallKey, ToolCall
from forethought._core.capacity import SlotRequest
from forethought._core.tools import Snapshot, Tool, invoke_tool

_SNAPSHOT_LOCK = threading.Lock()
"""Guards (Entry.dropped, Entry.snapshot) between a worker thread taking a snapshot and the loop dropping it."""

_log = logging.getLogger(__name__)


class DroppedError(Exception):
    """The speculation left the store before its tool started, so the tool must not run."""


def discard_quietly(snapshot: Snapshot, tool: str, traceback: bool = True) -> None:
    """Discard ``snapshot``; a failing discard is logged, never raised (the live state is untouched).

    ``tool`` is the name logs may show (a private tool's label); ``traceback=False`` for private calls.
    """
    try:
        snapshot.discard()
    except Exception as exc:
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


@dataclass(frozen=True, init=False)
class SpeculationTicket:
    """What ``speculate`` did with a guess: ``status`` is launched, deduplicated or rejected."""

    status: str
    key: CallKey | None = None
    reason: str = ""

    def __init__(self, status: str, key: CallKey | None = None, reason: str = "") -> None:
        # One store instead of one object.__setattr__ per field (the generated frozen __init__): this value
        # is built on every speculate, and the hot path is measured in microseconds.
        _set_attribute(self, "__dict__", {"status": status, "key": key, "reason": reason})

    @property
    def launched(self) -> bool:
        return self.status == "launched"

    @property
    def priced_out(self) -> bool:
        """Rejected for its price alone (worth less than the policy's minimum): a higher chance could run it."""
        return self.status == "rejected" and self.reason.startswith(PRICED_OUT)

    def __repr__(self) -> str:
        # The key holds the call's name and argument values, either of which may be private: never shown.
        return f"SpeculationTicket(status={self.status!r}, reason={self.reason!r})"


@dataclass(frozen=True, init=False)
class CallOutcome:
    """The authoritative result of one call and how it was obtained (its repr never shows the value)."""

    value: Any
    kind: str  # "hit", "partial_hit" or "miss"
    waited_s: float
    saved_s: float
    source: str = ""

    def __init__(self, value: Any, kind: str, waited_s: float, saved_s: float, source: str = "") -> None:
        # Built on every call: one store instead of five (see SpeculationTicket).
        _set_attribute(self, "__dict__", {"value": value, "kind": kind, "waited_s": waited_s, "saved_s": saved_s,
                                          "source": source})

    def __repr__(self) -> str:
        return (f"CallOutcome(kind={self.kind!r}, waited_s={self.waited_s!r}, saved_s={self.saved_s!r}, "
                f"source={self.source!r}, value=<{type(self.value).__name__}>)")


@dataclass(slots=True, eq=False)
class Entry:
    """One speculation: its call, provenance, timing and (once started) its task.

    ``arguments`` are the canonical arguments (for partial-hit rules); ``given`` is what the tool receives:
    a private copy, taken at speculate time, of the arguments exactly as the predictor spelled them.

    ``started``/``finished`` bracket the tool function itself (not the queueing, the validator or the
    snapshot copy), so :attr:`run_seconds` is real tool time. ``error`` holds what the speculative run
    raised (the task itself never fails, so nothing is ever reported as unretrieved). ``dropped`` is set
    once the entry has left the store unserved. ``credited_s`` is the saved time already counted from it,
    ``partial_hits`` how many calls it served partially (it stays in the store for more). ``versions`` are
    the versions of the states the tool reads when it started (``None``: one was being written);
    ``watched``: someone asked to be told when it settles, so even its exact hit is served a copy. ``now`` is the
    session's clock (:class:`~forethought._core.clock.Clock`'s ``monotonic``), which every timestamp here is on.
    ``votes`` are the (source, confidence) of every guess that asked for this call (for calibration);
    ``value`` its worth in expected seconds (:mod:`forethought._core.pricing`), ``slot`` its claim on capacity,
    ``claimed``: an authoritative call with its key took it out of the store.
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
    epoch: int
    now: Callable[[], float]
    votes: list[tuple[str, float]] = field(default_factory=list)
    task: asyncio.Task[Any] | None = None
    value: float = 0.0
    slot: SlotRequest | None = None
    claimed: bool = False
    snapshot: Snapshot | None = None
    freshness: Any = None
    started: float | None = None
    finished: float | None = None
    error: BaseException | None = None
    versions: tuple[int, ...] | None = ()
    watched: bool = False
    dropped: bool = False
    credited_s: float = 0.0
    partial_hits: int = 0

    @property
    def run_seconds(self) -> float:
        """Seconds the speculative run took (or has taken so far); 0 if it never started."""
        if self.started is None:
            return 0.0
        end = self.finished if self.finished is not None else self.now()
        return max(0.0, end - self.started)

    def invoke(self) -> Any:
        """Call the speculation's tool (on the loop or a worker thread), on a snapshot when it has state.

        A snapshot is taken here, so a worker thread pays for the copy; if the entry was dropped meanwhile
        the snapshot is discarded at once and the tool does not run.
        """
        t = self.tool
        target = None
        if t.state is not None:
            snapshot = t.state.snapshot()
            with _SNAPSHOT_LOCK:
                keep = not self.dropped
                if keep:
                    self.snapshot = snapshot
            if not keep:
                discard_quietly(snapshot, t.label, not t.hide_key)
                raise DroppedError(t.label)
            target = snapshot.target
        elif self.dropped:
            raise DroppedError(t.name)
        self.started = self.now()
        return invoke_tool(t, target, self.given)

    def drop_snapshot(self) -> None:
        """Mark the entry dropped and discard its snapshot, if any (safe against a worker taking one now)."""
        if self.tool.state is None:
            self.dropped = True
            return
        with _SNAPSHOT_LOCK:
            self.dropped = True
            snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            discard_quietly(snapshot, self.tool.label, not self.tool.hide_key)

    def succeeded(self) -> bool:
        """Whether the speculative run finished with a value."""
        task = self.task
        return (task is not None and task.done() and not task.cancelled() and self.error is None
                and self.started is not None and task.exception() is None)


class SpeculationStore:
    """Isolated speculative entries of one session, by canonical key."""

    def __init__(self) -> None:
        self._entries: dict[CallKey, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, key: CallKey) -> Entry | None:
        return self._entries.get(key)

    def add(self, entry: Entry) -> None:
        """Add ``entry``; an entry already under its key must have been popped first."""
        key = entry.key
        if key in self._entries:
            raise ValueError(f"an entry for this key is already in the store: {key[:80]!r}")
        self._entries[key] = entry

    def pop(self, key: CallKey) -> Entry | None:
        """Remove and return the entry for ``key`` (the claim primitive); ``None`` if absent."""
        return self._entries.pop(key, None)

    def of_tool(self, tool: str) -> list[Entry]:
        """Entries of one tool (candidates for a partial hit); a store holds one turn's few entries."""
        return [e for e in self._entries.values() if e.tool.name == tool]

    def expired(self, now: float) -> list[Entry]:
        """Entries whose expiry is at or before ``now`` (a claim at ``now`` would not serve them)."""
        return [e for e in self._entries.values() if e.expires <= now]

    def earliest_expiry(self) -> float:
        """The soonest expiry of any entry (infinity when the store is empty)."""
        return min((e.expires for e in self._entries.values()), default=float("inf"))

    def running_count(self) -> int:
        return sum(1 for e in self._entries.values() if e.task is not None and not e.task.done())


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


def settled_of(entry: Entry) -> SettledSpeculation:
    """How ``entry`` ended, as its watchers see it (a copy of its value when it succeeded)."""
    task = entry.task
    assert task is not None
    cancelled = task.cancelled() or (entry.started is None and entry.error is None)
    ok = not cancelled and entry.succeeded()
    return SettledSpeculation(entry.key, entry.tool, entry.arguments, ok, isolated(task.result()) if ok else None,
                              None if cancelled else entry.error, cancelled, entry.expires)
