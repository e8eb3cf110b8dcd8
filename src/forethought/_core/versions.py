"""Versions belong to states: one counter per state object, shared by every session and runtime.

A tool declares the states it reads and writes (``@tool(reads=..., writes=...)``; its own ``state`` cell
counts as both). Every authoritative write to a state moves that state's :class:`StateVersion` when the
write has *really* finished: ``begin_write`` when it starts, ``end_write`` when the tool function has
returned or raised, on the worker thread itself for threaded tools, so a write whose caller was cancelled
still counts as in progress until its thread ends. A speculation records the versions of what it reads
when it starts (:func:`read_token`); it may be served only if no write was in progress then and none has
finished since (:func:`still_current`), whichever session wrote.

The counters live beside the state, not in a session: a state is looked up by identity in a weak table, so
a state that is garbage-collected takes its counter with it (objects that cannot be weakly referenced, such
as a plain ``dict``, are kept alive by the table instead).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Protocol


class _Changeable(Protocol):
    def mark_changed(self) -> None: ...

__all__ = ["ReadToken", "StateVersion", "Write", "end_write", "read_token", "still_current", "versions_of"]


class StateVersion:
    """The version of one state and how many authoritative writes to it are still running."""

    __slots__ = ("_lock", "version", "writers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self.writers = 0

    def begin_write(self) -> None:
        with self._lock:
            self.writers += 1

    def end_write(self) -> None:
        """The write has finished (safe from any thread): the version moves on."""
        with self._lock:
            self.writers -= 1
            self.version += 1

    def bump(self) -> None:
        """A write that happened at once (a snapshot commit): the version moves on."""
        with self._lock:
            self.version += 1


ReadToken = tuple[int, ...] | None
"""The versions of a tool's read states when a speculation started; ``None``: a write was in progress."""

_weak: weakref.WeakKeyDictionary[object, StateVersion] = weakref.WeakKeyDictionary()
_strong: dict[int, tuple[object, StateVersion]] = {}
_table_lock = threading.Lock()


def _version_of(state: object) -> StateVersion:
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


def versions_of(states: Iterable[object]) -> tuple[StateVersion, ...]:
    """The shared version counters of ``states`` (created on first use)."""
    return tuple(_version_of(s) for s in states)


def read_token(versions: tuple[StateVersion, ...]) -> ReadToken:
    """What a speculation that starts reading now must still see at its claim."""
    out = []
    for v in versions:
        if v.writers:
            return None
        out.append(v.version)
    return tuple(out)


def still_current(versions: tuple[StateVersion, ...], token: ReadToken) -> bool:
    """Whether nothing was being written at ``token`` and nothing has been written since."""
    return token is not None and read_token(versions) == token


class Write:
    """The end of one authoritative write: marks its state cells changed and moves its versions, once.

    ``begin``/``abandon`` decide, under a lock, whether a threaded run starts at all (a run abandoned before
    its thread picked it up ends at once and never runs); when the threaded function returns an awaitable,
    ``hand_to_loop`` lets the write end on the event loop once that has been awaited.
    """

    __slots__ = ("_cells", "_lock", "_versions", "begun", "ended", "left", "on_loop")

    def __init__(self, cells: tuple[_Changeable, ...], versions: tuple[StateVersion, ...]) -> None:
        self._cells = cells
        self._versions = versions
        self._lock = threading.Lock()
        self.begun = self.ended = self.on_loop = self.left = False

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
        with self._lock:
            if self.ended:
                return
            self.ended = True
        end_write(self._cells, self._versions)


def end_write(cells: tuple[_Changeable, ...], versions: tuple[StateVersion, ...]) -> None:
    """A write has finished: mark its cells changed and move its versions (a tool on the event loop)."""
    try:
        for cell in cells:  # whatever the declared effect: a snapshot must never commit over it
            cell.mark_changed()
    finally:
        for version in versions:
            version.end_write()
