"""The linked shims: which MCP servers are registered, their tools, and the calls the daemon asks them to run.

A :class:`Shim` is one MCP proxy session that registered its server (:mod:`forethought.mcp.daemon_link`):
its names (the client's configuration key, the server's own name), its tools (schemas and annotations as
listed), its job stream, and the early runs it was asked for. :meth:`Shim.run` sends a job down the stream
and waits for the answer the shim posts back; when the shim goes (its stream closed, or it never opened
one in time), every run it owes fails with :class:`ShimGone`, so nothing waits on a shim that is gone.

:class:`Shims` is the registry. Its :attr:`~Shims.version` moves on every registration, tool-list change
and departure, so a conversation knows when to rebuild its tools.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.errors import ForethoughtError
from forethought.mcp.daemon_link import LinkAnswer

__all__ = ["LinkedTool", "Shim", "ShimGone", "Shims"]

log = logging.getLogger(__name__)
STREAM_GRACE_S = 10.0
"""A shim that has not opened its job stream this long after registering is dropped."""


class ShimGone(ForethoughtError):
    """The shim that was to run a call (or report one) has gone."""


@dataclass(frozen=True, slots=True)
class LinkedTool:
    """One tool of a linked server, as its ``tools/list`` entry describes it."""

    name: str
    schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None = None
    description: str = ""

    @classmethod
    def from_listing(cls, entry: Any) -> LinkedTool | None:
        """The tool a ``tools/list`` entry describes (``None`` for an entry without a name)."""
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            return None
        schema = entry.get("inputSchema")
        annotations = entry.get("annotations")
        return cls(entry["name"], dict(schema) if isinstance(schema, Mapping) else {"type": "object"},
                   dict(annotations) if isinstance(annotations, Mapping) else None,
                   str(entry.get("description") or ""))


@dataclass(eq=False)
class Shim:
    """One registered MCP proxy session (see the module docstring)."""

    id: str
    names: tuple[str, ...]
    """The names the server is known by: its key in the client's configuration first, then its own."""
    tools: Mapping[str, LinkedTool]
    jobs: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    _pending: dict[str, asyncio.Future[LinkAnswer]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    gone: str | None = None
    streaming: bool = False
    runs_sent: int = 0
    answers: int = 0

    @property
    def policy_name(self) -> str | None:
        """The name the policy knows the server by (``None``: it never said one)."""
        return self.names[0] if self.names else None

    async def run(self, tool: str, arguments: Mapping[str, Any]) -> LinkAnswer:
        """Ask the shim to run ``tool`` early and wait for its answer; :class:`ShimGone` if it goes first.
        Cancelling the wait withdraws the job (the shim abandons the request)."""
        if self.gone is not None:
            raise ShimGone(self.gone)
        job = f"j{next(self._ids)}"
        future: asyncio.Future[LinkAnswer] = asyncio.get_running_loop().create_future()
        self._pending[job] = future
        self.runs_sent += 1
        self.jobs.put_nowait({"job": job, "name": tool, "arguments": dict(arguments)})
        try:
            return await future
        except asyncio.CancelledError:
            if self.gone is None:
                self.jobs.put_nowait({"cancel": job})
            raise
        finally:
            self._pending.pop(job, None)

    def answered(self, job: str, answer: LinkAnswer) -> bool:
        """The shim posted the answer to ``job``; ``False`` for a job not (or no longer) waiting."""
        future = self._pending.get(job)
        if future is None or future.done():
            return False
        self.answers += 1
        future.set_result(answer)
        return True

    def close(self, reason: str) -> None:
        """The shim is gone: every run it owes fails."""
        if self.gone is None:
            self.gone = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ShimGone(reason))
        self._pending.clear()


class Shims:
    """Every linked shim of the daemon, by id and by name."""

    def __init__(self) -> None:
        self._shims: dict[str, Shim] = {}
        self.version = 0
        """Moves on every change of the set of shims or of their tools."""
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def register(self, names: Sequence[str], listing: Sequence[Any], shim_id: str | None = None) -> Shim:
        """Register a server (or, with the ``shim_id`` of a live shim, its new tool list)."""
        tools = {t.name: t for t in (LinkedTool.from_listing(e) for e in listing) if t is not None}
        clean = tuple(dict.fromkeys(n for n in names if isinstance(n, str) and n))
        existing = self._shims.get(shim_id) if shim_id is not None else None
        if existing is not None and existing.gone is None:
            existing.tools = tools
            existing.names = clean or existing.names
            self.version += 1
            return existing
        shim = Shim(secrets.token_urlsafe(12), clean, tools)
        self._shims[shim.id] = shim
        self.version += 1
        self._timers[shim.id] = asyncio.get_running_loop().call_later(
            STREAM_GRACE_S, lambda: None if shim.streaming else self.drop(shim.id, "it never opened its job stream"))
        return shim

    def get(self, shim_id: str) -> Shim | None:
        shim = self._shims.get(shim_id)
        return shim if shim is not None and shim.gone is None else None

    def streaming(self, shim: Shim) -> None:
        """The shim opened its job stream."""
        shim.streaming = True
        timer = self._timers.pop(shim.id, None)
        if timer is not None:
            timer.cancel()

    def drop(self, shim_id: str, reason: str) -> None:
        """The shim is gone (its stream closed, say): forget it and fail what it owes."""
        shim = self._shims.pop(shim_id, None)
        timer = self._timers.pop(shim_id, None)
        if timer is not None:
            timer.cancel()
        if shim is not None:
            shim.close(reason)
            self.version += 1
            log.info("forethought serve: a linked server left (%s)", reason)

    def live(self) -> list[Shim]:
        return [s for s in self._shims.values() if s.gone is None]

    def named(self, name: str) -> list[Shim]:
        """The live shims known by ``name``."""
        return [s for s in self.live() if name in s.names]

    def close(self) -> None:
        for shim_id in list(self._shims):
            self.drop(shim_id, "the daemon is stopping")
