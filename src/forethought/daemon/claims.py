"""A shim's ``tools/call``, answered through the core: an early result when one matches, else the shim runs it.

:meth:`ClaimDesk.claim` is what ``POST /link/v1/claim`` does. The call is keyed by the core's one rule in the
session of each conversation that reaches the shim's server, and the first whose store holds a speculation
under that key executes it (``Session.execute_detailed``: a hit when the speculation is fresh, finished or
worth waiting for). Otherwise the call executes in the shim's own session, whose tools the runtime resolves
with the server's name. Either way the core's authoritative path runs, so the write clock sees every write:

* a **hit** answers the early run's result (the client's call never reaches the server);
* a **miss** runs the tool's function, which (:data:`~forethought.daemon.linked.CLAIM` being set) answers the
  claim ``run``: the shim sends the client's own request upstream and reports the answer to
  :meth:`ClaimDesk.done`, and only then does the authoritative run end (a write is in progress until it
  really has);
* a call the core cannot key (a tool the shim never listed, arguments its schema refuses) is run by the shim
  too, under an untracked write of the world until the shim reports it.

A run whose shim goes before reporting fails (its write then ends). A claim for which no speculation was
found binds the one conversation whose latest message made that call to the shim
(:meth:`~forethought.daemon.conversation.Conversations.bind`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought._core.policy import UNKNOWN_SERVER
from forethought._core.runtime import Runtime
from forethought._core.session import Session
from forethought.daemon.conversation import Conversation, Conversations
from forethought.daemon.linked import CLAIM, ClaimRun, LinkedCall, server_tool
from forethought.daemon.shims import Shim, ShimGone
from forethought.errors import CallError
from forethought.mcp.daemon_link import LinkAnswer

__all__ = ["ClaimCounts", "ClaimDesk"]

log = logging.getLogger(__name__)


@dataclass
class ClaimCounts:
    """What the claims of the daemon's lifetime came to."""

    claims: int = 0
    hits: int = 0
    runs: int = 0
    untracked: int = 0
    saved_s: float = 0.0
    by_server: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, server: str, kind: str) -> None:
        per = self.by_server.setdefault(server, {})
        per[kind] = per.get(kind, 0) + 1


@dataclass(eq=False)
class _ShimSession:
    tools_id: int
    session: Session
    calls: dict[str, LinkedCall]


class ClaimDesk:
    """Answers claims and records what the shims report (see the module docstring)."""

    def __init__(self, runtime: Runtime, conversations: Conversations) -> None:
        self._runtime = runtime
        self._conversations = conversations
        self._runs: dict[str, tuple[str, ClaimRun]] = {}
        self._ids = itertools.count(1)
        self._sessions: dict[str, _ShimSession] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.counts = ClaimCounts()

    def _close_later(self, session: Session) -> None:
        task = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _shim_session(self, shim: Shim) -> _ShimSession:
        found = self._sessions.get(shim.id)
        if found is not None and found.tools_id == id(shim.tools):
            return found
        calls = {name: server_tool(shim, linked) for name, linked in shim.tools.items()}
        server = shim.policy_name if shim.policy_name is not None else UNKNOWN_SERVER
        session = self._runtime.session(f"shim-{shim.id[:6]}", tools=[c.tool for c in calls.values()], server=server)
        if found is not None:
            self._close_later(found.session)
        made = self._sessions[shim.id] = _ShimSession(id(shim.tools), session, calls)
        return made

    def _speculated(self, shim: Shim, tool: str, arguments: Mapping[str, Any]
                    ) -> tuple[Conversation, LinkedCall] | None:
        """The conversation (and tool) holding a speculation of this call, if any."""
        for conversation in self._conversations:
            linked = conversation.call_for(shim, tool)
            if linked is None:
                continue
            session = conversation.session
            try:
                _, _, key = session.resolve(linked.call(arguments))
            except CallError:
                continue
            if session.has_speculation(key):
                return conversation, linked
        return None

    async def claim(self, shim: Shim, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Answer one claim: ``{"kind": "hit", "answer": ...}`` or ``{"kind": "run", "run": id}``."""
        self.counts.claims += 1
        server = shim.policy_name or "?"
        found = self._speculated(shim, tool, arguments)
        if found is None:
            self._conversations.bind(shim, tool, arguments)
            own = self._shim_session(shim)
            linked = own.calls.get(tool)
            session = own.session
        else:
            conversation, linked = found
            session = conversation.session
            self._conversations.claimed(conversation, shim)
        run = ClaimRun()
        if linked is None:
            return self._untracked(shim, session, run, server)
        token = CLAIM.set(run)
        try:
            task = asyncio.get_running_loop().create_task(session.execute_detailed(linked.call(arguments)))
        finally:
            CLAIM.reset(token)
        run.task = task
        waits: set[asyncio.Future[Any]] = {task, run.go}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if run.go.done():
            task.add_done_callback(_consume)
            return self._register(shim, run, server)
        try:
            outcome = task.result()
        except CallError:
            return self._untracked(shim, session, run, server)
        answer = outcome.value
        if not isinstance(answer, LinkAnswer):  # pragma: no cover - the tool function returns nothing else
            raise TypeError(f"unexpected value {type(answer).__name__} from a linked tool")
        self.counts.hits += 1
        self.counts.saved_s += outcome.saved_s
        self.counts.count(server, "hit")
        return {"kind": "hit", "answer": answer.to_json()}

    def _untracked(self, shim: Shim, session: Session, run: ClaimRun, server: str) -> dict[str, Any]:
        run.write = session.begin_untracked_write()
        self.counts.untracked += 1
        return self._register(shim, run, server, kind="untracked")

    def _register(self, shim: Shim, run: ClaimRun, server: str, kind: str = "run") -> dict[str, Any]:
        run_id = f"run{next(self._ids)}"
        if shim.gone is not None:  # it left while the claim waited: no report will come, nothing is kept open
            _fail(run)
            return {"kind": "run", "run": run_id}
        self._runs[run_id] = (shim.id, run)
        self.counts.runs += 1
        self.counts.count(server, kind)
        return {"kind": "run", "run": run_id}

    async def done(self, shim: Shim, run_id: str, answer: LinkAnswer) -> bool:
        """The shim's report of a run's answer; returns once the run has ended (``False``: no such run)."""
        held = self._runs.get(run_id)
        if held is None or held[0] != shim.id:
            return False
        del self._runs[run_id]
        _, run = held
        if not run.done.done():
            run.done.set_result(answer)
        if run.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(run.task)
        if run.write is not None:
            run.write.end()
        return True

    def shim_gone(self, shim_id: str) -> None:
        """``shim_id`` left: every run it owed a report for fails, and its writes end."""
        for run_id, (owner, run) in list(self._runs.items()):
            if owner != shim_id:
                continue
            del self._runs[run_id]
            _fail(run)
        held = self._sessions.pop(shim_id, None)
        if held is not None:
            self._close_later(held.session)

    @property
    def open_runs(self) -> int:
        return len(self._runs)

    async def close(self) -> None:
        for run_id in list(self._runs):
            owner, _ = self._runs[run_id]
            self.shim_gone(owner)
        for held in self._sessions.values():
            await held.session.close()
        self._sessions.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _fail(run: ClaimRun) -> None:
    """A run whose shim left before reporting it: it fails (the call was not answered here), its write ends."""
    if not run.done.done():
        run.done.set_exception(ShimGone("the shim left before it reported the call"))
        run.done.exception()  # retrieved: a run nobody awaits any more is not an error to log
    if run.write is not None:
        run.write.end()


def _consume(task: asyncio.Task[Any]) -> None:
    """An authoritative run whose outcome nobody reads: its failure (a shim gone) is logged, never raised."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("forethought serve: a claimed call ended with %s", type(task.exception()).__name__)
