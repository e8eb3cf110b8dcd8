"""One model response, read as it streams: which calls start early, and which writes the daemon cannot see.

The client runs the calls of a message after the message, in its order (Claude Code runs a run of
concurrency-safe calls together, every other call alone, in order). The daemon sees each call's arguments
close, but it runs only the calls of linked servers; the client's own tools (Bash, Edit, apply_patch ...)
and the tools of servers that are not linked never pass through it. So, per message:

* a call of a linked tool that may run early is started (``session.speculate``, source ``stream``,
  confidence 1) the moment its arguments close, **only while every earlier call of the message is one the
  daemon knows changes nothing** (a linked read, or one of the client's own read-only tools): then it runs
  after every effect the client will have made before it, as it would have;
* a call of a tool the daemon cannot see that is not known to only read (an :attr:`Kind.UNSEEN` call) is a
  write the daemon cannot attribute: from the moment its name streams, an untracked write of the world is in
  progress (:meth:`~forethought._core.session.Session.begin_untracked_write`), until the conversation's next
  request (by then the client has run it). No read guessed meanwhile, of this conversation or any other, is
  served; this message's earlier early reads are not served either (the write began before their claims),
  which costs hits, never correctness;
* a response the daemon cannot read to its end counts the same (it may hold any call).

Calls of linked tools that may not run early (writes) go through a shim, so the core sees them: they stop
later calls of the message from starting early, and need no untracked write.

When the message has ended, the client will claim the message's calls and nothing else: every guess of the
step that is not one of them is dropped at once (``on_end`` gets the message's calls; the conversation
discards the rest), so no early result outlives the message it was guessed for. A guess left alive could be
claimed later by another conversation after a change no shim sees (the user's editor between two sessions).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.entry import SpeculationTicket
from forethought._core.session import Session
from forethought.agent.feed import GuessFeed
from forethought.daemon.linked import LinkedCall
from forethought.llm.dispatch import STREAM_SOURCE
from forethought.llm.events import LLMEvent, MessageDone, ToolCallArgumentsDelta, ToolCallClosed, ToolCallStarted

__all__ = ["Kind", "StepDispatch", "StreamedCall"]


class Kind(enum.Enum):
    """What the daemon knows of a tool the model calls."""

    EARLY = "early"
    """A linked tool of this conversation that may run early."""
    LINKED_READ = "linked read"
    """A linked tool that only reads, not started early here (its server not bound, or policy)."""
    LINKED_WRITE = "linked write"
    """A linked tool that may write: it goes through a shim, so the core sees it."""
    CLIENT_READ = "client read"
    """One of the client's own tools that changes nothing another tool reads."""
    UNSEEN = "unseen"
    """Anything else: a write the daemon cannot see."""

    @property
    def transparent(self) -> bool:
        """Whether a call of this kind lets later calls of its message start early."""
        return self in (Kind.EARLY, Kind.LINKED_READ, Kind.CLIENT_READ)


@dataclass(frozen=True, slots=True)
class StreamedCall:
    """A call of the message as streamed: its model-facing name and arguments (``None``: malformed)."""

    name: str
    arguments: dict[str, Any] | None


@dataclass
class StepDispatch:
    """The :class:`~forethought.daemon.observer.Watcher` of one step's response (see the module docstring).

    ``kind_of`` classifies a model-facing tool name; ``early`` gives the call builder of an EARLY tool;
    ``invisible`` begins the untracked write (idempotent, held by the conversation until its next request).
    """

    session: Session
    kind_of: Callable[[str], Kind]
    early: Callable[[str], LinkedCall | None]
    invisible: Callable[[str], None]
    feed: GuessFeed | None = None
    on_end: Callable[[list[ToolCall]], None] | None = None
    """Called once when the message has ended, with its well-formed calls (none when it could not be read)."""
    on_ticket: Callable[[SpeculationTicket], None] | None = None
    """Called with the ticket of each call started from the stream."""
    started: float = -1.0
    """When the step began, on the runtime's clock (set at construction)."""
    calls: dict[int, StreamedCall] = field(default_factory=dict)
    call_ids: set[str] = field(default_factory=set)
    request: Sequence[Mapping[str, Any]] = ()
    """The messages of the request this step answers (a later request that continues them answers it)."""
    """The ids of the message's calls as streamed (the client answers each by its id in its next request)."""
    launched: int = 0
    blocked: bool = False
    done: bool = False
    complete: bool = False
    """Whether the message ended and was read to its end (a client acts only on a complete message)."""
    _names: dict[int, str] = field(default_factory=dict)
    _first_s: float | None = None

    def __post_init__(self) -> None:
        self._clock = self.session.runtime.clock
        if self.started < 0:
            self.started = self._clock.monotonic()

    def event(self, event: LLMEvent) -> None:
        if self._first_s is None:
            self._first_s = self._clock.monotonic() - self.started
        if isinstance(event, ToolCallStarted):
            self._names[event.index] = event.name
            if event.id:
                self.call_ids.add(event.id)
            kind = self.kind_of(event.name)
            if not kind.transparent:
                self.blocked = True
                if kind is Kind.UNSEEN:
                    self.invisible(f"the model called {event.name!r}, which the daemon cannot see")
            if self.feed is not None:
                self.feed.streamed(event)
        elif isinstance(event, ToolCallArgumentsDelta):
            if self.feed is not None:
                self.feed.streamed(event)
        elif isinstance(event, ToolCallClosed):
            self._closed(event)
        elif isinstance(event, MessageDone):
            self._end(event.usage.completion_tokens if event.usage is not None else 0)

    def _closed(self, event: ToolCallClosed) -> None:
        self.calls[event.index] = StreamedCall(event.name, event.arguments if event.ok else None)
        if event.id:
            self.call_ids.add(event.id)
        if event.index not in self._names:  # closed without a start event: classify it now
            self._names[event.index] = event.name
            if not self.kind_of(event.name).transparent:
                self.blocked = True
                if self.kind_of(event.name) is Kind.UNSEEN:
                    self.invisible(f"the model called {event.name!r}, which the daemon cannot see")
        if not event.ok or event.arguments is None:
            self.blocked = True  # what the client will do with a malformed call is not known
            return
        if self.blocked:
            return
        linked = self.early(event.name)
        if linked is None:
            return
        ticket = self.session.speculate(linked.call(event.arguments), source=STREAM_SOURCE, confidence=1.0)
        self.launched += 1
        if self.on_ticket is not None:
            self.on_ticket(ticket)

    def unreadable(self, why: str) -> None:
        self.blocked = True
        self.invisible(f"the response could not be read ({why})")
        self._end(0, readable=False)

    def left(self, why: str) -> None:
        """The client left mid-message: it got only what was read (a call it may run raised its write as
        it streamed) and will claim nothing of this message."""
        self.blocked = True
        self._end(0, readable=False)

    def _end(self, tokens: int, readable: bool = True) -> None:
        if self.done:
            return
        self.done = True
        self.complete = readable
        if self.feed is not None:
            self.feed.stop(self._clock.monotonic() - self.started, tokens, self._first_s)
        if self.on_end is not None:
            self.on_end(self.streamed_calls() if readable else [])

    def streamed_calls(self) -> list[ToolCall]:
        """The well-formed calls of the message so far, in the model's order."""
        return [ToolCall(c.name, c.arguments) for _, c in sorted(self.calls.items()) if c.arguments is not None]
