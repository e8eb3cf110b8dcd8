"""Pattern speculation (PASTE-style): next calls from mined tool sequences and derived arguments.

:class:`PatternPredictor` needs no second model. From the sessions it observes it learns which tool
usually comes next (:mod:`pattern_flow`) and where each argument comes from (:mod:`pattern_args`,
:mod:`derive_rules`). At each step it ranks candidate tools, fills their arguments with the best derived
values, and proposes the most likely calls. A call whose every required argument was derived is
*executable* (the agent may speculate it); any other is a *hint* (``executable=False``), never run.

Learning is online (:meth:`PatternPredictor.observe`); :func:`~forethought.predictors.patterns.replay.train`
pre-trains from recorded sessions. Everything learned is a set of decayed counters saved incrementally to
a :class:`~forethought.predictors.patterns.store.PatternStore` under a tool-set fingerprint, so several
agent processes can learn into one SQLite file and a restarted agent starts where it stopped.

Nothing here knows any workload: tools are known only by their names and JSON schemas.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forethought._core.calls import ArgumentSpec, ToolCall, compile_arguments
from forethought.errors import InvalidArgumentsError
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.patterns.args import ArgCandidate, ArgumentModel
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.derive_time import first_output_date, reference_now
from forethought.predictors.patterns.describe import description_words
from forethought.predictors.patterns.distinct import (
    DISTINCT_BELOW,
    DistinctModel,
    assign,
    clashing,
    repeats_a_value,
)
from forethought.predictors.patterns.flow import TURN_MARK, FlowModel, FlowView, call_token
from forethought.predictors.patterns.numbers import NumberSpelling
from forethought.predictors.patterns.pairs import PairOrder
from forethought.predictors.patterns.persist import StoreSync
from forethought.predictors.patterns.repeats import RECENT_CALLS, RecentCalls, RepeatModel, recent_calls
from forethought.predictors.patterns.replay import RecordedSession, from_trajectory, train
from forethought.predictors.patterns.store import PatternStore, tool_set_fingerprint
from forethought.predictors.patterns.text import message_words
from forethought.predictors.patterns.turns import TurnTracker
from forethought.predictors.trajectory import Trajectory

log = logging.getLogger(__name__)

SOURCE = "pattern"
MAX_STEP_SESSIONS = 64
"""Sessions whose calls of their latest step are kept (to learn parallel calls of one step in order: the
next call of a step comes right after the one before; each entry holds those calls' outputs)."""
MAX_CACHED_STEPS = 64
"""Sessions whose latest step is kept for the learning of its call (it only has to outlive one step; each
holds its session's messages and outputs)."""


@dataclass(frozen=True, slots=True)
class PatternConfig:
    """Tuning of :class:`PatternPredictor` (defaults are the ones measured in ``docs/patterns.md``)."""

    top_k: int = 3
    """Most predictions returned per step."""
    min_confidence: float = 0.0
    """Predictions below this confidence are dropped."""
    order: int = 3
    """Longest call context (in calls) of the control-flow model."""
    half_life: float | None = 20_000.0
    """Observed calls after which old evidence counts half (None: never forget)."""
    z: float = 1.0
    """Width of the Wilson interval used to score rules and constants."""
    name_candidates: int = 5
    """Most tools whose arguments are derived at each step."""
    name_mass: float = 0.98
    """Once the top k calls are filled, tools are no longer tried when those tried so far hold this share of
    the tool probability (the rest could only enter the top k with tiny confidences)."""
    arg_alternatives: int = 2
    """Values kept per parameter when forming alternative calls."""
    arg_weight: float = 1.0
    """Exponent on the argument scores in a call's confidence (1: their plain product)."""
    hint_factor: float = 0.25
    """Confidence factor per required argument a hint could not derive."""
    flush_every: int = 64
    """Observed calls between incremental saves to the store."""


@dataclass(frozen=True, slots=True)
class _Step:
    """Everything derived from one context, shared by prediction and learning."""

    view: FlowView
    sources: Sources
    words: frozenset[str]
    recent: RecentCalls
    """The session's recent calls by tool, to tell a candidate that repeats one (:mod:`repeats`)."""


_Mark = tuple[int, int, str]
"""What identifies a context of a session: calls so far, messages so far, latest user message."""
_OptionKey = tuple[str, tuple[tuple[str, str], ...]]
"""A predicted call as a key: the tool and its (parameter, value key) pairs in parameter order."""


MAX_CUE_CHARS = 2000
"""Output text read for cue words when there is no user text."""
MAX_CANONICAL_CALLS = 2048
"""Earlier calls whose canonical arguments are remembered (for telling repeats; the calls, not their
outputs)."""
SYSTEM_ROLES = ("system", "developer")
MAX_SYSTEM_CHARS = 8192
"""System text read for values (its start: where dates, names and places are usually stated)."""


def system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the system and developer messages, in order (text parts of structured content)."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in SYSTEM_ROLES:
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return "\n".join(parts)[:MAX_SYSTEM_CHARS]


def _mark(context: PredictionContext) -> _Mark:
    return (len(context.history), len(context.messages), context.user_message)


class PatternPredictor(StoreSync):
    """The pattern predictor: implements :class:`~forethought.predictors.base.Predictor`."""

    name = SOURCE

    def __init__(self, store: PatternStore | None = None, fingerprint: str = "default",
                 config: PatternConfig | None = None) -> None:
        self.config = config or PatternConfig()
        self.store = store
        self.fingerprint = fingerprint
        self.counts = Counts(self.config.half_life, keeps_pending=store is not None)
        self.flow = FlowModel(self.counts, self.config.order)
        self.args = ArgumentModel(self.counts, self.config.z)
        self._turns = TurnTracker()
        self._specs: dict[tuple[str, str], ArgumentSpec | None] = {}
        self._spec_of: dict[str, tuple[Mapping[str, Any] | None, ArgumentSpec | None]] = {}
        self._since_flush = 0
        self._step_calls: OrderedDict[str, tuple[_Mark, list[ObservedCall]]] = OrderedDict()
        self._steps: OrderedDict[str, tuple[PredictionContext, _Mark, _Step]] = OrderedDict()
        self.numbers = NumberSpelling(self.counts)
        """How each parameter spells whole numbers (its counters are among :attr:`counts`: saved and loaded)."""
        self.repeats = RepeatModel(self.counts)
        self.distinct = DistinctModel(self.counts)
        self.pairs = PairOrder(self.counts)
        self._canonical_of: OrderedDict[int, tuple[ToolCall, tuple[str, Mapping[str, Any]]]] = OrderedDict()
        self._descriptions: tuple[object, Mapping[str, frozenset[str]]] = ((), {})
        """The tools offered in the latest context (as given) and their description words."""
        self._store_mark: str | None = None
        """Where the latest sync left off in the store (:meth:`~.store.IncrementalStore.load_since`)."""
        self._sync_lock: asyncio.Lock | None = None
        if store is not None:
            self.sync()

    @classmethod
    def for_tools(cls, tools: Mapping[str, Mapping[str, Any]], store: PatternStore | None = None,
                  config: PatternConfig | None = None) -> PatternPredictor:
        """A predictor whose patterns are stored under the fingerprint of ``tools`` (name -> schema)."""
        return cls(store, tool_set_fingerprint(tools), config)

    @classmethod
    def trained_on(cls, sessions: Iterable[RecordedSession | Trajectory], config: PatternConfig | None = None,
                   store: PatternStore | None = None, fingerprint: str = "default") -> PatternPredictor:
        """A predictor pre-trained on ``sessions`` (recorded sessions, or trajectories: without outputs,
        a trajectory teaches control flow and rules from the user's words only)."""
        predictor = cls(store, fingerprint, config)
        train(predictor, (s if isinstance(s, RecordedSession) else from_trajectory(s) for s in sessions))
        if store is not None:
            predictor.flush()
        return predictor

    def copy(self) -> PatternPredictor:
        """An independent predictor that knows what this one has learned (and has no store)."""
        clone = PatternPredictor(None, self.fingerprint, self.config)
        clone._load(self.counts.state())
        clone.flow.maxent.load_rehearsal(self.flow.maxent.rehearsal())
        return clone

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what it has learned (as :meth:`copy` keeps it; no store), e.g. for a worker process:
        its indexes and compiled schema checkers are rebuilt on loading."""
        return (_restored, (self.fingerprint, self.config, self.counts.state(), self.flow.maxent.rehearsal()))

    # --- context --------------------------------------------------------------------------------------

    def _step(self, context: PredictionContext) -> _Step:
        """The step of ``context``, worked out once: a prediction and the learning of the call that follows
        it (the same context object, unchanged) share it."""
        mark = _mark(context)
        cached = self._steps.get(context.session_id)
        if cached is not None and cached[0] is context and cached[1] == mark:
            return cached[2]
        step = self._derive_step(context)
        self._steps[context.session_id] = (context, mark, step)
        self._steps.move_to_end(context.session_id)
        while len(self._steps) > MAX_CACHED_STEPS:
            self._steps.popitem(last=False)
        return step

    def _derive_step(self, context: PredictionContext) -> _Step:
        turns = self._turns.turns(context)
        starts = set(turns.starts)
        tokens: list[str] = []
        for i, observed in enumerate(context.history):
            if i in starts:
                tokens.append(TURN_MARK)
            tokens.append(call_token(observed.call.name, observed.ok))
        turn_start = turns.current
        if turn_start == len(context.history):
            tokens.append(TURN_MARK)
        turn_calls = tuple(o.call.name for o in context.history[turn_start:])
        words = message_words(context.user_message)
        if not context.user_message and context.history:
            # Calls only (no user text): the words of the latest call and output stand in for the message's.
            latest = context.history[-1]
            words = message_words(" ".join(map(str, latest.call.arguments.values())) + " "
                                  + latest.output[:MAX_CUE_CHARS])
        view = FlowView(tuple(tokens[-(self.config.order + 1):]), words, turn_calls,
                        frozenset(o.call.name for o in context.history), self._described(context))
        system = system_text(context.messages)
        user_texts = [str(m.get("content") or "") for m in context.messages
                      if isinstance(m, Mapping) and m.get("role") == "user"] or [context.user_message]
        reference = reference_now(system, context.request_extra, user_texts,
                                  (o.output for o in reversed(context.history)))
        sources = Sources(context.user_message, context.history, turn_start, turns.previous_message, system,
                          reference)
        recent = recent_calls([self._canonical_observed(o, context.tools)
                               for o in context.history[-RECENT_CALLS:]])
        return _Step(view, sources, words, recent)

    def _described(self, context: PredictionContext) -> Mapping[str, frozenset[str]]:
        """The description words of the tools offered (:mod:`describe`), worked out once per tool list (an
        agent hands every step the same one)."""
        offered = context.openai_tools
        if self._descriptions[0] is not offered:
            self._descriptions = (offered, description_words(offered))
        return self._descriptions[1]

    def _canonical_observed(self, observed: ObservedCall, tools: Mapping[str, Mapping[str, Any]]
                            ) -> tuple[str, Mapping[str, Any]]:
        """(tool, canonical arguments) of an earlier call, worked out once per call (every later step reads
        the same calls)."""
        call = observed.call
        known = self._canonical_of.get(id(call))
        if known is not None and known[0] is call:
            return known[1]
        value = (call.name, self._canonical(call, tools.get(call.name)))
        self._canonical_of[id(call)] = (call, value)
        while len(self._canonical_of) > MAX_CANONICAL_CALLS:
            self._canonical_of.popitem(last=False)
        return value

    def _candidates(self, context: PredictionContext) -> tuple[str, ...]:
        """The tools that may come next: those offered, else every tool seen."""
        return tuple(context.tools) if context.tools else tuple(sorted(self.flow.known_tools))

    def _spec(self, name: str, schema: Mapping[str, Any] | None) -> ArgumentSpec | None:
        known = self._spec_of.get(name)
        if known is not None and known[0] is schema:
            return known[1]
        text = json.dumps(schema, sort_keys=True, default=str) if schema is not None else ""
        key = (name, text)
        if key not in self._specs:
            try:
                self._specs[key] = compile_arguments(name, schema) if schema is not None else None
            except InvalidArgumentsError:
                self._specs[key] = None
        self._spec_of[name] = (schema, self._specs[key])
        return self._specs[key]

    def _canonical(self, call: ToolCall, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        spec = self._spec(call.name, schema)
        if spec is not None:
            try:
                return spec.canonical_arguments(call)
            except InvalidArgumentsError:
                pass
        named = dict(zip(spec.parameter_order, call.positional, strict=False)) if spec else {}
        return {**named, **dict(call.arguments)}

    # --- predictor protocol ---------------------------------------------------------------------------

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        """Likely next calls, most confident first (executable ones have every required argument)."""
        return self.predict_now(context)

    def predict_now(self, context: PredictionContext) -> list[Prediction]:
        """:meth:`predict` without the coroutine (for replay and tests)."""
        step = self._step(context)
        ranked = self.flow.rank(step.view, self._candidates(context))[: self.config.name_candidates]
        options: dict[_OptionKey, Prediction] = {}
        seen_mass = 0.0
        for tool, p_name in ranked:
            floor = self._floor(options)
            if floor is not None and (floor > p_name or seen_mass >= self.config.name_mass):
                break  # no call of this tool, or of any less likely one, can (or is likely to) enter the top k
            seen_mass += p_name
            for key, prediction in self._calls_for(tool, p_name, context.tools.get(tool), step, floor):
                if key not in options or options[key].confidence < prediction.confidence:
                    options[key] = prediction
        # Executable before hints (a hint never outranks a call that can run), most confident first, then
        # in the order found (as a stable sort would).
        ordered = sorted([(not p.executable, -p.confidence, i, p) for i, p in enumerate(options.values())])
        return [p for *_, p in ordered if p.confidence >= self.config.min_confidence][: self.config.top_k]

    def _floor(self, options: Mapping[_OptionKey, Prediction]) -> float | None:
        """The k-th best confidence of an executable call so far, when a call must beat it (strictly) to
        change the answer (hints rank after every executable call).

        A call's confidence is its tool's probability times factors of at most 1 (argument scores, the
        hint factor), so a tool (and the product so far of its best argument scores) bounds the confidence
        of all its calls. None while fewer than k executable calls are known, or when the configuration allows
        factors above 1.
        """
        config = self.config
        executable = [p.confidence for p in options.values() if p.executable]
        if (config.top_k < 1 or len(executable) < config.top_k or config.arg_weight < 0
                or not 0 <= config.hint_factor <= 1):
            return None
        return sorted(executable, reverse=True)[config.top_k - 1]

    def predict_after(self, context: PredictionContext, speculated: ObservedCall) -> list[Prediction]:
        """Chained speculation: the calls likely to follow ``speculated``, as if it had just run.

        ``speculated`` is a call the agent is running early (PURE or READ_ONLY only: its output must not
        depend on anything the model might still change) together with its speculative output. Nothing is
        learned from it.
        """
        call_id = f"speculated_{len(context.history)}"
        messages = [*context.messages,
                    {"role": "assistant", "content": None, "tool_calls": [{
                        "id": call_id, "type": "function",
                        "function": {"name": speculated.call.name,
                                     "arguments": json.dumps(dict(speculated.call.arguments), default=str)}}]},
                    {"role": "tool", "tool_call_id": call_id, "content": speculated.output}]
        return self.predict_now(replace(context, messages=messages, history=(*context.history, speculated)))

    def _calls_for(self, tool: str, p_name: float, schema: Mapping[str, Any] | None, step: _Step,
                   floor: float | None = None) -> list[tuple[_OptionKey, Prediction]]:
        """The calls of ``tool`` worth proposing, with their keys; none when none can beat ``floor``."""
        properties: Mapping[str, Any] = (schema or {}).get("properties") or {}
        required = set((schema or {}).get("required") or ())
        choices: dict[str, list[ArgCandidate]] = {}
        bound = p_name  # the best confidence still possible, multiplied as confidences are below
        prune = floor is not None and self.config.arg_weight == 1.0
        alternatives = self.config.arg_alternatives
        for param in self.args.parameters(tool, properties):
            found = self.args.candidates(tool, param, properties.get(param) or {}, param in required,
                                         step.sources, step.words, alternatives)
            if found:
                choices[param] = found
                bound *= found[0].score
                if prune and floor is not None and bound < floor:
                    return []
        missing = sorted(required - set(choices))
        shared_rate = self.distinct.rate(tool)  # how often this tool's calls pass one value twice
        distinct = shared_rate < DISTINCT_BELOW
        if distinct:
            # A parameter whose best value another one has too gets one value more to fall back to
            # (distinct values, :mod:`distinct`).
            for param in sorted(clashing(choices)):
                choices[param] = self.args.candidates(tool, param, properties.get(param) or {}, param in required,
                                                      step.sources, step.words, alternatives + 1)
        picks = self.pairs.reorder(tool, choices, assign(choices, distinct), step.sources.user_message)
        base = {param: found[picks[param]] for param, found in choices.items()}
        # An alternative value counts only as far as the values ranked above it may be wrong: the k-th value
        # of a parameter is weighed by the product of (1 - score) of the ones before it.
        combos: list[tuple[dict[str, ArgCandidate], float]] = [(base, 1.0)]
        for param, found in choices.items():
            doubt, shown = 1.0, 0
            for i, alternative in enumerate(found):
                if i and shown < alternatives - 1 and i != picks[param]:
                    combos.append(({**base, param: alternative}, doubt))
                    shown += 1
                doubt *= 1.0 - min(1.0, max(0.0, alternative.score))
        out = []
        message = step.sources.user_message
        for n, (combo, factor) in enumerate(combos):
            confidence = p_name * factor
            if distinct and len(combo) > 1 and repeats_a_value([c.value for c in combo.values() if not c.absent]):
                confidence *= shared_rate
            for candidate in combo.values():
                confidence *= candidate.score ** self.config.arg_weight
            confidence *= self.config.hint_factor ** len(missing)
            arguments = {param: self.numbers.spell(tool, param, properties.get(param), c.value, message)
                         for param, c in combo.items() if not c.absent}
            if tool in step.recent:
                confidence *= self.repeats.factor(tool, self._canonical(ToolCall(tool, arguments), schema),
                                                  step.recent)
            key = (tool, tuple([(param, c.key) for param, c in combo.items() if not c.absent]))
            out.append((key, Prediction(ToolCall(tool, arguments), confidence, SOURCE, executable=not missing)))
            if n == 0:
                # The base call with a whole number spelt the other way, when the parameter's calls spell both.
                for param, value in arguments.items():
                    other = self.numbers.other_spelling(tool, param, properties.get(param), value, message)
                    if other is not None:
                        respelt = {**arguments, param: other[0]}
                        out.append(((tool, (*key[1], (param, "\x00spelt:" + type(other[0]).__name__))),
                                    Prediction(ToolCall(tool, respelt), confidence * other[1], SOURCE,
                                               executable=not missing)))
        return out

    def _with_step_calls(self, context: PredictionContext, observed: ObservedCall) -> PredictionContext:
        """``context`` plus the calls already observed in the same context (parallel calls of one step)."""
        mark = (len(context.history), len(context.messages), context.user_message)
        earlier = self._step_calls.get(context.session_id)
        if earlier is None or earlier[0] != mark:
            earlier = (mark, [])
        self._step_calls[context.session_id] = (mark, [*earlier[1], observed])
        self._step_calls.move_to_end(context.session_id)
        while len(self._step_calls) > MAX_STEP_SESSIONS:
            self._step_calls.popitem(last=False)
        if not earlier[1]:
            return context
        return replace(context, history=(*context.history, *earlier[1]))

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """Learn from one authoritative call made in ``context`` (the context before the call).

        Several calls observed with the same context (parallel calls of one step) are learned in order,
        each after the ones before it.
        """
        context = self._with_step_calls(context, observed)
        step = self._step(context)
        call = observed.call
        schema = context.tools.get(call.name)
        arguments = self._canonical(call, schema)
        self.flow.learn(step.view, self._candidates(context), call.name)
        properties: Mapping[str, Any] = (schema or {}).get("properties") or {}
        self.args.learn(call.name, properties, arguments, step.sources, step.words)
        self.numbers.learn(call.name, call.arguments, step.sources.user_message)
        self.repeats.learn(call.name, arguments, step.recent)
        self.distinct.learn(call.name, arguments)
        self.pairs.learn(call.name, arguments, step.sources.user_message)
        self.counts.tick()
        output_index(observed.output)  # indexed now, while learning, rather than in the next prediction
        first_output_date(observed.output)
        self._since_flush += 1
        if self._since_flush >= self.config.flush_every:
            try:
                self.flush()
            except (sqlite3.Error, OSError) as exc:
                log.warning("pattern store %s: save failed, kept in memory: %s", self.fingerprint, exc)


def _restored(fingerprint: Any, config: PatternConfig, state: Any, rehearsal: Any = None) -> PatternPredictor:
    """A predictor unpickled from :meth:`PatternPredictor.__reduce__` (``rehearsal``: the scorer's rehearsal
    memory; the number spellings are among the counters of ``state``)."""
    predictor = PatternPredictor(None, fingerprint, config)
    predictor._load(state)
    if rehearsal is not None:
        predictor.flow.maxent.load_rehearsal(rehearsal)
    return predictor
