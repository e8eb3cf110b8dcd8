"""Dispatching a streamed message's tool calls early, in the model's order, while that is safe.

One :class:`EarlyDispatch` follows one assistant message. It is fed the message's events
(:class:`~forethought.llm.events.ToolCallStarted` / :class:`~forethought.llm.events.ToolCallClosed`) and
decides, at the moment each call's arguments close, what may start before the message ends:

* with ``authoritative=True`` (the agent loop, which owns the calls' results): as long as every earlier
  call of the message has been issued, a PURE / READ_ONLY call is *executed* authoritatively at once, so
  calls still take effect in the model's order;
* the first call that may not run authoritatively yet (a write, a malformed call, an unknown tool) stops
  early issuing; it and every later closed call are *speculated* instead (a write against a snapshot),
  and the authoritative calls at message end claim them;
* with ``authoritative=False`` (the stream tap, whose caller runs each call itself with
  ``session.execute``) nothing is issued authoritatively: every closed call is speculated, and the
  caller's own ``execute`` claims it. The session's rules (effects, snapshots, write epochs) keep that
  equivalent to serial execution. A call of a tool the session does not hold (or an output item the caller
  runs, :class:`~forethought.llm.events.ClientItem`) is run by the caller with an effect the session cannot
  see, at a moment only the caller knows: no later call of the message is speculated, and a *fence*
  (:meth:`~forethought._core.session.Session.begin_fence`) holds back every speculation of the session
  (a read, or a snapshot that would commit over the caller's change) started before the session's next
  speculating message (:func:`begin_step`), by which time the caller has run it. Other sessions are not
  held back. Each new message also renews the session's turn budget.

:meth:`EarlyDispatch.result` gives a call's outcome at message end (awaiting its early task, or executing
it now); :meth:`EarlyDispatch.abandon` is the broken-stream path: issued reads finish harmlessly and every
speculation of the turn is dropped, as in a serial run that never saw the message end.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.entry import CallOutcome, SpeculationTicket
from forethought._core.runtime import Session
from forethought._core.tools import Effect
from forethought._core.versions import Write
from forethought.llm.events import NAME_IN_PIECES, ClientItem, LLMEvent, ToolCallClosed, ToolCallStarted
from forethought.telemetry import Event, EventKind

STREAM_SOURCE = "stream"
"""The source name of speculations and early dispatches made from the main model's own stream."""

_EARLY_EFFECTS = (Effect.PURE, Effect.READ_ONLY)


def render_output(value: Any) -> str:
    """A tool result as the model sees it: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def render_error(error: BaseException | str) -> str:
    """A failed call as the model sees it (the same text in every mode and every front end)."""
    return json.dumps({"error": str(error)}, ensure_ascii=False)


@dataclass(slots=True)
class PendingCall:
    """One tool call of the message: what is known of it, and what was started for it."""

    index: int
    id: str
    name: str
    call: ToolCall | None = None
    error: str | None = None
    raw: str = "{}"
    closed_at: float = 0.0
    """Seconds from the dispatcher's start until the call's arguments closed."""
    task: asyncio.Task[CallOutcome] | None = None
    """The early authoritative run (``authoritative=True`` only)."""
    speculated: bool = False


_FENCES: weakref.WeakKeyDictionary[Session, Write] = weakref.WeakKeyDictionary()
"""Per session: the fence a foreign call of its latest message raised (ended at its next message)."""


_CALLER_RUN: weakref.WeakKeyDictionary[Session, frozenset[str]] = weakref.WeakKeyDictionary()
"""Per session: names of tools the caller runs itself although the session holds a tool of that name."""


def caller_runs(session: Session, names: Iterable[str]) -> None:
    """The caller runs its own tools of ``names``, not the session's tools of those names (a LangGraph tool
    with injected arguments): a call of one is foreign, as a call of a tool the session does not hold."""
    _CALLER_RUN[session] = _CALLER_RUN.get(session, frozenset()) | frozenset(names)


def holds(session: Session, name: str) -> bool:
    """Whether a call of ``name`` runs through ``session``: it holds a tool of that name, and the caller does
    not run one of that name itself (:func:`caller_runs`)."""
    return name in session.tools and name not in _CALLER_RUN.get(session, ())


def _end_fence(session: Session) -> None:
    """The session's previous message's calls have run: the fence its foreign calls raised ends."""
    fence = _FENCES.pop(session, None)
    if fence is not None:
        fence.end()


def begin_step(session: Session) -> None:
    """The caller asks the model again (``authoritative=False``): the previous message's calls have run, so
    its fence ends; the session's turn budget starts afresh."""
    _end_fence(session)
    session.renew_turn()


def _retrieved(task: asyncio.Task[CallOutcome]) -> None:
    """Retrieve a dropped early run's end (so that an error it raised is never logged as unretrieved)."""
    if not task.cancelled():
        task.exception()


class EarlyDispatch:
    """The early-dispatch state of one streamed message (see the module docstring)."""

    def __init__(self, session: Session, *, enabled: bool = True, authoritative: bool = True,
                 on_speculated: Callable[[SpeculationTicket], object] | None = None,
                 started: float | None = None) -> None:
        self.session = session
        self.enabled = enabled
        self.authoritative = authoritative
        self.on_speculated = on_speculated
        self.started = time.monotonic() if started is None else started
        self.calls: dict[int, PendingCall] = {}
        self.next_to_issue = 0
        self.blocked = not authoritative
        self.early = 0
        """Calls issued authoritatively before the message ended."""
        self.speculated = 0
        """Calls speculated (launched or not) before the message ended."""
        self.held_from: int | None = None
        """The first call after a foreign effect (a call of a tool the session does not hold, a client item):
        from it on, no call starts early (``authoritative=False``)."""
        if enabled and not authoritative:
            begin_step(session)
        elif authoritative:
            _end_fence(session)  # the agent ran the previous message's calls, and ends its turns itself

    def feed(self, event: LLMEvent) -> None:
        """Take one event of the message (only call starts and closes, and items the caller runs, matter here)."""
        if isinstance(event, ClientItem):
            if event.kind == NAME_IN_PIECES:
                if not self.authoritative:  # the call whose name is in doubt, and every later one
                    self._note_foreign(max(0, len(self.calls) - 1), None)
                return  # the agent runs the name as assembled here: nothing in doubt
            if self.authoritative:
                # An effect outside the session (a hosted remote MCP call) that a serial run would see before any
                # call of the message: the reads issued before it run again at message end, and the step's
                # guesses are fenced (whether or not the message's own calls start early).
                self._void_from(0)
                self._raise_fence()
            self._note_foreign(len(self.calls), None)  # every call from the next one on comes after it
        elif isinstance(event, ToolCallStarted):
            self.calls.setdefault(event.index, PendingCall(event.index, event.id, event.name))
            self._note_foreign(event.index + 1, event.name)
            if self.enabled:  # the name is out, the arguments are still coming: warm what the call needs
                self.session.prepare(event.name, {}, STREAM_SOURCE)
        elif isinstance(event, ToolCallClosed):
            self.closed(event)

    def closed(self, event: ToolCallClosed) -> PendingCall:
        """Call ``event.index``'s arguments closed: record it and dispatch what may start now."""
        pending = self.calls.get(event.index)
        if pending is None:
            pending = self.calls[event.index] = PendingCall(event.index, event.id, event.name)
        pending.id, pending.name = event.id, event.name  # a close at message end may correct them
        self._note_foreign(event.index + 1, event.name)
        pending.raw = event.raw
        pending.closed_at = time.monotonic() - self.started
        if event.error is not None or event.arguments is None:
            pending.error = event.error or "arguments missing"
            pending.call = None  # closed again at message end as malformed: it was never a call
            self.blocked = True  # a failed call is answered at message end, like any other
            return pending
        if pending.call is not None:
            if pending.call.name != event.name:
                self._renamed(pending, event)
            return pending  # closed again at message end (its real id came late): already dispatched
        pending.call = ToolCall(event.name, event.arguments)
        if self.enabled:
            self._dispatch_ready()
        return pending

    def _note_foreign(self, held_from: int, name: str | None) -> None:
        """A call of a tool the session does not hold (``name``; ``None``: a client item): the caller runs it
        with an effect the session cannot see; calls from ``held_from`` on come after it."""
        if self.authoritative or not self.enabled or (name is not None and holds(self.session, name)):
            return
        self._fence(held_from)

    def _fence(self, held_from: int) -> None:
        """No call from ``held_from`` on starts early, and the session's fence is up until its next message."""
        if self.held_from is None or held_from < self.held_from:
            self.held_from = held_from
        self._raise_fence()

    def _raise_fence(self) -> None:
        if self.session not in _FENCES and not self.session.closed:
            _FENCES[self.session] = self.session.begin_fence()

    def _void_from(self, index: int) -> None:
        """The early runs of calls from ``index`` on ran before something a serial run does first: their
        outcomes are no one's (each call runs at message end, in order), and no call starts early any more."""
        self.blocked = True
        for pending in self.calls.values():
            if pending.index >= index and pending.task is not None:
                task, pending.task = pending.task, None
                task.add_done_callback(_retrieved)  # an error it ends with is retrieved here, never logged

    def _renamed(self, pending: PendingCall, event: ToolCallClosed) -> None:
        """More of a call's name came after its arguments closed: what was started for it was another call.

        Its early run (a read), and those of the calls after it, are not their outcomes: they run at message
        end, in order, after the call the name now names (perhaps a write). Without ``authoritative`` the caller
        may already have run that call, with an effect the session cannot see: the call and every later one
        stay out of early work, and the session's fence goes up."""
        if event.error is None and event.arguments is not None:
            pending.call = ToolCall(event.name, event.arguments)
        else:
            pending.call, pending.error = None, event.error or "arguments missing"
        # Its early run (and, with ``authoritative``, those of the calls after it, which ran before what it now
        # names: perhaps a write) are no one's.
        self._void_from(pending.index)
        if not self.authoritative and self.enabled:
            self._fence(pending.index)

    def ordered(self) -> list[PendingCall]:
        """The message's calls in the model's order."""
        return [self.calls[i] for i in sorted(self.calls)]

    def _dispatch_ready(self) -> None:
        """Issue closed calls in index order while they may run early; speculate the rest."""
        session = self.session
        while not self.blocked and self.next_to_issue in self.calls:
            pending = self.calls[self.next_to_issue]
            if pending.call is None:
                return  # not closed yet
            tool = session.tools.get(pending.name) if holds(session, pending.name) else None
            if tool is None or tool.effect not in _EARLY_EFFECTS:
                self.blocked = True
                break
            pending.task = asyncio.create_task(session.execute_detailed(pending.call))
            self.early += 1
            self.next_to_issue += 1
            session.runtime.telemetry.emit(Event(EventKind.EARLY_DISPATCH, session.id, pending.name, "",
                                                 STREAM_SOURCE))
        if self.blocked:
            held = self.held_from
            for pending in self.calls.values():
                if (held is not None and pending.index >= held) or not holds(session, pending.name):
                    continue  # after a call of unknown effect, or one: run by the caller, never early
                if pending.call is not None and pending.task is None and not pending.speculated:
                    ticket = session.speculate(pending.call, source=STREAM_SOURCE, confidence=1.0)
                    pending.speculated = True  # claimed by the authoritative call at message end
                    self.speculated += 1
                    if self.on_speculated is not None:
                        self.on_speculated(ticket)

    async def result(self, pending: PendingCall) -> CallOutcome:
        """The authoritative outcome of a closed, well-formed call: its early run, or a run (claim) now."""
        if pending.call is None:
            raise ValueError(f"call {pending.id} has no arguments: {pending.error}")
        if pending.task is not None:
            return await pending.task
        return await self.session.execute_detailed(pending.call)

    async def abandon(self) -> None:
        """The stream failed: let issued reads finish (their results are unused), drop every speculation."""
        issued = [p.task for p in self.calls.values() if p.task is not None]
        if issued:
            await asyncio.wait(issued)
        self.session.end_turn()
