"""What the proxy guesses after each answer, and what its predictor learns.

After an answer has gone to the client, the :class:`Guesser` asks the predictor for the client's next calls
(from the session's calls and results, the tools' descriptions and the server's instructions: a proxy never
sees the user's text), speculates the most likely ones the policy lets run early, and only then lets the
predictor learn the call just answered (learning only refines counts for later steps, so it never delays a
guess). Before the session's first call it guesses that call from how earlier sessions of the same tool set
and client began. Guesses are bounded: at most ``guesses`` per answer, each at least ``min_confidence`` sure,
never more upstream requests than ``max_upstream_ratio`` times the client's own calls when the client's next
call comes (``upstream + cost + 1 <= ratio * (calls + 1)``, hit or miss), at most one running at a server
learnt to handle one call at a time, and only where the calibration finds the guess worth more than it costs
(:mod:`~forethought.mcp.calibration`; where no tool answers slower than a guess costs, the predictor is not
even asked).

A guess is keyed by the core's one rule, so it serves only a call the upstream could not tell from it. A
prediction spelt differently from how the client spells its calls is re-spelt here, before it is run
(:func:`spelt_as_client`): an argument at its schema default is left out unless the client's latest call of
the tool gave it, and an integral float where the schema says ``integer`` is written as an integer. Nothing
is ever matched loosely.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from forethought._core.calls import ToolCall
from forethought._core.session import Session
from forethought.agent.learnable import learnable
from forethought.mcp.calibration import Calibrator
from forethought.mcp.tooling import Decision, schema_of
from forethought.mcp.upstream import Answer, Kind, UpstreamLink
from forethought.predictors.base import ObservedCall, PredictionContext, Predictor

log = logging.getLogger(__name__)

SOURCE_PREFIX = "mcp-"
"""Guesses are priced and reported under ``mcp-``, their predictor's source and the tool (``mcp-pattern/ls``):
the core's calibration of a source is then a hit rate per tool."""
FIRST_SOURCE = "first"
"""The source of a session's first call, guessed from how sessions began (:mod:`~forethought.mcp.firstcalls`)."""
SERIAL_P = 0.75
"""From this chance that the server handles one call at a time (evidence, not the prior of 0.5), only one
guess runs there at once, and a client's call discards the running guesses it cannot claim."""
HISTORY = 32
"""Calls of the session the predictor sees (the latest ones)."""
OUTPUT_CHARS = 4000
"""Characters of a result's text the predictor learns from."""
SEND_YIELDS = 8
"""Event-loop turns a step waits at most for its guesses' requests to go out before the predictor learns."""
_MAX_EXACT_FLOAT = 2**53


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


def _says_integer(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind and "number" not in kind)


def _integers(value: Any, schema: Any) -> Any:
    """``value`` with every integral float the schema types ``integer`` written as an integer."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _MAX_EXACT_FLOAT and _says_integer(schema):
        return int(value)
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            return {k: _integers(v, properties.get(k)) for k, v in value.items()}
    elif isinstance(value, list | tuple):
        return [_integers(v, schema.get("items")) for v in value]
    return value


def spelt_as_client(arguments: Mapping[str, Any], schema: Mapping[str, Any], given: frozenset[str]
                    ) -> dict[str, Any]:
    """A predicted call's arguments spelt as the client spells its calls (keys are exact JSON: ``{}`` is not
    ``{"context_lines": 3}``, and ``3.0`` is not ``3``). ``given``: the argument names of the client's latest
    call of the tool. An argument at its schema default is left out unless given; one given but missing is
    its default; an integral float where the schema says ``integer`` is an integer."""
    spelt: dict[str, Any] = _integers(dict(arguments), schema)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return spelt
    defaults = {k: p["default"] for k, p in properties.items() if isinstance(p, Mapping) and "default" in p}
    spelt = {k: v for k, v in spelt.items()
             if k in given or k not in defaults or not _same_json(defaults[k], v)}
    return spelt | {k: defaults[k] for k in sorted(given) if k not in spelt and k in defaults}


def _same_json(a: Any, b: Any) -> bool:
    """Whether two values are the same JSON text (``3`` is not ``3.0``, ``True`` is not ``1``)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


class GuessHost(Protocol):
    """What the guesser needs of its session's speculator."""

    @property
    def session(self) -> Session | None: ...

    @property
    def decisions(self) -> Mapping[str, Decision]: ...

    @property
    def listing(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def calls(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def link(self) -> UpstreamLink: ...

    @property
    def tools_stale(self) -> bool: ...

    async def listing_current(self) -> bool: ...

    def within_bound(self, cost: int, ahead: int = 0) -> bool: ...


@dataclass(frozen=True, slots=True)
class GuessSettings:
    """How many guesses, how sure, how long a turn (the ``[mcp]`` settings the guesser reads)."""

    guesses: int
    min_confidence: float
    results_per_turn: int


class Guesser:
    """The after-answer step of one client session: guess, then learn; and the guess of its first call."""

    def __init__(self, host: GuessHost, predictor: Predictor, schemas: Mapping[str, Mapping[str, Any]],
                 settings: GuessSettings, calibrator: Calibrator, instructions: str = "",
                 refusals: Counter[str] | None = None, priced_out: Counter[str] | None = None) -> None:
        """``refusals`` and ``priced_out``: where to count (the session's, which outlive a tool list)."""
        self._host = host
        self.predictor = predictor
        self._schemas = schemas
        self._settings = settings
        self.calibrator = calibrator
        self._openai_tools = tuple(
            {"type": "function", "function": {"name": name, "description": str(entry.get("description", "")),
                                              "parameters": dict(schemas.get(name, {}))}}
            for name, entry in host.listing.items())
        """The tools as an agent offers them to its model: the predictor reads their descriptions."""
        self._messages: tuple[Mapping[str, Any], ...] = (
            ({"role": "system", "content": instructions},) if instructions else ())
        """The server's instructions, as the system text a model would have been given."""
        self._history: deque[ObservedCall] = deque(maxlen=HISTORY)
        self._observed = 0
        """Calls appended to the history so far."""
        self._asked: tuple[int, PredictionContext] | None = None
        """The context of the latest prediction, and how many calls the history had then: the call that
        follows is learned in that same context (the predictor reuses what it derived for it)."""
        self._sent: dict[str, frozenset[str]] = {}
        """Tool -> the argument names of the client's latest call of it."""
        self._results_in_turn = 0
        self.refusals: Counter[str] = refusals if refusals is not None else Counter()
        """Predictions the proxy itself did not speculate, by reason (the runtime's refusals are its events)."""
        self.priced_out: Counter[str] = priced_out if priced_out is not None else Counter()
        """Guesses the calibration found not worth making, by tool label."""

    def anything_pays(self) -> bool:
        """Whether any early-allowed tool answers slower than a guess costs (else predicting is pointless)."""
        session = self._host.session
        if session is None:
            return False
        return any(d.early and self.calibrator.pays_at_all(session.tools[name])
                   for name, d in self._host.decisions.items())

    async def after_answer(self, name: str, arguments: Mapping[str, Any], answer: Answer) -> None:
        """The client's call ``name(arguments)`` got ``answer``: speculate the likely next calls, then learn it."""
        host = self._host
        decision = host.decisions.get(name)
        learn: tuple[PredictionContext, ObservedCall] | None = None
        if decision is not None and not decision.private:
            observed = ObservedCall(ToolCall(name, dict(arguments)), output_text(answer), ok=answer.servable)
            asked = self._asked
            context = asked[1] if asked is not None and asked[0] == self._observed else self._context()
            learn = (learnable(context, self._private), observed)  # private tools are no candidates to learn
            self._history.append(observed)
            self._observed += 1
            self._sent[name] = frozenset(arguments)
        try:
            session = host.session
            if session is not None and not host.in_flight:  # else another call of this step is still running
                await self._guess(session)
        finally:
            if learn is not None:
                try:
                    self.predictor.observe(*learn)
                except Exception:  # a failing predictor costs the guess, never the call
                    log.warning("the predictor failed to learn a call", exc_info=True)

    def first_guess(self, found: tuple[ToolCall, float] | None) -> None:
        """Before any call: guess the session's first call, as sessions of this tool set and client began."""
        session = self._host.session
        if session is None or found is None or self._host.calls:
            return
        call, share = found
        self._offer(session, call, FIRST_SOURCE, share, ahead=1)

    async def _guess(self, session: Session) -> None:
        """Speculate the most likely next calls (then wait, briefly, for their requests to go out).

        A runtime turn spans ``results_per_turn`` results (default 1: each result starts one); its end
        discards the unclaimed guesses."""
        host = self._host
        self._results_in_turn += 1
        link = host.link
        if self._results_in_turn >= self._settings.results_per_turn:
            self._results_in_turn = 0
            if session.end_turn():  # the discarded guesses' requests end (cancelled upstream) once their tasks
                for _ in range(SEND_YIELDS):  # have stopped: a few loop turns
                    if not link.in_flight[Kind.GUESS]:
                        break
                    await asyncio.sleep(0)
        if link.gone is not None or session.closed:
            return
        if not self.anything_pays():
            self.refusals["no tool answers slower than a guess costs"] += 1
            return
        if not self.calibrator.should_predict():
            self.refusals["predicting does not pay here"] += 1
            return
        if not await host.listing_current():
            self.refusals["the tool list may have changed: listing it again"] += 1
            return
        context = self._context()
        self._asked = (self._observed, context)
        calls = host.calls
        began = time.perf_counter()
        try:
            predictions = await self.predictor.predict(context)
        except Exception:
            log.warning("the predictor failed to predict", exc_info=True)
            return
        finally:
            # What predicting cost: a worker's CPU for it, as far as the machine is contended (its wall time,
            # queueing and the round trip, overlaps the client's think time and costs nothing while a core is
            # free); the wall time of a predictor on the proxy's own loop, which blocks it. ``late``: the
            # client's next call came first (a client that does not wait, or a slow worker).
            late = host.calls != calls or session.closed
            cpu_s = getattr(self.predictor, "last_predict_cpu_s", None)
            if isinstance(cpu_s, float):
                self.calibrator.predicted(cpu_s, on_worker=True, late=late)
            else:
                self.calibrator.predicted(time.perf_counter() - began, late=late)
        if late:
            self.refusals["predicted too late"] += len(predictions)
            return
        launched = sent = 0
        before = link.speculative_calls
        for p in predictions:
            if launched >= self._settings.guesses:
                break
            if not p.executable:
                self.refusals["not an early-allowed call"] += 1
                continue
            outcome = self._offer(session, p.call, p.source, float(p.confidence))
            if outcome == _STOP:
                break
            launched += outcome == _LAUNCHED
        sent = link.speculative_calls - before
        target = before + launched
        for _ in range(SEND_YIELDS):  # a guess's task takes a few loop turns to send its request
            if link.speculative_calls >= target or sent >= launched:
                break
            await asyncio.sleep(0)
            sent = link.speculative_calls - before

    def _offer(self, session: Session, call: ToolCall, source: str, confidence: float, ahead: int = 0) -> str:
        """Speculate ``call`` if the policy, the bound, the server's capacity and the price allow (``ahead``:
        calls past the next one the bound may count on; 1 for a session's first call, see ``within_bound``)."""
        host = self._host
        decision = host.decisions.get(call.name)
        if decision is None or not decision.early:
            self.refusals["not an early-allowed call"] += 1
            return _REFUSED
        if host.tools_stale:
            self.refusals["the tool list changed: not listed again yet"] += 1
            return _REFUSED
        if confidence < self._settings.min_confidence:
            self.refusals["below min_confidence"] += 1
            return _REFUSED
        cost = 1 + (2 if decision.resolved.validator is not None else 0)  # and its validator at start and claim
        if not host.within_bound(cost, ahead):
            self.refusals["upstream bound"] += 1
            return _STOP
        concurrency = self.calibrator.concurrency
        cap = 1 if concurrency.serial_p >= SERIAL_P else max(1, self._settings.guesses)
        if host.link.in_flight[Kind.GUESS] >= cap:
            self.refusals["a guess still runs at the server"] += 1
            return _STOP
        t = session.tools[call.name]
        per_tool = f"{SOURCE_PREFIX}{source}/{t.label}"
        verdict = self.calibrator.decide(t, per_tool, confidence)
        if not verdict.speculate:
            self.priced_out[t.label] += 1
            self.refusals["not worth its cost"] += 1
            return _REFUSED
        arguments = spelt_as_client(call.arguments, schema_of(host.listing.get(call.name, {})),
                                    self._sent.get(call.name, frozenset()))
        ticket = session.speculate(ToolCall(call.name, arguments), source=per_tool, confidence=confidence,
                                   eta_s=self.calibrator.think_s)
        return _LAUNCHED if ticket.status in ("launched", "deduplicated") else _REFUSED

    def _private(self, name: str) -> bool:
        decision = self._host.decisions.get(name)
        return decision is not None and decision.private

    def _context(self) -> PredictionContext:
        return PredictionContext(session_id="mcp", messages=self._messages, user_message="",
                                 history=tuple(self._history), tools=self._schemas, openai_tools=self._openai_tools)


_LAUNCHED, _REFUSED, _STOP = "launched", "refused", "stop"
