"""The link between one turn's shadow and its real run: who already knows which call's result.

The real executor tells the link when it runs a call authoritatively and when it claims one; the shadow's
launcher asks it before speculating. So the shadow never launches a call the real run already made (it
takes the real result instead), a call written twice is speculated again once the first copy is claimed,
and a real call about to miss first lets a busy shadow settle, so the shadow's launch of that very call (if
it was about to happen) is claimed instead of duplicated. All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from forethought._core.calls import CallKey, ToolCall
from forethought._core.runtime import Session

SETTLE_TIMEOUT_S = 0.05


def shape(call: ToolCall) -> str:
    """The Python types of a call's arguments, all the way down: what canonical keys leave out (tuple vs
    list, int vs float) and a tool can still tell apart."""
    parts: list[str] = []
    _walk(list(call.positional), parts)
    _walk(dict(call.arguments), parts)
    return " ".join(parts)


def _walk(value: Any, parts: list[str]) -> None:
    # a module-level function, not a closure calling itself: that would be a reference cycle per call
    kind = type(value)
    parts.append(kind.__name__)
    if kind in (list, tuple, set, frozenset):
        parts.append("(")
        for item in value:
            _walk(item, parts)
        parts.append(")")
    elif kind is dict:
        parts.append("{")
        for k, v in value.items():
            parts.append(str(k))
            _walk(v, parts)
        parts.append("}")


class RealLink(Protocol):
    """What the real executor reports to (and asks of) the speculation side."""

    def same_shape(self, key: CallKey, call: ToolCall) -> bool:
        """Whether every speculation under ``key`` was made with the argument types of ``call``."""

    async def before_call(self, key: CallKey) -> None:
        """Called before a real call that no speculation holds yet."""

    def note_shape(self, key: CallKey, call: ToolCall) -> None:
        """The real run speculates ``call`` under ``key`` itself (its concurrent calls)."""

    def started(self, key: CallKey) -> asyncio.Future[Any]:
        """The real run starts ``key`` authoritatively; resolve the returned future with its outcome."""

    def claimed(self, key: CallKey) -> None:
        """The real run claimed or ran ``key``."""


class NullLink:
    """No speculation side: the executor alone (its own concurrent calls have the run's own types)."""

    def __init__(self) -> None:
        self.shapes: dict[CallKey, set[str]] = {}

    def same_shape(self, key: CallKey, call: ToolCall) -> bool:
        return self.shapes.get(key, {shape(call)}) == {shape(call)}

    def note_shape(self, key: CallKey, call: ToolCall) -> None:
        self.shapes.setdefault(key, set()).add(shape(call))

    async def before_call(self, key: CallKey) -> None:
        return None

    def started(self, key: CallKey) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        return future

    def claimed(self, key: CallKey) -> None:
        return None


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class Coordinator:
    """The shared record of one turn (implements :class:`RealLink` for the executor)."""

    def __init__(self, session: Session, settle: Callable[[float], Awaitable[None]] | None = None) -> None:
        self.session = session
        self._settle = settle
        self.real: dict[CallKey, asyncio.Future[Any]] = {}
        self.wanted: Counter[CallKey] = Counter()
        self.taken: Counter[CallKey] = Counter()
        self.calls: dict[CallKey, tuple[ToolCall, str, float]] = {}
        self.shapes: dict[CallKey, set[str]] = {}
        self.relaunched = 0

    def note_shape(self, key: CallKey, call: ToolCall) -> None:
        """A speculation under ``key`` is (or may be) running with ``call``'s argument types."""
        self.shapes.setdefault(key, set()).add(shape(call))

    def same_shape(self, key: CallKey, call: ToolCall) -> bool:
        known = self.shapes.get(key)
        return known is not None and known == {shape(call)}

    # --- shadow side ------------------------------------------------------------------------------

    def real_result(self, key: CallKey) -> asyncio.Future[Any] | None:
        return self.real.get(key)

    def want(self, key: CallKey, call: ToolCall, source: str, confidence: float) -> None:
        """The shadow asked for ``key`` (once more)."""
        self.wanted[key] += 1
        self.calls.setdefault(key, (call, source, confidence))

    # --- real side --------------------------------------------------------------------------------

    async def before_call(self, key: CallKey) -> None:
        if self._settle is not None and not self.session.has_speculation(key):
            await self._settle(SETTLE_TIMEOUT_S)

    def started(self, key: CallKey) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self.real[key] = future
        return future

    def claimed(self, key: CallKey) -> None:
        self.taken[key] += 1
        if self.wanted[key] > self.taken[key] and not self.session.has_speculation(key):
            call, source, confidence = self.calls[key]
            if self.session.speculate(call, source=source, confidence=confidence).launched:
                self.relaunched += 1
