"""The real run's effects outside any tool, on the session's write clock.

Model code that writes a file, changes the environment, starts a process or calls C through ``ctypes`` changes
what a ``READ_ONLY`` tool may return, but no tool call records it. While a statement of the real run
executes, its audit events are observed (:mod:`~forethought.code.effects`); from its first effect until the
statement ends, the session holds an *untracked write* (``Session.untracked_write``), so every read
speculated before that end is stale at its claim and runs again, as plain exec would have it read the new
state. A statement whose effect cannot be observed (one that changes the state of a module, say) holds the
write from its start. The session's methods are called on its event loop; the real run waits for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from forethought._core.runtime import Session
from forethought.code.effects import install, observing


class RealEffects:
    """One executor's bridge from the real run's thread to the session's write clock."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.loop: asyncio.AbstractEventLoop | None = None
        self.statements_with_effects = 0
        """Statements of this executor's runs that held a write (tests and notes)."""
        self._open: AbstractContextManager[None] | None = None
        self._in_statement = False
        self._depth = 0
        install()

    def reset(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    @contextmanager
    def statement(self, write_from_start: bool) -> Iterator[None]:
        """Run one statement observed (from the real run's thread): a write from its first effect (or from its
        start) until it ends."""
        self._in_statement = True
        try:
            if write_from_start:
                self._begin()
            with observing(self._effect):
                yield
        finally:
            self._in_statement = False
            if self._open is not None:
                self.statements_with_effects += 1
                self._end()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """A write for the block's duration (a tool the session does not run, called directly); inside a
        statement it lasts until the statement ends."""
        self._begin()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and not self._in_statement:
                self._end()

    def _effect(self, _event: str) -> None:
        self._begin()

    def _begin(self) -> None:
        if self._open is None:
            self._on_loop(self._enter)

    def _end(self) -> None:
        if self._open is not None:
            self._on_loop(self._exit)

    def _enter(self) -> None:
        context = self.session.untracked_write()
        context.__enter__()
        self._open = context

    def _exit(self) -> None:
        context, self._open = self._open, None
        if context is not None:
            context.__exit__(None, None, None)

    def _on_loop(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the session's event loop and wait for it (the real run is on another thread)."""
        loop = self.loop
        assert loop is not None

        async def run() -> None:
            action()

        asyncio.run_coroutine_threadsafe(run(), loop).result()
