"""A thread-safe single-assignment cell: the result of a speculated call as the shadow thread sees it.

The event loop resolves cells (from speculation tasks' done-callbacks); the shadow thread waits on them.
Callbacks run on the resolving thread, right away if the cell is already resolved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_UNSET: Any = object()


class Cell:
    """A value or an exception, set once, waited on from any thread."""

    __slots__ = ("_callbacks", "_error", "_event", "_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._value: Any = _UNSET
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Cell], None]] = []

    @classmethod
    def resolved(cls, value: Any) -> Cell:
        cell = cls()
        cell.set_result(value)
        return cell

    def done(self) -> bool:
        return self._event.is_set()

    def failed(self) -> bool:
        return self._event.is_set() and self._error is not None

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(_UNSET, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._value, self._error = value, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_callback(self, callback: Callable[[Cell], None]) -> None:
        """Call ``callback(cell)`` once the cell is resolved (now, if it already is)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def result(self) -> Any:
        """The value of a resolved cell (raises its exception)."""
        if not self._event.is_set():
            raise RuntimeError("cell not resolved")
        if self._error is not None:
            raise self._error
        return self._value

    def error(self) -> BaseException | None:
        return self._error

    def wait(self, timeout: float | None) -> bool:
        """Block until resolved or ``timeout`` passes; returns whether it is resolved."""
        return self._event.wait(timeout)
