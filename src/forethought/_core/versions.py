"""The one write clock: a write counts as in progress until it has really ended, for every reader.

Versions belong to states. Every state a tool reads or writes has a :class:`Version`: how many writes to it
have ended and how many are still running. An authoritative write begins on the versions of everything it
may change and ends exactly once, when its work has *really* ended: a threaded tool's thread returned, an
async tool's own task finished, an upstream request was answered (:class:`Write`). Never when its caller
merely stopped waiting: a write whose caller was cancelled is still in progress while its thread or its
upstream goes on. A speculation records the versions of what it reads when its tool starts
(:func:`read_token`); it may be served only if no write was in progress then and none has ended since
(:func:`still_current`), whichever session, process or edge wrote.

Three kinds of state share this one mechanism:

* a state object a tool declares (``@tool(reads=..., writes=..., state=...)``): its counter lives beside it,
  looked up by identity in a weak table (:func:`versions_of`), so a collected state takes it along;
* the session (:attr:`WriteClock.session`): every write of one session, which its READ_ONLY reads depend on;
* the world (:attr:`WriteClock.world`): every write of the runtime, which a READ_ONLY tool that declares no
  state depends on (it could read anything), and every effect outside any tool (a code action's own
  statement, a call an MCP proxy relays blind: :meth:`WriteClock.untracked`).

A :class:`Version` is a protocol, so a state shared across processes (an MCP proxy's SQLite file) plugs in
the same way: a tool that declares it reads and writes through it, and the same rule decides.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

__all__ = ["ReadToken", "StateVersion", "Version", "Write", "WriteClock", "read_token", "still_current",
           "versions_of"]


@runtime_checkable
class Version(Protocol):
    """The version of one state: writes begun, writes ended, and a token that is ``None`` while one runs."""

    def begin_write(self) -> None:
        """A write of this state has begun."""

    def end_write(self) -> None:
        """A write of this state has really ended (safe from any thread): the version moves on."""

    def bump(self) -> None:
        """A write that happened at once (a snapshot commit): the version moves on."""

    def token(self) -> int | None:
        """The version now, or ``None`` while a write is in progress."""


class StateVersion:
    """The in-memory :class:`Version` of one state: a counter and the number of writes still running."""

    __slots__ = ("_lock", "changed_at", "version", "writers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self.writers = 0
        self.changed_at = 0.0
        """Wall-clock seconds (``time.time``) when a write of this state last ended (0: never): what a value
        computed elsewhere (a shared result, :mod:`~forethought._core.shared`) must postdate."""

    def begin_write(self) -> None:
        with self._lock:
            self.writers += 1

    def end_write(self) -> None:
        with self._lock:
            self.writers -= 1
            self.version += 1
            self.changed_at = time.time()

    def bump(self) -> None:
        with self._lock:
            self.version += 1
            self.changed_at = time.time()

    def token(self) -> int | None:
        return None if self.writers else self.version


ReadToken = tuple[int, ...] | None
"""The versions of a tool's read states when a speculation started; ``None``: a write was in progress."""

_weak: weakref.WeakKeyDictionary[object, Version] = weakref.WeakKeyDictionary()
_strong: dict[int, tuple[object, Version]] = {}
_table_lock = threading.Lock()


def _version_of(state: object) -> Version:
    if isinstance(state, Version):  # a state that keeps its own version (shared across processes, say)
        return state
    with _table_lock:
        try:
            found = _weak.get(state)
            if found is None:
                found = _weak[state] = StateVersion()
            return found
        except TypeError:  # not weakly referenceable or not hashable: keyed by identity, kept alive
            pair = _strong.get(id(state))
            if pair is None or pair[0] is not state:
                pair = _strong[id(state)] = (state, StateVersion())
            return pair[1]


def versions_of(states: Iterable[object]) -> tuple[Version, ...]:
    """The shared versions of ``states`` (created on first use; a :class:`Version` is its own)."""
    return tuple(_version_of(s) for s in states)


def read_token(versions: tuple[Version, ...]) -> ReadToken:
    """What a speculation that starts reading now must still see at its claim."""
    out = []
    for v in versions:
        if type(v) is StateVersion:  # the common case, without a method call
            if v.writers:
                return None
            out.append(v.version)
            continue
        token = v.token()
        if token is None:
            return None
        out.append(token)
    return tuple(out)


def still_current(versions: tuple[Version, ...], token: ReadToken) -> bool:
    """Whether nothing was being written at ``token`` and nothing has been written since."""
    if token is None or len(token) != len(versions):
        return False
    for v, seen in zip(versions, token, strict=True):
        if type(v) is StateVersion:  # the common case, without a method call or a tuple
            if v.writers or v.version != seen:
                return False
        elif v.token() != seen:
            return False
    return True


class _Changeable(Protocol):
    def mark_changed(self) -> None: ...


class Write:
    """One authoritative write: begun on its versions when created, ended exactly once when its work ends.

    ``end`` marks the state cells changed and moves every version on; a second ``end`` does nothing, so
    whichever of the thread, the task or the caller sees the end first ends it. For a threaded run,
    ``begin``/``abandon`` decide under a lock whether the thread starts at all (a run abandoned before its
    thread picked it up ends at once and never runs); when the threaded function returns an awaitable,
    ``hand_to_loop`` lets the write end on the event loop once that has been awaited.
    """

    __slots__ = ("_cells", "_lock", "_versions", "begun", "ended", "left", "on_loop")

    def __init__(self, cells: tuple[_Changeable, ...], versions: tuple[Version, ...]) -> None:
        self._cells = cells
        self._versions = versions
        self._lock = threading.Lock()
        self.begun = self.ended = self.on_loop = self.left = False
        for version in versions:
            version.begin_write()

    def begin(self) -> bool:
        """From the thread, before the tool runs: ``False`` if the write was abandoned (do not run)."""
        with self._lock:
            if self.ended:
                return False
            self.begun = True
            return True

    def hand_to_loop(self) -> bool:
        """From the thread: the write continues on the loop, unless the loop side has already left."""
        with self._lock:
            if not self.left:
                self.on_loop = True
            return self.on_loop

    def abandon(self) -> None:
        """The awaiting side leaves (cancelled or failed to schedule): ends the write if it never began."""
        with self._lock:
            self.left = True
            started = self.begun
        if not started:
            self.end()

    def end(self) -> None:
        """The write's work has really ended: its cells are marked changed and its versions move on."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
        try:
            for cell in self._cells:  # whatever the declared effect: a snapshot must never commit over it
                cell.mark_changed()
        finally:
            for version in self._versions:
                version.end_write()


class WriteClock:
    """The write clock of one runtime: the world's version and a version per session (see the module)."""

    __slots__ = ("world",)

    def __init__(self) -> None:
        self.world: Version = StateVersion()
        """Every write of the runtime, and every effect outside any tool."""

    def session(self) -> Version:
        """A new session's own version (every write of that session)."""
        return StateVersion()

    def fenced(self) -> Version:
        """A new session's fence version: moved only by its fences (an effect of the session nobody can see)."""
        return StateVersion()

    def untracked(self, session: Version, others: tuple[Version, ...] = ()) -> Write:
        """Begin an effect outside any tool in ``session`` (it writes the session, the world and ``others``);
        the caller ends the returned :class:`Write` when the effect has really ended."""
        return Write((), (session, self.world, *others))
