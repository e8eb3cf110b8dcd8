"""A conversation the daemon follows: its session, the servers it reaches, its guesses, step by step.

Each model request of a conversation begins a *step* (:meth:`Conversation.begin`):

1. the previous step is over, and the session's turn ends (unclaimed guesses are discarded). A write the
   daemon could not see (a message's call of a tool it cannot see, or a message it could not read) keeps
   every guessed read from being served until the request that answers that message: one carrying a result
   for one of its calls by the call's id, or continuing that very request with the message's calls (ids a
   decoder made up, or the client renamed), which the client sends only once it has run them; a message
   cut off ends its write at the conversation's next request (a message still streaming keeps it); a
   client that left
   mid-message (:meth:`~forethought.daemon.dispatch.StepDispatch.left`) got only what was read, so only a
   call it received holds a write. Two clients whose conversations share a key
   (:mod:`~forethought.daemon.transcript`) therefore never end each other's writes. A conversation
   forgotten to make room keeps its writes open until it would have idled out (:data:`IDLE_S` after its
   last request);
2. the session is rebuilt when the linked servers it reaches changed: one core
   :class:`~forethought._core.session.Session` per conversation, holding each linked tool the request offers,
   named as the client names it (:func:`~forethought.daemon.linked.conversation_tool`);
3. the predictors learn the calls whose results arrived with this request (private tools left out);
4. the guesses of the step start (:class:`~forethought.agent.feed.GuessFeed`: the pattern predictor on the
   conversation, the speculator model if any);
5. the response is read by a :class:`~forethought.daemon.dispatch.StepDispatch`; when its message ends,
   every guess of the step that is not one of the message's calls is discarded (only those will be claimed).

**Which server runs a conversation's calls.** A client starts its own MCP servers, so two clients on one
machine each have a shim called ``git``. A conversation reaches the server of a name when it is *bound* to
one: a shim's claim of a speculation of this conversation binds them (:meth:`Conversations.claimed`), as
does its claim of a call this conversation's latest message made (and no other conversation's)
(:meth:`Conversations.bind`), unless the conversation is bound to another live shim of that name (a
claim never moves a binding). Before any binding it reaches the one live shim of that name, if exactly one
has it. A name with several shims and no binding is not
started early; its calls still go through the core when the client makes them. Limit: a client whose own
shim is not linked (it started before the daemon, or its link dropped) is invisible to the daemon, so while
another client's shim of that name is the only live one, the first client's streamed reads can start early
there (their results are never served to it: its calls go to its own server).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from forethought._core.calls import ToolCall
from forethought._core.entry import SpeculationTicket
from forethought._core.policy import ANY_SERVER, UNKNOWN_SERVER, resolve
from forethought._core.runtime import Runtime
from forethought._core.session import Session
from forethought._core.tools import Effect
from forethought._core.versions import Write
from forethought.agent.feed import GuessFeed
from forethought.daemon.dispatch import Kind, StepDispatch
from forethought.daemon.linked import LinkedCall, conversation_tool
from forethought.daemon.naming import Client, Named, NameTable, model_names
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
        self._unseen: list[tuple[StepDispatch, Write]] = []
        """The writes the daemon cannot see, each with the step whose message made it (see the module docstring)."""
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
        self._answered(transcript)
        if self.step is not None and not self.step.done and self.feed is not None:
            self.feed.stop()
        self._ensure_tools(transcript, predictors)
        self.session.end_turn()
        self._launched = set()
        self._learn(transcript)
        if self.feed is not None:
            self.feed.predictors = list(predictors)
            self.feed.start(self._context(transcript, request_extra or {}))
        step = self.step = StepDispatch(self.session, self.kind_of, self.early.get, _no_write, self.feed,
                                        on_end=self._message_done, on_ticket=self._ticket)
        step.invisible = functools.partial(self.unseen_write, step=step)
        step.request = transcript.messages
        return step

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
            if self.is_private(observed.call.name):
                continue
            context = PredictionContext(session_id=self.key, messages=transcript.messages,
                                        user_message=transcript.user_message, history=history[:i],
                                        tools=transcript.tools)
            self.feed.learn(context, observed)
        self.learned = len(history)

    # --- what the daemon cannot see -----------------------------------------------------------------

    def unseen_write(self, why: str, step: StepDispatch | None = None) -> None:
        """A write the daemon cannot see may follow ``step``'s message (the current step's by default), until
        the request that answers it (module docstring); idempotent within a step."""
        step = step if step is not None else self.step
        if step is None or any(held is step for held, _ in self._unseen):
            return
        self._unseen.append((step, self.session.begin_untracked_write()))
        log.debug("forethought serve: %s: reads are not served until the client answers that message", why)

    def _answered(self, transcript: Transcript) -> None:
        """End the writes of the messages ``transcript`` answers (module docstring); keep the others."""
        if not self._unseen:
            return
        ids = {str(m.get("tool_call_id")) for m in transcript.messages if m.get("role") == "tool"}
        kept = []
        for step, write in self._unseen:
            if not step.done:  # still streaming (another client's request came meanwhile): it holds
                kept.append((step, write))
                continue
            # A message cut off: the client did not act on it. Else by its calls' ids, or by continuing that very
            # request with its calls (ids a decoder made up, or the client renamed): another client's holds neither.
            if not step.complete or step.call_ids & ids or _continues(transcript.messages, step):
                write.end()
            else:
                kept.append((step, write))
        self._unseen = kept

    def end_unseen(self) -> None:
        """End every write the daemon could not see (the conversation is over)."""
        unseen, self._unseen = self._unseen, []
        for _, write in unseen:
            write.end()

    def detach_unseen(self) -> list[Write]:
        """Hand over the writes still open (to be ended by whoever keeps them)."""
        unseen, self._unseen = self._unseen, []
        return [write for _, write in unseen]

    @property
    def unseen(self) -> bool:
        return bool(self._unseen)

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
        self.feed = GuessFeed(self.session, list(predictors), on_ticket=self._ticket, is_private=self.is_private)

    def is_private(self, model_name: str) -> bool:
        """Whether the tool the model calls ``model_name`` is private (or has private arguments), as its
        linked tool says, or the policy says of any live shim's tool the name stands for (one this
        conversation does not reach too): nothing of it is ever learnt."""
        tool = self.session.tools.get(model_name)
        if tool is not None:
            return tool.hide_key
        named = self._table.get(model_name)
        if named is None:  # no live shim has it: as the policy's own tables name private tools
            return self._private_in_policy(model_name)
        for shim in self._shims.named(named.server):
            linked = shim.tools.get(named.tool)
            if linked is None:
                continue
            server = shim.policy_name if shim.policy_name is not None else UNKNOWN_SERVER
            resolved = resolve(self._runtime.policy, named.tool, server=server, hints=linked.annotations)
            if resolved.private or resolved.private_arguments:
                return True
        return False

    def _private_in_policy(self, model_name: str) -> bool:
        """Whether ``model_name`` is a name the client gives a tool the policy calls private (or with private
        arguments): a server's table by the client's naming, a table of any server or a tool by its name."""
        policy = self._runtime.policy
        tables = [(None, policy.tools)] + [(server, sp.tools) for server, sp in policy.servers.items()]
        for server, tools in tables:
            for tool, tp in tools.items():
                if not (tp.private or tp.private_arguments):
                    continue
                if server is None or server == ANY_SERVER:
                    if model_name == tool or model_name.endswith("__" + tool):
                        return True
                elif model_name in model_names(self.client, server, tool):
                    return True
        return False

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


def _no_write(why: str) -> None:
    """The placeholder a step is built with; :meth:`Conversation.begin` binds the conversation's at once."""


def _continues(messages: Sequence[Mapping[str, Any]], step: StepDispatch) -> bool:
    """Whether ``messages`` continue the request ``step`` answered with its message's calls (same names and
    arguments, in order): the client ran them and sends their results."""
    n = len(step.request)
    if len(messages) <= n or tuple(messages[:n]) != tuple(step.request):
        return False
    reply = messages[n]
    if reply.get("role") != "assistant":
        return False
    made = []
    for call in reply.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            return False
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            return False
        made.append((function.get("name"), arguments))
    streamed = [(c.name, c.arguments) for _, c in sorted(step.calls.items())]
    return bool(made) and made == streamed


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
        self._orphans: list[tuple[float, Write]] = []
        """Writes of conversations forgotten to make room, each with when it ends (see the module docstring)."""
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
        if self._orphans:
            for until, write in self._orphans:
                if now >= until:
                    write.end()
            self._orphans = [(until, write) for until, write in self._orphans if now < until]
        while self._all:
            oldest = next(iter(self._all.values()))
            if len(self._all) <= self._max and now - oldest.last_active < self._idle_s:
                break
            forgotten = self._all.pop(oldest.key)
            if now - forgotten.last_active < self._idle_s:  # made room for another: its writes stay open
                until = forgotten.last_active + self._idle_s
                self._orphans += [(until, write) for write in forgotten.detach_unseen()]
            self.forgotten.append(forgotten)

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
                    held = conversation.bound.get(named.server)
                    other = self._shims.get(held) if held is not None and held != shim.id else None
                    if other is None:  # never taken from another live shim
                        matches.append((conversation, named.server))
                    break
        if len(matches) != 1:
            return None
        conversation, server = matches[0]
        if conversation.bound.get(server) != shim.id:
            conversation.bound[server] = shim.id
        return conversation

    def claimed(self, conversation: Conversation, shim: Shim) -> None:
        """``shim``'s claim took a speculation of ``conversation``: the same client's, so they are bound (by
        every name of the shim the conversation is not bound to another live shim under)."""
        for name in shim.names:
            held = conversation.bound.get(name)
            if held is None or self._shims.get(held) is None:
                conversation.bound[name] = shim.id

    async def close(self) -> None:
        self.forgotten += list(self._all.values())
        self._all.clear()
        orphans, self._orphans = self._orphans, []
        for _, write in orphans:
            write.end()
        await self.reap()
