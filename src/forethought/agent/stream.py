"""The model's text of one agent run as an async iterator
(:meth:`Agent.stream <forethought.agent.loop.Agent.stream>`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from forethought.agent.results import AgentResult
from forethought.errors import ForethoughtError


class _Runs(Protocol):
    """What a stream needs of an agent: a run that hands each piece of text to ``on_text``."""

    def run(self, messages: Sequence[Mapping[str, Any]],
            on_text: Callable[[str], object] | None = ...) -> Coroutine[Any, Any, AgentResult]: ...


class AgentStream:
    """The model's text of one :meth:`Agent.run`, as an async iterator; ``result`` once it is exhausted.

    The run starts at the first ``anext``; leaving the loop early (``break``, an exception, cancellation)
    cancels the run. An error of the run is raised from the iteration.
    """

    def __init__(self, agent: _Runs, messages: Sequence[Mapping[str, Any]]) -> None:
        self._agent = agent
        self._messages = list(messages)
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._task: asyncio.Task[AgentResult] | None = None
        self._result: AgentResult | None = None

    @property
    def result(self) -> AgentResult:
        if self._result is None:
            raise ForethoughtError("the agent's stream has not finished yet")
        return self._result

    def __aiter__(self) -> AgentStream:
        return self

    async def __anext__(self) -> str:
        if self._task is None:
            self._task = asyncio.create_task(self._agent.run(self._messages, on_text=self._queue.put_nowait))
            self._task.add_done_callback(lambda _: self._queue.put_nowait(None))
        try:
            piece = await self._queue.get()
        except BaseException:
            await self.aclose()
            raise
        if piece is not None:
            return piece
        self._result = await self._task
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop the run if it is still going."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


__all__ = ["AgentStream"]
