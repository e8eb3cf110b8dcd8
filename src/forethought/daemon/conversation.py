"""A conversation the daemon follows: its session, the servers it reaches, its guesses, step by step.

Each model request of a conversation begins a *step* (:meth:`Conversation.begin`):

1. the previous step is over: the write the daemon could not see (if any) has ended (the client has run
   it, or it would not ask again), and the session's turn ends (unclaimed guesses are discarded);
2. the session is rebuilt when the linked servers it reaches changed: one core
   :class:`~forethought._core.session.Session` per conversation, holding each linked tool the request offers,
   named as the client names it (:func:`~forethought.daemon.linked.conversation_tool`);
3. the predictors learn the calls whose results arrived with this request (private tools left out);
4. the guesses of the step start (:class:`~forethought.agent.feed.GuessFeed`: the pattern predictor on the
   conversation, the speculator model if any);
5. the response is read by a :class:`~forethought.daemon.dispatch.StepDispatch`; when its message ends,
   every guess of the step that is not one of the message's calls is discarded (only those will be claimed).

**Which server runs a conversation's calls.** A client starts its own MCP servers, so two clients on one
machine each have a shim called ``git``. A conversation reaches the server of a name when exactly one live
shim has that name, or when it is *bound* to one: a shim's claim of a call this conversation's latest message
made (and no other conversation's) binds them (:meth:`Conversations.bind`). A name with several shims and
no binding is not started early; its calls still go through the core when the client makes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.entry import SpeculationTicket
from forethought._core.policy import UNKNOWN_SERVER, resolve
from forethought._core.runtime import Runtime
from forethought._core.session import Session
from forethought._core.tools import Effect
from forethought._core.versions import Write
from forethought.agent.feed import GuessFeed
from forethought.daemon.dispatch import Kind, StepDispatch
from forethought.daemon.linked import LinkedCall, conversation_tool
from forethought.daemon.naming import Client, Named, NameTable
from forethought.daemon.shims import Shim, Shims
from forethought.daemon.transcript import Transcript
from forethought.errors import CallError
from forethought.predictors.base import PredictionContext, Predictor

__all__ = ["Conversation", "Conversations"]

log = logging.getLogger(__name__)
MAX_CONVERSATIONS = 256
IDLE_S = 1800.0
"""A conversation without a request this long is forgotten (its session closed, its unseen write ended)."""
_READS = (Effect.PURE, Effect.READ_ONLY)


class Conversation:
    """One conversation's state across its steps (see the module docstring)."""

    def __init__(self, key: str, runtime: Runtime, shims: Shims, client: Client, now: float) -> None:
        self.key = key
        self._runtime = runtime
        self._shims = shims
        self.client = client
        self.session: Session = runtime.session(f"conv-{key[:8]}")
        self.feed: GuessFeed | None = None
        self.bound: dict[str, str] = {}
        """Server name -> the shim this conversation is bound to (see the module docstring)."""
        self.early: dict[str, LinkedCall] = {}
        """Model-facing name -> the linked tool of this conversation's session."""
        self._built: tuple[Any, ...] | None = None
        self._table = NameTable(client, {})
        self._unseen: Write | None = None
        self.step: StepDispatch | None = None
        self.steps = 0
        self.learned = 0
        self.last_active = now
        self.replay: str | None = None
        """The speculator's handle of this step's request (released at the step's end)."""
        self._launched: set[str] = set()
        """Keys of this step's guesses and early calls (kept until the message says which it calls)."""
        self._tools: dict[str, LinkedCall] = {}
        self._by_shim: dict[tuple[str, str], LinkedCall] = {}
        self._closing: set[asyncio.Task[None]] = set()

    # --- steps ----------------------------------------------------------------------------------------

    def begin(self, transcript: Transcript, predictors: Sequence[Predictor], now: float,
              request_extra: dict[str, Any] | None = None) -> StepDispatch:
        """A request of this conversation arrived: end the last step, start this one (module docstring)."""
        self.last_active = now
        self.steps += 1
        self.end_unseen()
        if self.step is not None and not self.step.done and self.feed is not None:
            self.feed.stop()
        self._ensure_tools(transcript, predictors)
        self.session.end_turn()
        self._launched = set()
        self._learn(transcript)
        if self.feed is not None:
            self.feed.predictors = list(predictors)
            self.feed.start(self._context(transcript, request_extra or {}))
        self.step = StepDispatch(self.session, self.kind_of, self.early.get, self.unseen_write, self.feed,
                                 on_end=self._message_done, on_ticket=self._ticket)
        return self.step

    def _ticket(self, ticket: SpeculationTicket) -> None:
        if ticket.key is not None and ticket.status != "rejected":
            self._launched.add(ticket.key)

    def _message_done(self, calls: list[ToolCall]) -> None:
        """The message has ended: its calls will be claimed, and nothing else this step guessed ever will be."""
        keep: set[str] = set()
        for call in calls:
            linked = self._tools.get(call.name)
            if linked is None:
                continue
            try:
                keep.add(self.session.resolve(linked.call(call.arguments))[2])
            except CallError:
                continue
        for key in self._launched - keep:
            self.session.discard(key)
        self._launched &= keep

    def _context(self, transcript: Transcript, extra: dict[str, Any]) -> PredictionContext:
        return PredictionContext(session_id=self.key, messages=transcript.messages,
                                 user_message=transcript.user_message, history=transcript.history,
                                 tools=transcript.tools, request_extra=extra)

    def _learn(self, transcript: Transcript) -> None:
        """Every call whose result arrived since the last step is observed (calls of private tools never)."""
        history = transcript.history
        if self.feed is None or len(history) <= self.learned:
            self.learned = min(self.learned, len(history))  # a shorter history: the client compacted it
            return
        for i in range(self.learned, len(history)):
            observed = history[i]
            tool = self.session.tools.get(observed.call.name)
            if tool is not None and (tool.private or tool.private_arguments):
                continue
            context = PredictionContext(session_id=self.key, messages=transcript.messages,
                                        user_message=transcript.user_message, history=history[:i],
                                        tools=transcript.tools)
            self.feed.learn(context, observed)
        self.learned = len(history)

    # --- what the daemon cannot see -----------------------------------------------------------------

    def unseen_write(self, why: str) -> None:
        """A write the daemon cannot see may happen before the next request (idempotent within a step)."""
        if self._unseen is None:
            self._unseen = self.session.begin_untracked_write()
            log.debug("forethought serve: %s: reads are not served until the conversation's next request", why)

    def end_unseen(self) -> None:
        if self._unseen is not None:
            self._unseen.end()
            self._unseen = None

    @property
    def unseen(self) -> bool:
        return self._unseen is not None

    # --- which tools, which kind ------------------------------------------------------------------------

    def reachable(self) -> dict[str, Shim]:
        """Server name -> the shim that runs this conversation's calls of it."""
        out: dict[str, Shim] = {}
        names = {n for shim in self._shims.live() for n in shim.names}
        for name in names:
            bound = self._shims.get(self.bound[name]) if name in self.bound else None
            candidates = self._shims.named(name)
            if bound is not None and name in bound.names:
                out[name] = bound
            elif len(candidates) == 1:
                out[name] = candidates[0]
        return out

    def _ensure_tools(self, transcript: Transcript, predictors: Sequence[Predictor]) -> None:
        reach = self.reachable()
        bindings = tuple(sorted((name, shim.id) for name, shim in reach.items()))
        signature = (self._shims.version, frozenset(transcript.tools), bindings)
        if signature == self._built:
            return
        self._built = signature
        every: dict[str, set[str]] = {}
        for shim in self._shims.live():
            for name in shim.names:
                every.setdefault(name, set()).update(shim.tools)
        self._table = NameTable(self.client, every)
        reached = NameTable(self.client, {n: list(s.tools) for n, s in reach.items()})
        early: dict[str, LinkedCall] = {}
        by_shim: dict[tuple[str, str], LinkedCall] = {}
        for model_name in transcript.tools:
            named = reached.get(model_name)
            if named is not None:
                shim = reach[named.server]
                early[model_name] = by_shim[(shim.id, named.tool)] = conversation_tool(
                    model_name, shim, shim.tools[named.tool], self._runtime.policy)
        old = self.session
        self.session = self._runtime.session(f"conv-{self.key[:8]}", tools=[c.tool for c in early.values()])
        self.early = {name: c for name, c in early.items() if c.tool.speculable and c.tool.speculate}
        self._tools = early
        self._by_shim = by_shim
        # a claim still running in the old session finishes there (a closed session still executes calls)
        task = asyncio.get_running_loop().create_task(old.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self.feed = GuessFeed(self.session, list(predictors), on_ticket=self._ticket)

    def call_for(self, shim: Shim, tool: str) -> LinkedCall | None:
        """This conversation's linked tool for ``shim``'s ``tool`` (``None``: it does not reach it)."""
        return self._by_shim.get((shim.id, tool))

    def named(self, model_name: str) -> Named | None:
        """The (server, tool) of any live shim ``model_name`` stands for, under the client's naming."""
        return self._table.get(model_name)

    def linked(self, model_name: str) -> LinkedCall | None:
        """The conversation's linked tool under ``model_name`` (early or not)."""
        return self._tools.get(model_name)

    def kind_of(self, model_name: str) -> Kind:
        """What the daemon knows of a tool the model calls (:class:`~forethought.daemon.dispatch.Kind`)."""
        if model_name in self.early:
            return Kind.EARLY
        linked = self._tools.get(model_name)
        if linked is not None:
            return Kind.LINKED_READ if linked.tool.effect in _READS else Kind.LINKED_WRITE
        named = self._table.get(model_name)
        if named is not None:
            shims = self._shims.named(named.server)
            tools = [s.tools[named.tool] for s in shims if named.tool in s.tools]
            if tools and all(_reads(self._runtime, s, t.name) for s, t in zip(shims, tools, strict=False)):
                return Kind.LINKED_READ
            return Kind.LINKED_WRITE
        if self._table.is_client_read(model_name):
            return Kind.CLIENT_READ
        return Kind.UNSEEN

    async def close(self) -> None:
        self.end_unseen()
        if self.feed is not None:
            await self.feed.cancel()
        await self.session.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _reads(runtime: Runtime, shim: Shim, tool: str) -> bool:
    """Whether ``tool`` of ``shim`` only reads, as the policy resolves it with the server's name."""
    linked = shim.tools[tool]
    server = shim.policy_name if shim.policy_name is not None else UNKNOWN_SERVER
    return resolve(runtime.policy, tool, server=server, hints=linked.annotations).effect in _READS


class Conversations:
    """Every conversation the daemon follows, by key; the least recently active are forgotten first."""

    def __init__(self, runtime: Runtime, shims: Shims, client: Client, *, clock: Callable[[], float] = time.monotonic,
                 max_conversations: int = MAX_CONVERSATIONS, idle_s: float = IDLE_S) -> None:
        self._runtime = runtime
        self._shims = shims
        self.client = client
        self._clock = clock
        self._max = max_conversations
        self._idle_s = idle_s
        self._all: OrderedDict[str, Conversation] = OrderedDict()
        self.forgotten: list[Conversation] = []
        """Conversations dropped and not closed yet (the owner closes them: :meth:`reap`)."""

    def get(self, key: str) -> Conversation:
        now = self._clock()
        found = self._all.get(key)
        if found is None:
            found = self._all[key] = Conversation(key, self._runtime, self._shims, self.client, now)
        self._all.move_to_end(key)
        self._expire(now)
        return found

    def _expire(self, now: float) -> None:
        while self._all:
            oldest = next(iter(self._all.values()))
            if len(self._all) <= self._max and now - oldest.last_active < self._idle_s:
                break
            self.forgotten.append(self._all.pop(oldest.key))

    async def reap(self) -> None:
        """Close the conversations that were forgotten."""
        forgotten, self.forgotten = self.forgotten, []
        for conversation in forgotten:
            await conversation.close()

    def __iter__(self) -> Any:
        return iter(list(self._all.values()))

    def __len__(self) -> int:
        return len(self._all)

    def bind(self, shim: Shim, tool: str, arguments: dict[str, Any]) -> Conversation | None:
        """A shim claimed ``tool`` with ``arguments`` and no speculation served it: bind the one conversation
        whose latest message made that call (by a name of this shim) to the shim; ``None`` when not exactly one."""
        matches = []
        for conversation in self._all.values():
            step = conversation.step
            if step is None:
                continue
            for call in step.streamed_calls():
                named = conversation.named(call.name)
                if (named is not None and named.server in shim.names and named.tool == tool
                        and dict(call.arguments) == arguments):
                    matches.append((conversation, named.server))
                    break
        if len(matches) != 1:
            return None
        conversation, server = matches[0]
        if conversation.bound.get(server) != shim.id:
            conversation.bound[server] = shim.id
        return conversation

    async def close(self) -> None:
        self.forgotten += list(self._all.values())
        self._all.clear()
        await self.reap()
