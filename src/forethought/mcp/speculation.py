"""One client session's speculation: its runtime session, its predictor and the calls it sees.

A :class:`SessionSpeculator` turns the upstream's tool list (as it passes through) into runtime
:class:`~forethought.Tool` values, one per upstream tool, with the effect :mod:`effects` decides. Every
``tools/call`` of a listed tool goes through the runtime session: a matching speculation is claimed, else the
client's request is sent upstream verbatim (same id, same ``_meta``, so progress and cancellation pass
through). After each answer the pattern predictor learns the call and its result, and the most likely next
calls of early-allowed tools are speculated under the proxy's own request ids.

A tool is keyed on its exact JSON arguments (one ``payload`` argument holding them, key-sorted), so two calls
share a speculation only when the upstream cannot tell them apart, and the arguments sent upstream are the
client's own bytes, never a canonicalised copy. Freshness is the runtime's: a speculation expires after its
TTL, any call of a tool that is not read-only (or unknown) makes every read speculated before it stale, and
each tool's validator (:mod:`~forethought.mcp.freshness`) makes it stale when a write went through another
proxy sharing the write clock, or when the validator the policy names for it answers differently.

Guesses are bounded twice: at most ``guesses`` launches after each result, and never more upstream requests
than ``max_upstream_ratio`` times the client's own calls when a client call comes (a guess that would pass
the bound at the next call, hit or miss, is not made).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from mcp_types import JSONRPCRequest

from forethought._core.calls import ToolCall
from forethought._core.runtime import Runtime, Session
from forethought._core.tools import Effect, Tool
from forethought.errors import ForethoughtError
from forethought.mcp.effects import McpPolicy, ToolEffect, decide
from forethought.mcp.errors import McpProxyError, UpstreamClosedError, upstream_gone_error
from forethought.mcp.freshness import PAYLOAD, freshness_validator
from forethought.mcp.patterns import WorkerPatterns
from forethought.mcp.race import GuessRace
from forethought.mcp.stats import ProxyStats
from forethought.mcp.upstream import Answer, UpstreamLink
from forethought.mcp.writeclock import MemoryWriteClock, WriteClock
from forethought.predictors.base import ObservedCall, PredictionContext, Predictor

log = logging.getLogger(__name__)

SOURCE_PREFIX = "mcp-"
"""Guesses are priced and reported under ``mcp-`` and their predictor's source (``mcp-pattern``)."""
HISTORY = 32
"""Calls of the session the predictor sees (the latest ones)."""
OUTPUT_CHARS = 4000
SEND_YIELDS = 8
"""Event-loop turns a step waits at most for its guesses' requests to go out before the predictor learns."""
"""Characters of a result's text the predictor learns from."""
_PAYLOAD = PAYLOAD
_PARAMETERS = {"type": "object", "properties": {_PAYLOAD: {"type": "string"}}, "required": [_PAYLOAD]}
_READS = (Effect.PURE, Effect.READ_ONLY)
_CALL_KEYS = frozenset({"name", "arguments", "_meta"})
_ENVELOPE_PREFIX = "io.modelcontextprotocol/"

_client_request: contextvars.ContextVar[JSONRPCRequest | None] = contextvars.ContextVar(
    "forethought_mcp_client_request", default=None)
"""The client request an authoritative run serves; unset inside speculations (their tasks start without it)."""


class UnservableAnswer(McpProxyError):
    """A speculation got an error or a non-final result; it is dropped, never served."""


@dataclass(frozen=True, slots=True)
class CallReport:
    """How one client call was answered."""

    answer: Answer
    kind: str
    """``hit``, ``miss`` or ``passthrough``."""


def _integral(value: Any) -> Any:
    """JSON numbers as written by a client: a predictor's 3.0 is the client's 3."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def payload_of(arguments: Mapping[str, Any]) -> str:
    """The key text of a call's arguments: compact, key-sorted JSON."""
    return json.dumps(_integral(dict(arguments)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def output_text(answer: Answer) -> str:
    """What a model would read of an answer: the text blocks (else the JSON), cut to a bounded size."""
    if answer.result is None:
        return json.dumps(answer.error, sort_keys=True)[:OUTPUT_CHARS]
    content = answer.result.get("content")
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"] \
        if isinstance(content, list) else []
    text = "\n".join(t for t in texts if isinstance(t, str))
    if not text:
        structured = answer.result.get("structuredContent")
        text = json.dumps(structured if structured is not None else answer.result, sort_keys=True, default=str)
    return text[:OUTPUT_CHARS]


class SessionSpeculator:
    """Speculation for one downstream client session in front of one upstream server."""

    def __init__(self, link: UpstreamLink, policy: McpPolicy, server_name: str, runtime: Runtime,
                 predictor_for: PredictorFactory, named: bool = False, clock: WriteClock | None = None) -> None:
        self._link = link
        self._clock: WriteClock = clock if clock is not None else MemoryWriteClock()
        self._race = GuessRace(link.request)
        self._policy = policy
        self.server_name = server_name
        self._named = named
        self._runtime = runtime
        self._predictor_for = predictor_for
        self._listing: dict[str, Mapping[str, Any]] = {}
        self.tools: dict[str, Mapping[str, Any]] = {}
        """The upstream's tools as last listed in full (name -> the ``tools/list`` entry)."""
        self.effects: dict[str, ToolEffect] = {}
        self.fingerprint = ""
        self._session: Session | None = None
        self._predictor: Predictor | None = None
        self._history: deque[ObservedCall] = deque(maxlen=HISTORY)
        self._observed = 0
        """Calls appended to the history so far."""
        self._asked: tuple[int, PredictionContext] | None = None
        """The context of the latest prediction, and how many calls the history had then: the call that
        follows is learned in that same context (the predictor reuses what it derived for it)."""
        self._schemas: Mapping[str, Mapping[str, Any]] = {}
        self._sent: dict[str, frozenset[str]] = {}
        """Tool -> the argument names of the client's latest call of it."""
        self._envelope: dict[str, Any] = {}
        self._in_flight = 0
        self._calls = self._hits = self._misses = self._passthrough = 0
        self._saved_s = 0.0
        self.refusals: Counter[str] = Counter()
        """Predictions the proxy itself did not speculate, by reason (the runtime's refusals are its events)."""
        self._results_in_turn = 0
        """Results since the runtime's turn last ended (see ``results_per_turn``)."""
        self._listed = asyncio.Event()
        """Set once the tools were listed (the session has its predictor)."""

    def upstream_named(self, info: object) -> None:
        """The upstream introduced itself (``serverInfo`` of its ``initialize`` answer); a name given on the
        command line wins."""
        if not self._named and isinstance(info, Mapping) and isinstance(info.get("name"), str):
            self.server_name = info["name"]

    # --- the tool list --------------------------------------------------------------------------------

    async def tools_page(self, cursor: object, result: Mapping[str, Any]) -> None:
        """A ``tools/list`` answer passed through; a complete list (re)builds the session's tools."""
        if cursor is None:
            self._listing = {}
        tools = result.get("tools")
        if isinstance(tools, list):
            for entry in tools:
                if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                    self._listing[entry["name"]] = entry
        if result.get("nextCursor") is None:
            await self._rebuild(dict(self._listing))

    async def tools_changed(self) -> None:
        """The upstream says its tool list changed: nothing speculated so far may be served."""
        if self._session is not None:
            self._session.end_turn()

    async def _rebuild(self, listing: dict[str, Mapping[str, Any]]) -> None:
        if self._session is not None and listing == self.tools:
            return  # listed again, unchanged: keep what was learned and speculated
        server = self._policy.server(self.server_name)
        effects = {name: decide(entry, server, self._policy.settings) for name, entry in listing.items()}
        schemas = {name: _schema(entry) for name, entry in listing.items()}
        for name, spec in server.validators.items():
            guard = effects.get(spec.tool)
            if name in effects and (guard is None or guard.effect not in _READS):
                log.warning("%s: validator %s is not a read-only tool of this server: %s never runs early",
                            name, spec.tool, name)
                effects[name] = replace(effects[name], speculate=False, reason=f"validator {spec.tool} unusable")
        tools = [Tool(name=name, fn=self._tool_fn(name), parameters=_PARAMETERS,
                      description=str(listing[name].get("description", "")), effect=e.effect, ttl_s=e.ttl_s,
                      cost_units=e.cost_units,
                      validator=freshness_validator(self._link, self._clock, server.validators.get(name),
                                                    schemas.get(server.validators[name].tool, {})
                                                    if name in server.validators else {}, self._envelope_now))
                 for name, e in effects.items()]
        await self._end_session()
        self.tools, self.effects = listing, effects
        self._session = self._runtime.session(tools=tools)
        self._predictor, self.fingerprint = self._predictor_for(schemas)
        self._schemas = schemas
        self._history.clear()
        self._asked = None
        self._listed.set()

    async def ready(self) -> None:
        """Wait until the client has listed the tools and the session's predictor is ready to predict (a
        worker process has started): what a benchmark waits for before it times anything."""
        await self._listed.wait()
        predictor = self._predictor
        if isinstance(predictor, WorkerPatterns):
            await predictor.ready()

    def _envelope_now(self) -> Mapping[str, Any]:
        return self._envelope

    def _tool_fn(self, name: str) -> Any:
        link = self._link

        async def run(payload: str) -> Answer:
            request = _client_request.get()
            if request is not None:  # the client's own call: relayed exactly as it came (or already sent)
                sent = self._race.own(request)
                return await (asyncio.shield(sent) if sent is not None else link.request(request))
            params: dict[str, Any] = {"name": name, "arguments": json.loads(payload)}
            if self._envelope:
                params["_meta"] = dict(self._envelope)
            answer, own = await self._race.guess(_race_key(name, payload), link.request(
                JSONRPCRequest(jsonrpc="2.0", id=link.new_id(), method="tools/call", params=params),
                speculative=True))
            if own:
                return _Own(answer.result, answer.error)
            if not answer.servable:
                raise UnservableAnswer(f"{name}: the speculation got an error or a non-final result")
            return answer

        return run

    # --- calls ----------------------------------------------------------------------------------------

    async def call(self, request: JSONRPCRequest) -> CallReport:
        """Answer one client ``tools/call``: from a speculation when one matches, else from upstream."""
        params = request.params or {}
        name, arguments = params.get("name"), params.get("arguments", {})
        self._calls += 1
        meta = params.get("_meta")
        if isinstance(meta, Mapping):
            self._envelope = {k: v for k, v in meta.items() if isinstance(k, str) and k.startswith(_ENVELOPE_PREFIX)}
        session = self._session
        if (session is None or not isinstance(name, str) or name not in self.effects
                or not isinstance(arguments, dict) or not set(params) <= _CALL_KEYS):
            if session is not None:
                session.end_turn()  # a call the runtime cannot see may change anything
            self._passthrough += 1
            self._clock.tick()
            try:
                return CallReport(await self._relay(request), "passthrough")
            finally:
                self._clock.tick()
        self._in_flight += 1
        token = _client_request.set(request)
        writes = self.effects[name].effect not in _READS
        if writes:
            self._clock.tick()  # before the write is sent: every proxy sharing the clock stops serving guesses
        payload = payload_of(arguments)
        self._race.claim(_race_key(name, payload), request, self._hedge_s(name))
        try:
            outcome = await session.execute_detailed(ToolCall(name, {_PAYLOAD: payload}))
        except ForethoughtError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, UpstreamClosedError) else exc
            if not isinstance(cause, UpstreamClosedError):
                raise
            return CallReport(Answer(error=upstream_gone_error(cause.detail)), "miss")
        finally:
            if writes:
                self._clock.tick()  # and again once it has ended: a guess started meanwhile is stale too
            self._race.settled(request)
            _client_request.reset(token)
            self._in_flight -= 1
        answer = outcome.value
        if not isinstance(answer, Answer):  # pragma: no cover - the tool function returns nothing else
            raise McpProxyError(f"{name}: unexpected value {type(answer).__name__} from the runtime")
        if isinstance(answer, _Own):  # the guess lost the race to the client's own request
            self._misses += 1
            return CallReport(Answer(answer.result, answer.error), "miss")
        if outcome.kind == "miss":
            self._misses += 1
        else:
            self._hits += 1
            self._saved_s += outcome.saved_s
        return CallReport(answer, "miss" if outcome.kind == "miss" else "hit")

    def _hedge_s(self, name: str) -> float:
        """How long a guess of ``name`` may run before a client's call of it also goes upstream: the hedge
        factor times the tool's measured runtime (else the mean of the tools measured; nothing measured: 0)."""
        factor = self._policy.settings.hedge_factor
        measured = self._runtime.tool_runtime_ewma
        if factor <= 0 or not measured:
            return 0.0
        typical = measured.get(name)
        return factor * (typical if typical is not None else sum(measured.values()) / len(measured))

    async def _relay(self, request: JSONRPCRequest) -> Answer:
        try:
            return await self._link.request(request)
        except UpstreamClosedError as exc:
            return Answer(error=upstream_gone_error(exc.detail))

    async def learn_and_guess(self, request: JSONRPCRequest, report: CallReport) -> None:
        """After an answer went to the client: speculate the likely next calls, then learn the call.

        The guesses go first: they are predicted from the history with this call in it, and the predictor
        learns the call (which only refines its counts for later steps) once their requests are out, so
        learning never delays a guess."""
        session, predictor = self._session, self._predictor
        params = request.params or {}
        name = params.get("name")
        if session is None or predictor is None or report.kind == "passthrough" or not isinstance(name, str):
            return
        effect = self.effects.get(name)
        learn: tuple[PredictionContext, ObservedCall] | None = None
        if effect is not None and not effect.private:
            observed = ObservedCall(ToolCall(name, dict(params.get("arguments") or {})), output_text(report.answer),
                                    ok=report.answer.servable)
            asked = self._asked
            learn = (asked[1] if asked is not None and asked[0] == self._observed else self._context(), observed)
            self._history.append(observed)
            self._observed += 1
            self._sent[name] = frozenset(params.get("arguments") or {})
        try:
            if not self._in_flight:  # else another call of this step is still running: its end starts the next
                await self._guess(session, predictor)
        finally:
            if learn is not None:
                try:
                    predictor.observe(*learn)
                except Exception:  # a failing predictor costs the guess, never the call
                    log.warning("pattern predictor failed to learn a call of %s", name, exc_info=True)

    async def _guess(self, session: Session, predictor: Predictor) -> None:
        """Speculate the most likely next calls (then wait, briefly, for their requests to go out).

        A runtime turn spans ``results_per_turn`` results (default 1: each result starts one); its end
        discards the unclaimed guesses."""
        self._results_in_turn += 1
        if self._results_in_turn >= self._policy.settings.results_per_turn:
            self._results_in_turn = 0
            session.end_turn()
        if self._link.gone is not None or session.closed:
            return
        context = self._context()
        self._asked = (self._observed, context)
        calls = self._calls
        try:
            predictions = await predictor.predict(context)
        except Exception:
            log.warning("pattern predictor failed to predict", exc_info=True)
            return
        if self._calls != calls or session.closed:  # the client's next call came first (a worker was slow)
            self.refusals["predicted too late"] += len(predictions)
            return
        settings = self._policy.settings
        validators = self._policy.server(self.server_name).validators
        launched = sent = 0
        for p in predictions:
            if launched >= settings.guesses:
                break
            effect = self.effects.get(p.call.name)
            if not p.executable or effect is None or not effect.early:
                self.refusals["not an early-allowed call"] += 1
                continue
            if p.confidence < settings.min_confidence:
                self.refusals["below min_confidence"] += 1
                continue
            cost = 1 + (2 if p.call.name in validators else 0)  # the guess, and its validator at start and claim
            if not self._within_bound(cost):
                self.refusals["upstream bound"] += 1
                break
            arguments = self._spelt(p.call.name, p.call.arguments)
            ticket = session.speculate(ToolCall(p.call.name, {_PAYLOAD: payload_of(arguments)}),
                                       source=SOURCE_PREFIX + p.source, confidence=float(p.confidence))
            launched += ticket.status in ("launched", "deduplicated")
            sent += ticket.status == "launched"
        target = self._link.speculative_calls + sent
        for _ in range(SEND_YIELDS):  # a guess's task takes a few loop turns to send its request
            if self._link.speculative_calls >= target:
                break
            await asyncio.sleep(0)

    def _spelt(self, name: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        return spelt_as_client(arguments, _schema(self.tools.get(name, {})), self._sent.get(name, frozenset()))

    def _context(self) -> PredictionContext:
        return PredictionContext(session_id="mcp", messages=(), user_message="", history=tuple(self._history),
                                 tools=self._schemas)

    # --- the end --------------------------------------------------------------------------------------

    def _within_bound(self, cost: int) -> bool:
        """Whether ``cost`` more upstream requests for a guess of the client's next call keep the session
        within ``max_upstream_ratio`` of direct when that call comes, whether it claims the guess or is sent
        upstream as well: ``upstream + cost + 1 <= ratio * (calls + 1)``. So every client call finds the
        upstream within the bound (only a session that ends without a next call can pass it, by less than
        one request)."""
        ratio = self._policy.settings.max_upstream_ratio
        return self._upstream_requests() + cost + 1 <= ratio * (self._calls + 1)

    @property
    def raced(self) -> int:
        """Client requests sent upstream while their guess was still running (not budgeted: see the race)."""
        return self._race.raced

    def _upstream_requests(self) -> int:
        """Every ``tools/call`` sent upstream: the client's (raced ones included), guesses and validators."""
        link = self._link
        return link.client_calls + link.speculative_calls + link.validator_calls

    def stats(self) -> ProxyStats:
        link = self._link
        speculative = link.speculative_calls
        return ProxyStats(sessions=1, calls=self._calls, hits=self._hits, misses=self._misses,
                          passthrough=self._passthrough, saved_s=self._saved_s, speculative_calls=speculative,
                          extra_upstream_calls=max(0, self._upstream_requests() - self._calls))

    async def close(self) -> None:
        """The client session ended: stop every speculation and request, save what the predictor learned."""
        self._race.abandon()
        await self._end_session()

    async def _end_session(self) -> None:
        """Stop every speculation and save what the predictor learned."""
        session, predictor = self._session, self._predictor
        self._session = self._predictor = None
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
                    log.warning("pattern predictor failed to save", exc_info=True)


@dataclass(frozen=True, slots=True)
class _Own(Answer):
    """The answer to the client's own request, returned through a guess that lost the race to it."""


def _race_key(name: str, payload: str) -> str:
    return f"{name}\0{payload}"


def spelt_as_client(arguments: Mapping[str, Any], schema: Mapping[str, Any], given: frozenset[str]
                    ) -> dict[str, Any]:
    """A predicted call's arguments spelt as the client spells its calls (keys are exact JSON: ``{}`` is not
    ``{"context_lines": 3}``). ``given``: the argument names of the client's latest call of the tool. An
    argument at its schema default is left out unless given; one given but missing is its default."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return dict(arguments)
    defaults = {k: p["default"] for k, p in properties.items() if isinstance(p, Mapping) and "default" in p}
    spelt = {k: v for k, v in arguments.items() if k in given or k not in defaults or defaults[k] != v}
    return spelt | {k: defaults[k] for k in sorted(given) if k not in spelt and k in defaults}


def _schema(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = entry.get("inputSchema")
    return schema if isinstance(schema, Mapping) else {"type": "object", "properties": {}}


class PredictorFactory(Protocol):
    """Builds the predictor of a tool set (``schemas``: name -> input schema) and names its fingerprint."""

    def __call__(self, schemas: Mapping[str, Mapping[str, Any]], /) -> tuple[Predictor, str]: ...
