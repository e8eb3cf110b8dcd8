"""One client session's speculation: its runtime session, its guesses, and the calls it answers.

A :class:`SessionSpeculator` turns the upstream's tool list (as it passes through) into core tools
(:mod:`~forethought.mcp.tooling`), resolved by the core's policy for the upstream's name
(:mod:`~forethought.mcp.naming`), and opens one runtime session on them. Every ``tools/call`` of a listed
tool goes through that session as a real :class:`~forethought._core.calls.ToolCall`: a speculation with the
identical core key is claimed, else the client's request is sent upstream verbatim (same id, same ``_meta``,
so progress and cancellation pass through). A call the session cannot see (an unlisted tool, a request of
another shape) is relayed blind, as an untracked write of the core's write clock. After each answer the
:class:`~forethought.mcp.guessing.Guesser` speculates the likely next calls and learns the call, unless the
session is linked to ``forethought serve`` (:mod:`~forethought.mcp.daemon_hook`): while the daemon is in charge
it guesses, and the proxy does not.

A write is in progress, for every proxy sharing the clock, from before its request is sent until that
request has really ended: the tool function's task ends only when the upstream answered or the link closed
(or, for a request the client cancelled and the server never answers, ``abandoned_s`` later), even when
the client stopped waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import JSONRPCRequest

from forethought._core.calls import ArgumentSpec, ToolCall
from forethought._core.policy import Server, ValidatorSpec
from forethought._core.runtime import Runtime, Session
from forethought._core.tools import PRIVATE_LABEL
from forethought._core.versions import Version, Write
from forethought.errors import CallError, ForethoughtError
from forethought.mcp.calibration import Calibrator
from forethought.mcp.concurrency import Concurrency
from forethought.mcp.effects import McpPolicy
from forethought.mcp.errors import McpProxyError, UpstreamClosedError, upstream_gone_error
from forethought.mcp.firstcalls import MemoryFirstCalls
from forethought.mcp.freshness import named_validator
from forethought.mcp.guessing import SERIAL_P, Guesser, GuessSettings
from forethought.mcp.guessmeta import GuessMetas, envelope_of
from forethought.mcp.listing import list_tools, page_ttl_s
from forethought.mcp.naming import ServerName
from forethought.mcp.patterns import WorkerPatterns
from forethought.mcp.race import GuessRace
from forethought.mcp.seams import CallReport, DaemonSide, Learning, PredictorFactory
from forethought.mcp.stats import ProxyStats, ToolStats
from forethought.mcp.tooling import Decision, ToolFunction, build_tools, decide, schema_of
from forethought.mcp.upstream import Answer, Kind, Pending, UpstreamLink
from forethought.predictors.base import Predictor

log = logging.getLogger(__name__)

_CALL_KEYS = frozenset({"name", "arguments", "_meta"})

_client_request: contextvars.ContextVar[JSONRPCRequest | None] = contextvars.ContextVar(
    "forethought_mcp_client_request", default=None)
"""The client request an authoritative run serves; unset inside speculations (their tasks start without it)."""


class UnservableAnswer(McpProxyError):
    """A speculation got an error or a non-final result; it is dropped, never served."""


@dataclass(frozen=True, slots=True)
class _Own(Answer):
    """The answer to the client's own request, returned through a guess that lost the race to it."""


class SessionSpeculator:
    """Speculation for one downstream client session in front of one upstream server."""

    def __init__(self, link: UpstreamLink, policy: McpPolicy, runtime: Runtime, predictor_for: PredictorFactory,
                 clock: Version, name: ServerName | None = None, learning: Learning | None = None) -> None:
        """``policy``: the proxy's settings (its core policy is the one ``runtime`` was made with, which
        resolves the tools). ``learning``: what the proxy's sessions share of what they learn (its pricing,
        how sessions begin); default: this session's own, in memory."""
        self.link = link
        self.learning = learning if learning is not None else Learning(
            Calibrator(runtime, Concurrency(runtime.tool_runtime_ewma.get), policy.settings.guess_overhead_ms / 1000),
            MemoryFirstCalls())
        self._clock = clock
        self._race = GuessRace(link.begin)
        self._policy = policy
        self.name = name if name is not None else ServerName()
        self._runtime = runtime
        self._predictor_for = predictor_for
        self._pages: dict[str, Mapping[str, Any]] = {}
        self.listing: dict[str, Mapping[str, Any]] = {}
        """The upstream's tools as last listed in full (name -> the ``tools/list`` entry)."""
        self.decisions: dict[str, Decision] = {}
        """What the policy decided for each listed tool (see :mod:`~forethought.mcp.tooling`)."""
        self.server: Server | None = None
        """The server name the tools were resolved for (``UNKNOWN_SERVER`` when it could not be learnt)."""
        self.fingerprint = ""
        self.session: Session | None = None
        self._specs: dict[str, ArgumentSpec] = {}
        self.guesser: Guesser | None = None
        self._envelope: dict[str, Any] = {}
        self._guess_metas = GuessMetas()
        """What each guess's ``_meta`` was: a client call whose own differs never claims it."""
        self.in_flight = 0
        self._credit = 0.0
        self._answered_at: float | None = None
        """When the latest answer went out (the client's think time runs from there)."""
        self._tool_calls: Counter[str] = Counter()
        self._tool_hits: Counter[str] = Counter()
        self._refusals: Counter[str] = Counter()
        self._priced_out: Counter[str] = Counter()
        self.calls = self._hits = self._misses = self._passthrough = 0
        self._saved_s = 0.0
        self._listed = asyncio.Event()
        """Set once the tools were listed (the session has its predictor)."""
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self._changes = 0
        """How many times the upstream said its tools changed."""
        self._pages_ttl_s: float | None = None
        self._listing_expires = math.inf
        """When the tool list at hand stops being trusted (its ``ttlMs``; never for the 2025 revisions)."""
        self._listed_at_change = 0
        """The value of ``_changes`` when the tools were last listed in full."""
        self.daemon: DaemonSide | None = None
        """The session's link to the daemon (``--daemon``): while it is in charge, the proxy does not guess."""

    @property
    def guessing(self) -> bool:
        """Whether the proxy guesses itself: always, but while a daemon it is linked to is in charge."""
        return self.daemon is None or not self.daemon.in_charge

    # --- the tool list --------------------------------------------------------------------------------

    async def tools_page(self, cursor: object, result: Mapping[str, Any]) -> None:
        """A ``tools/list`` answer passed through; a complete list (re)builds the session's tools once the
        upstream's name is known (meanwhile calls pass through)."""
        if cursor is None:
            self._pages = {}
            self._pages_ttl_s = None
        page_ttl = page_ttl_s(result)
        if page_ttl is not None:
            self._pages_ttl_s = page_ttl if self._pages_ttl_s is None else min(self._pages_ttl_s, page_ttl)
        tools = result.get("tools")
        if isinstance(tools, list):
            for entry in tools:
                if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                    self._pages[entry["name"]] = entry
        if result.get("nextCursor") is not None:
            return
        self._listed_at_change = self._changes  # a complete list, as the client sees it now
        self._listed_in_full(dict(self._pages), self._pages_ttl_s)

    def _listed_in_full(self, listing: dict[str, Mapping[str, Any]], ttl_s: float | None) -> None:
        self._listing_expires = math.inf if ttl_s is None else asyncio.get_running_loop().time() + ttl_s
        self.link.routes.listed(listing)
        if self.daemon is not None:
            self.daemon.listed(listing)
        if self.name.settled is not None:
            self._rebuild(listing, self.name.settled)
        else:
            self._in_background(self._rebuild_when_named(listing))

    async def _rebuild_when_named(self, listing: dict[str, Mapping[str, Any]]) -> None:
        server = await self.name.wait(self._policy.settings.name_wait_s)
        if not self._closed:
            self._rebuild(listing, server)

    def tools_changed(self) -> None:
        """The upstream says its tool list changed: nothing speculated so far may be served, and nothing is
        guessed until the tools are listed again (a tool may no longer be a read), which the proxy does itself
        at once (:func:`~forethought.mcp.listing.list_tools`), or the client does."""
        self._changes += 1
        if self.session is not None:
            self.session.end_turn()
        self._in_background(self._relist(self._changes))

    @property
    def tools_stale(self) -> bool:
        """Whether the upstream said its tools changed since they were last listed in full."""
        return self._listed_at_change != self._changes

    async def _relist(self, change: int) -> None:
        listed = await list_tools(self.link, self._envelope)
        if listed is None or self._closed or change != self._changes:
            return  # gone, not a list, or changed again (that change lists anew)
        self._listed_at_change = change
        self._listed_in_full(*listed)

    async def listing_current(self) -> bool:
        """Whether the tools can be guessed from the list at hand: not while the server's change is being
        listed again; once the list's time to be trusted has run out (``ttlMs``), after listing them again
        here (``False`` if that failed, or changed the tools: the next answer guesses from the new list)."""
        if self.tools_stale:
            return False
        if asyncio.get_running_loop().time() < self._listing_expires:
            return True
        session, change = self.session, self._changes
        listed = await list_tools(self.link, self._envelope)
        if listed is None or self._closed or change != self._changes:
            return False
        self._listed_in_full(*listed)
        return self.session is session

    def _rebuild(self, listing: dict[str, Mapping[str, Any]], server: Server) -> None:
        if self.session is not None and listing == self.listing and server == self.server:
            return  # listed again, unchanged: keep what was learned and speculated
        decisions = decide(listing, self._runtime.policy, server)
        tools = build_tools(listing, decisions, self._policy.settings.ttl_s, self._clock, self._tool_fn,
                            self._validator)
        schemas = {name: schema_of(entry) for name, entry in listing.items()}
        self._end_session()
        self.listing, self.decisions, self.server = listing, decisions, server
        session = self.session = self._runtime.session(tools=tools, server=server)
        self._specs = {name: session.tools[name].arguments for name in listing}
        learnt = {n: s for n, s in schemas.items() if not decisions[n].private}  # private: not even a candidate
        predictor, self.fingerprint = self._predictor_for(learnt)
        self.learning.listed(self.fingerprint)
        self._credit = self.learning.credit(self.fingerprint)
        settings = self._policy.settings
        self.guesser = Guesser(self, predictor, schemas,
                               GuessSettings(settings.guesses, settings.min_confidence, settings.results_per_turn),
                               self.learning.calibrator, self.name.instructions, self._refusals, self._priced_out)
        self._listed.set()
        if not self.calls and self.guessing:
            self.guesser.first_guess(self.learning.first_calls.most_likely(self.fingerprint, self.name.client))

    async def ready(self) -> None:
        """Wait until the client has listed the tools and the session's predictor is ready to predict (a
        worker process has started): what a benchmark waits for before it times anything."""
        await self._listed.wait()
        predictor = self.guesser.predictor if self.guesser is not None else None
        if isinstance(predictor, WorkerPatterns) and self.guessing:
            predictor.start()
            await predictor.ready()

    def _envelope_now(self) -> Mapping[str, Any]:
        return self._envelope

    @property
    def envelope(self) -> Mapping[str, Any]:
        """The ``io.modelcontextprotocol/`` keys of the ``_meta`` of the client's latest call (a request of the
        proxy's own carries them, as the client's own would)."""
        return self._envelope

    def _validator(self, spec: ValidatorSpec, schema: Mapping[str, Any]) -> Any:
        return named_validator(self.link, spec, schema, self._envelope_now)

    def _tool_fn(self, name: str) -> ToolFunction:
        async def run(**arguments: Any) -> Answer:
            request = _client_request.get()
            if request is not None:  # the client's own call: relayed exactly as it came (or already sent)
                return await self._authoritative(request)
            return await self._speculative(name, arguments)

        return run

    async def _authoritative(self, request: JSONRPCRequest) -> Answer:
        """Send the client's own request (unless the race already did) and wait until it has really ended:
        a cancelled wait keeps waiting for the upstream's answer, so a write's version moves on only then."""
        sent = self._race.own(request)
        pending = await asyncio.shield(sent) if sent is not None else await self.link.begin(request)
        return await self._until_ended(pending)

    async def _until_ended(self, pending: Pending) -> Answer:
        try:
            return await asyncio.shield(pending.answer)
        except asyncio.CancelledError:
            self.link.abandon(pending)
            await pending.wait_ended()  # the write is in progress until the upstream request has ended
            raise

    def guess_request(self, name: str, arguments: Mapping[str, Any]) -> JSONRPCRequest:
        """A ``tools/call`` of the proxy's own (a guess, or an early run the daemon asked for): its own id, the
        client's envelope, and its own id as its progress token (its progress is kept with it, and replayed to
        the client's call it serves)."""
        request_id = self.link.new_id()
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments),
                                  "_meta": {**self._envelope, "progressToken": request_id}}
        return JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/call", params=params)

    async def _speculative(self, name: str, arguments: Mapping[str, Any]) -> Answer:
        key = self._specs[name].key(ToolCall(name, arguments))
        request = self.guess_request(name, arguments)
        self._guess_metas.sent(key, request.params)
        answer, own = await self._race.guess(key, self.link.request(request, Kind.GUESS))
        if own:
            return _Own(answer.result, answer.error)
        if not answer.servable:
            raise UnservableAnswer(f"{name}: the speculation got an error or a non-final result")
        return answer

    # --- calls ----------------------------------------------------------------------------------------

    async def call(self, request: JSONRPCRequest) -> CallReport:
        """Answer one client ``tools/call``: from a speculation when one matches, else from upstream."""
        params = request.params or {}
        name, arguments = params.get("name"), params.get("arguments", {})
        if self._answered_at is not None and not self.in_flight:
            self.learning.calibrator.note_gap(asyncio.get_running_loop().time() - self._answered_at)
        self.calls += 1
        meta = params.get("_meta")
        if isinstance(meta, Mapping):
            self._envelope = envelope_of(meta)
        session = self.session
        key = None
        if (session is not None and isinstance(name, str) and name in self.decisions and isinstance(arguments, dict)
                and set(params) <= _CALL_KEYS):
            with contextlib.suppress(CallError):
                key = session.resolve(ToolCall(name, arguments))[2]
        if session is None or key is None:
            self._passthrough += 1
            if isinstance(name, str):
                self._tool_calls[name] += 1
            return CallReport(await self._relay_blind(request, session), "passthrough")
        assert isinstance(name, str) and isinstance(arguments, dict)
        if not self._guess_metas.may_serve(key, params) and session.has_speculation(key):
            session.discard(key)  # its guess went out with another _meta: the server could tell the two apart
        self._tool_calls[name] += 1
        if self.calls == 1 and not self.decisions[name].private:
            self.learning.first_calls.record(self.fingerprint, self.name.client, ToolCall(name, arguments))
        if self.learning.calibrator.concurrency.serial_p >= SERIAL_P:
            for running in self._race.running():  # on a server that may take one call at a time, a guess this
                if running != key:               # call cannot claim would only make it wait
                    session.discard(running)
        self.in_flight += 1
        token = _client_request.set(request)
        self._race.claim(key, request, self._hedge_s(name))
        try:
            outcome = await session.execute_detailed(ToolCall(name, arguments))
        except ForethoughtError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, UpstreamClosedError) else exc
            if not isinstance(cause, UpstreamClosedError):
                raise
            return CallReport(Answer(error=upstream_gone_error(cause.detail)), "miss")
        finally:
            self._race.settled(request)
            _client_request.reset(token)
            self.in_flight -= 1
        answer = outcome.value
        if not isinstance(answer, Answer):  # pragma: no cover - the tool function returns nothing else
            raise McpProxyError(f"{name}: unexpected value {type(answer).__name__} from the runtime")
        if isinstance(answer, _Own):  # the guess lost the race to the client's own request
            self._misses += 1
            return CallReport(Answer(answer.result, answer.error), "miss")
        if outcome.kind == "miss":
            self._misses += 1
            return CallReport(answer, "miss")
        self._hits += 1
        self._tool_hits[name] += 1
        self._saved_s += outcome.saved_s
        self.learning.calibrator.saved(outcome.saved_s)
        return CallReport(answer, "hit")

    def _hedge_s(self, name: str) -> float:
        """How long a guess of ``name`` may run before a client's call of it also goes upstream: the hedge
        factor times the tool's measured runtime (else the mean of the tools measured; nothing measured: 0)."""
        factor = self._policy.settings.hedge_factor
        measured = self._runtime.tool_runtime_ewma
        if factor <= 0 or not measured:
            return 0.0
        typical = measured.get(name)
        return factor * (typical if typical is not None else sum(measured.values()) / len(measured))

    async def _relay_blind(self, request: JSONRPCRequest, session: Session | None) -> Answer:
        """Relay a call the session cannot see: an untracked write of the shared clock (and the session),
        which ends when the upstream request has really ended."""
        write = (session.begin_untracked_write(states=(self._clock,)) if session is not None
                 else Write((), (self._clock,)))
        try:
            pending = await self.link.begin(request)
        except UpstreamClosedError as exc:
            write.end()
            return Answer(error=upstream_gone_error(exc.detail))
        pending.answer.add_done_callback(lambda _: write.end())
        try:
            return await self.link.answer(pending)
        except UpstreamClosedError as exc:
            return Answer(error=upstream_gone_error(exc.detail))

    def served_early(self, request: JSONRPCRequest) -> None:
        """A client's call was answered by the daemon from an early run (``--daemon``): counted as a hit."""
        self.calls += 1
        self._hits += 1
        name = (request.params or {}).get("name")
        if isinstance(name, str) and name in self.decisions:
            self._tool_calls[name] += 1
            self._tool_hits[name] += 1

    def relayed_blind(self, name: object, sent: bool = True) -> None:
        """A client's call of tool ``name`` was relayed before the proxy could see it (during warm-up), or
        answered at once because the upstream is gone (``sent=False``): counted as passed through, and as an
        upstream request where it was sent."""
        self.calls += 1
        self._passthrough += 1
        if isinstance(name, str):
            self._tool_calls[name] += 1
        if sent:
            self.link.client_calls += 1
            self.link.by_tool[name if isinstance(name, str) else ""] += 1

    async def after_answer(self, request: JSONRPCRequest, report: CallReport) -> None:
        """After an answer went to the client: the guesser's step (guess, then learn)."""
        params = request.params or {}
        name, arguments = params.get("name"), params.get("arguments")
        guesser = self.guesser
        if guesser is None or report.kind == "passthrough" or not isinstance(name, str) or not self.guessing:
            return  # (while the daemon is in charge it guesses, and its predictors learn: the proxy does neither)
        if not self.in_flight:
            self._answered_at = asyncio.get_running_loop().time()
        predictor = guesser.predictor
        if (isinstance(predictor, WorkerPatterns) and not predictor.started
                and self.learning.calibrator.think_s is not None and guesser.anything_pays()):
            predictor.start()  # once a guess can pay: never on the first answers' path, nor for a hurried client
        await guesser.after_answer(name, arguments if isinstance(arguments, Mapping) else {}, report.answer)

    # --- the bound and the counts ---------------------------------------------------------------------

    def within_bound(self, cost: int, ahead: int = 0) -> bool:
        """Whether ``cost`` more upstream requests for a guess of the client's next call keep the session
        within ``max_upstream_ratio`` of direct (plus ``upstream_slack`` requests) when that call comes, whether
        it claims the guess or is sent upstream as well: ``upstream + cost + 1 <= ratio * (calls + 1) + slack``.
        So every client call finds the upstream within the bound (only a session that ends without a next call
        can pass it, by less than one request). ``ahead``: the bound is checked that many calls later instead
        (a guess of a session's first call: a miss makes two requests for the first call). A session also may
        spend what earlier sessions of its tool set left unspent under the same bound (their ``ratio * calls``
        less their upstream requests, at most ``MAX_CREDIT``), so over many sessions the upstream stays within
        the ratio while a short session can still guess."""
        settings = self._policy.settings
        return (self._upstream_requests() + cost + 1
                <= settings.max_upstream_ratio * (self.calls + 1 + ahead) + settings.upstream_slack + self._credit)

    @property
    def raced(self) -> int:
        """Client requests sent upstream while their guess was still running (not budgeted: see the race)."""
        return self._race.raced

    @property
    def refusals(self) -> Mapping[str, int]:
        """Predictions the proxy itself did not speculate in this session, by reason."""
        return self._refusals

    def _upstream_requests(self) -> int:
        """Every ``tools/call`` sent upstream: the client's (raced ones included), guesses and validators."""
        link = self.link
        return link.client_calls + link.speculative_calls + link.validator_calls

    def stats(self) -> ProxyStats:
        link = self.link
        tools: dict[str, ToolStats] = {}
        for name in self._tool_calls.keys() | link.by_tool.keys():
            decision = self.decisions.get(name)
            if decision is None:
                continue  # a tool it does not know: relayed blind, counted in the totals only
            label = PRIVATE_LABEL if decision.private else name
            counts = ToolStats(self._tool_calls[name], self._tool_hits[name], link.by_tool[name],
                               self._priced_out[name] if not decision.private else 0)
            tools[label] = tools[label].plus(counts) if label in tools else counts
        return ProxyStats(sessions=1, calls=self.calls, hits=self._hits, misses=self._misses,
                          passthrough=self._passthrough, saved_s=self._saved_s,
                          speculative_calls=link.speculative_calls,
                          extra_upstream_calls=max(0, self._upstream_requests() - self.calls), tools=tools)

    # --- the end --------------------------------------------------------------------------------------

    def _in_background(self, job: Any) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _end_session(self) -> None:
        """Stop the session's speculations and save what its predictor learned, in the background."""
        session, guesser = self.session, self.guesser
        self.session = self.guesser = None
        if session is not None or guesser is not None:
            self._in_background(self._close(session, guesser.predictor if guesser is not None else None))

    async def _close(self, session: Session | None, predictor: Predictor | None) -> None:
        if session is not None:
            await session.close()
        if isinstance(predictor, WorkerPatterns):
            await predictor.close()  # saves what the worker learned, then stops it
        elif predictor is not None:
            flush = getattr(predictor, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:
                    log.warning("the predictor failed to save", exc_info=True)

    async def close(self) -> None:
        """The client session ended: stop every speculation and request, save what the predictor learned."""
        self._closed = True
        self._race.abandon()
        self._end_session()
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

