"""Snapshots of in-memory Python state: a versioned cell whose snapshots are deep copies.

:class:`ObjectState` holds one live Python value (a backend instance, a dict, ...) and a version counter.
Authoritative calls mutate the live value and then call :meth:`ObjectState.mark_changed`, which advances
the version. A speculation gets a :class:`ObjectSnapshot`: a deep copy of the live value taken at a base
version. Its :meth:`~ObjectSnapshot.commit` makes the copy the live value only if the live version still
equals the base version (then the version advances), so a speculation that ran on a state the session has
since changed can never leak in: it is refused and the caller re-runs the call.

A snapshot is eager by default (the copy is taken when the snapshot is taken). With ``lazy=True`` the copy
is deferred until the tool first needs it: the tool function receives a :class:`LazyTarget` and calls
:func:`resolve_target` when it is about to touch the state (after any injected latency). The base version
is then the version at that moment, which lets a speculation started while an earlier authoritative call is
still running commit if that call has finished before the state is read. Copy and commit hold one lock, so
both are safe from worker threads.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from forethought.errors import SnapshotError


class ObjectState:
    """A live Python value with a version counter, handing out deep-copy snapshots."""

    def __init__(self, value: Any, lazy: bool = False) -> None:
        self._value = value
        self._version = 0
        self._lock = threading.Lock()
        self.lazy = lazy

    @property
    def live(self) -> Any:
        """The live value (authoritative calls run against it)."""
        return self._value

    @property
    def version(self) -> int:
        return self._version

    def mark_changed(self) -> None:
        """Record that an authoritative call may have changed the live value."""
        with self._lock:
            self._version += 1

    def snapshot(self) -> ObjectSnapshot:
        """A snapshot of the live value: copied now, or on first use when the cell is lazy."""
        snap = ObjectSnapshot(self)
        if not self.lazy:
            snap.materialize()
        return snap

    def _copy(self) -> tuple[Any, int]:
        with self._lock:
            try:
                return copy.deepcopy(self._value), self._version
            except Exception as exc:
                raise SnapshotError(f"cannot copy state of type {type(self._value).__name__}: {exc}") from exc

    def _install(self, value: Any, base: int) -> bool:
        with self._lock:
            if self._version != base:
                return False
            self._value = value
            self._version += 1
            return True


class ObjectSnapshot:
    """One deep copy of an :class:`ObjectState` at a base version."""

    def __init__(self, cell: ObjectState) -> None:
        self._cell = cell
        self._copy: Any = None
        self._base: int | None = None
        self._done = False

    @property
    def base_version(self) -> int | None:
        """The live version the copy was taken at (``None`` while a lazy snapshot is untouched)."""
        return self._base

    @property
    def materialized(self) -> bool:
        return self._base is not None

    def materialize(self) -> Any:
        """Take the copy now if not yet taken, and return it."""
        if self._done:
            raise SnapshotError("snapshot already committed or discarded")
        if self._base is None:
            self._copy, self._base = self._cell._copy()
        return self._copy

    @property
    def target(self) -> Any:
        """The copy (eager cells) or a :class:`LazyTarget` that takes the copy on first use (lazy cells)."""
        if self._base is None and self._cell.lazy:
            return LazyTarget(self)
        return self.materialize()

    def commit(self) -> bool:
        """Make the copy live if the live version is still the base version; ``False`` otherwise.

        An untouched lazy snapshot never read the state, so it commits trivially and changes nothing.
        """
        if self._done:
            return False
        self._done = True
        if self._base is None:
            return True
        value, self._copy = self._copy, None
        return self._cell._install(value, self._base)

    def discard(self) -> None:
        """Drop the copy; the live value is untouched."""
        self._done = True
        self._copy = None


class LazyTarget:
    """What a tool function receives from a lazy snapshot; :func:`resolve_target` turns it into the copy."""

    __slots__ = ("_snapshot",)

    def __init__(self, snapshot: ObjectSnapshot) -> None:
        self._snapshot = snapshot

    def resolve(self) -> Any:
        return self._snapshot.materialize()


def resolve_target(target: Any) -> Any:
    """The value a stateful tool should act on: the copy behind a :class:`LazyTarget`, else ``target``."""
    return target.resolve() if isinstance(target, LazyTarget) else target
