"""Data flow: for each argument of a candidate call, which value, and how sure.

For every (tool, parameter) the model keeps learned derivation rules (:mod:`derive_rules`) with their
observed record: each time the tool is called, every known rule that gives a value here is one *trial*,
and a *success* when its value is the one the model used. A rule's score is the Wilson lower bound of
that record, shrunk towards the record of the same rule for the same parameter name on any tool (and,
for rules that name no tool, on any parameter), so a rule seen once is trusted a little, and a new tool
with familiar parameters is not a blank.

Three more kinds of evidence, with the same scoring:

* constants: values used before for this parameter, overall and given a word of the user message
  (``'SFO'`` after "San Francisco", ``False`` after "lock"); absence of an optional parameter is one
  such value;
* schema enums: an allowed value that the user message mentions; and glosses, a value the parameter's
  description explains ("'l' for lines") whose meaning the message names;
* vocabulary: a value used before for this parameter that the user message mentions.

A value backed by several pieces of evidence scores higher than by its best one alone (a damped
noisy-or), and every value offered is checked against (or coerced to) the parameter's schema.
A rule found for the first time is also scored on the last few calls of its tool, so its record does
not start with the one success it was found by (a rule reading outputs only on those calls whose outputs
are still indexed: :func:`~forethought.predictors.patterns.derive_outputs.output_index` keeps the latest).
A rule reading a fixed position of an output (``files[0]``, the second id of a listing) keeps a record apart
for messages that name an ordinal ("the third one"): there the position the message names is the better bet,
and the usual one has to earn its place anew.

The learning and the prediction are here; the counter keys are named in :mod:`args_keys`, the records,
scores and rule tables kept in :mod:`args_records`, the pseudo rules (enums, vocabulary, abbreviations,
glosses) worked out in :mod:`args_pseudo`.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.predictors.patterns.args_keys import (
    ABBR_FIRST_RULE,
    ABBR_RULE,
    ABSENT_KEY,
    ANY,
    ENUM_FIRST_RULE,
    ENUM_RULE,
    GLOSS_FIRST_RULE,
    GLOSS_RULE,
    GLOSS_UNUSED_RULE,
    MUTABLE,
    ORDINAL_MARK,
    PSEUDO_RULES,
    SEP,
    VOCAB_FIRST_RULE,
    VOCAB_RULE,
)
from forethought.predictors.patterns.args_pseudo import PseudoRules
from forethought.predictors.patterns.args_records import DEFAULT_RATE, MAX_TABLE_RULES, PRIOR_WEIGHT
from forethought.predictors.patterns.budgets import RECENT_OBSERVATIONS as KEPT_OBSERVATIONS
from forethought.predictors.patterns.counts import Counts, wilson_lower
from forethought.predictors.patterns.derive_ordinal import message_ordinal
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.derive_schema import schema_checker
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.select import best_first
from forethought.predictors.patterns.shapes import DATE_SHAPES, TIME_SHAPES, ShapeModel

__all__ = [
    "ABBR_FIRST_RULE",
    "ABBR_RULE",
    "ABSENT_KEY",
    "AGREEMENT_WEIGHT",
    "ANY",
    "BOUND_SLACK",
    "DEFAULT_RATE",
    "ENUM_FIRST_RULE",
    "ENUM_RULE",
    "GLOSS_FIRST_RULE",
    "GLOSS_RULE",
    "GLOSS_UNUSED_RULE",
    "MAX_CONSTANT_CHARS",
    "MAX_TABLE_RULES",
    "MIN_CUE_TRIALS",
    "ORDINAL_MARK",
    "PRIOR_WEIGHT",
    "PSEUDO_RULES",
    "RECENT_OBSERVATIONS",
    "SEP",
    "USED_ELSEWHERE_FACTOR",
    "VOCAB_FIRST_RULE",
    "VOCAB_RULE",
    "ArgCandidate",
    "ArgumentModel",
]

MAX_CONSTANT_CHARS = 120
RECENT_OBSERVATIONS = 32
"""A rule found for the first time is also scored on this many earlier calls of its tool, so that its
record does not start with a success it was chosen for."""
AGREEMENT_WEIGHT = 0.5
"""How much a second piece of evidence for the same value counts (1: as if independent)."""
MIN_CUE_TRIALS = 2.0
"""A cue word must have been seen this often with the parameter before it can select a constant."""
USED_ELSEWHERE_FACTOR = 0.5
"""Score factor of a value read from a message that a call of this turn already used for another
parameter (a name given once is rarely meant twice)."""
_MESSAGE_RULE = re.compile(r'\["(?:user|prev|sys|all)"')
BOUND_SLACK = 1e-9
"""Margin on the upper bounds of scores used to skip values that cannot win (far above rounding errors)."""


@dataclass(frozen=True, slots=True)
class ArgCandidate:
    """One possible value of one parameter (``absent``: leave the parameter out)."""

    value: Any
    score: float
    rule: str
    absent: bool = False
    key: str = ""
    """The value's key (:func:`~forethought.predictors.patterns.derive_values.value_key`; :data:`ABSENT_KEY` when
    absent): equal keys are equal values."""


_SCORE = operator.itemgetter(0)
"""Sort key of evidence tuples, which start with their score (sorted best first, stably)."""


class ArgumentModel(PseudoRules):
    """Learned derivation rules and constants per (tool, parameter)."""

    def __init__(self, counts: Counts, z: float = 1.0) -> None:
        super().__init__(counts, z)
        self.shapes = ShapeModel(counts)
        self._recent: dict[tuple[str, str], deque[tuple[int, Sources, str]]] = {}
        """(tool, parameter) -> its latest points of sessions: (serial, sources, the value it took)."""
        self._recent_order: deque[tuple[int, tuple[str, str]]] = deque()
        """Every point kept, oldest first: (serial, (tool, parameter))."""
        self._serial = 0
        self._checkers: dict[str, Callable[[Any], Any]] = {}
        self._checker_of: dict[tuple[str, str], tuple[Mapping[str, Any], Callable[[Any], Any]]] = {}

    def _checker(self, tool: str, param: str, schema: Mapping[str, Any]) -> Callable[[Any], Any]:
        """The schema check of one parameter (looked up by the schema's text only when the schema changed)."""
        known = self._checker_of.get((tool, param))
        if known is not None and known[0] is schema:
            return known[1]
        text = json.dumps(schema, sort_keys=True, default=str)
        checker = self._checkers.get(text)
        if checker is None:
            checker = self._checkers[text] = schema_checker(schema)
        self._checker_of[(tool, param)] = (schema, checker)
        return checker

    # --- learning -------------------------------------------------------------------------------------

    def learn(self, tool: str, properties: Mapping[str, Any], arguments: Mapping[str, Any], sources: Sources,
              words: frozenset[str]) -> None:
        """Update every rule and constant of ``tool``'s parameters with one observed call."""
        params = self._params.setdefault(tool, set())
        params.update(properties, arguments)
        for param in sorted(params):
            absent = param not in arguments
            value = None if absent else arguments[param]
            truth = ABSENT_KEY if absent else value_key(value)
            schema = properties.get(param) or {}
            known = self._rules.setdefault((tool, param), set())
            recent = self._recent.setdefault((tool, param), deque(maxlen=RECENT_OBSERVATIONS))
            found_now: set[str] = set()
            indexed: dict[int, bool] = {}  # serial of a kept point -> whether its outputs are still indexed
            if not absent:
                for rule in sources.explain(value, param):
                    found_now.add(rule.key)
                    if rule.key in known:
                        continue
                    self._parsed.setdefault(rule.key, rule)
                    for level in self._levels(tool, param, rule.key):
                        self._add_rule(level, rule.key, cut=False)
                    for serial, past, past_truth in recent:
                        if rule.reads_outputs:
                            if serial not in indexed:
                                indexed[serial] = past.outputs_indexed()
                            if not indexed[serial]:
                                continue  # its outputs' indexes are forgotten: not worth indexing them again
                        self._trial(tool, param, rule.key, past.apply_keyed(rule), past_truth,
                                    message_ordinal(past.user_message) is not None)
            tried = known if len(known) <= MAX_TABLE_RULES else {*self._table(tool, param).keys, *found_now}
            keys = sorted({*tried, *PSEUDO_RULES})
            rules = [self._rule(key) for key in keys]
            ordinal = message_ordinal(sources.user_message) is not None
            for key, parsed, produced in zip(keys, rules, sources.apply_all(rules), strict=True):
                if parsed is None:
                    produced = self._pseudo_keyed(key, tool, param, schema, sources)
                if self._trial(tool, param, key, produced, truth, ordinal) and key in PSEUDO_RULES:
                    self._add_rule((tool, param), key, cut=False)
            for level in sorted({level for key in found_now for level in self._levels(tool, param, key)}):
                self._cut_rules(level)
            self._remember(tool, param, sources, truth)
            self._count_constant(tool, param, truth, words)
            if not absent:
                self.shapes.learn(tool, param, value)
            self._table(tool, param)  # brought up to date here, not in the next prediction
        sources.forget_values()  # kept in the recent observations: without what this step remembered

    def _remember(self, tool: str, param: str, sources: Sources, truth: str) -> None:
        """Keep one point of a session (with the value the parameter took there) to score rules found
        later on: the last :data:`RECENT_OBSERVATIONS` of the parameter, and of all parameters together the
        last :data:`~forethought.predictors.patterns.budgets.RECENT_OBSERVATIONS` (each holds its session's
        outputs)."""
        self._serial += 1
        self._recent[(tool, param)].append((self._serial, sources, truth))
        self._recent_order.append((self._serial, (tool, param)))
        while len(self._recent_order) > KEPT_OBSERVATIONS:
            serial, level = self._recent_order.popleft()
            kept = self._recent.get(level)
            if kept and kept[0][0] == serial:
                kept.popleft()

    def _trial(self, tool: str, param: str, key: str, produced: tuple[Any, str] | None, truth: str,
               ordinal: bool = False) -> bool:
        """Count one use of rule ``key`` (none when it gave nothing; ``ordinal``: in a message naming an
        ordinal); whether it gave the truth."""
        if produced is None:
            return False
        hit = produced[1] == truth
        record = self._record(tool, param, key, ordinal)
        pairs = (record.here, *record.wider)
        self.counts.add_ones([k for pair in pairs for k in pair] if hit else [n_key for _, n_key in pairs])
        return hit

    def _count_constant(self, tool: str, param: str, truth: str, words: frozenset[str]) -> None:
        level = (tool, param)
        prefix = SEP.join(("k", tool, param, ""))
        self.counts.add_ones([SEP.join(("c", tool, param)), *[prefix + word for word in words]])
        cues = self._cues.setdefault(level, {})
        for word in words:
            if word not in cues:
                cues[word] = {}
        if len(truth) <= MAX_CONSTANT_CHARS:
            self._store_value(level, truth)
            suffix = SEP + truth
            self.counts.add_ones([SEP.join(("c", tool, param, truth)), *[prefix + word + suffix for word in words]])
            for word in sorted(words):
                self._pair(level, word, truth)
                self._cut_pairs(level, word)
            self._cut_values(level)
            self._rank_value(level, truth)
        self._cut_cue_words(level)

    # --- prediction -----------------------------------------------------------------------------------

    def parameters(self, tool: str, properties: Mapping[str, Any]) -> list[str]:
        """Parameters to fill: the schema's, and any seen used with the tool."""
        return sorted(set(properties) | self._params.get(tool, set()))

    def _cue_words(self, tool: str, param: str, words: frozenset[str], stored: Mapping[str, float], scale: float
                   ) -> list[tuple[str, float, Mapping[str, None]]]:
        """The cue words of the message seen often enough with the parameter: the prefix of their joint
        counts' keys, their count, the values seen with them (``stored``, ``scale``: the counts')."""
        cues = self._cues.get((tool, param))
        if not cues:
            return []
        prefix = SEP.join(("k", tool, param, ""))
        out: list[tuple[str, float, Mapping[str, None]]] = []
        for word in words & cues.keys():
            if (key := prefix + word) in stored and stored[key] * scale >= MIN_CUE_TRIALS:
                out.append((key + SEP, stored[key] * scale, cues[word]))
        return out

    def _constant_score(self, truth: str, share: tuple[float, float],
                        cues: Sequence[tuple[str, float, Mapping[str, None]]],
                        stored: Mapping[str, float], scale: float) -> float:
        """A stored value's score: the Wilson bound of its share of the parameter's uses, or of its share
        given a cue word of the message (:meth:`_cue_words`) if one scores higher."""
        z = self.z
        z2 = z * z if z >= 0 else -1.0
        best = wilson_lower(share[0], share[1], z)
        for prefix, seen, truths in cues:
            if truth in truths:
                joint = stored[k] * scale if (k := prefix + truth) in stored else 0.0
                # A Wilson lower bound of s out of n never exceeds s / (n + z**2) (z >= 0): skip cues below.
                if z2 >= 0 and joint / (seen + z2) + BOUND_SLACK < best:
                    continue
                score = wilson_lower(joint, seen, z)
                if score > best:
                    best = score
        return best

    def candidates(self, tool: str, param: str, schema: Mapping[str, Any], required: bool, sources: Sources,
                   words: frozenset[str], limit: int = 3) -> list[ArgCandidate]:
        """The best values for one parameter, most likely first (absence included when optional).

        A value's score is its best piece of evidence, raised by every other piece that agrees with it
        (a damped noisy-or: agreeing rules are rarely independent). A value backed by one stored constant
        only is scored only if it may make the cut (:mod:`pattern_select`).
        """
        evidence: dict[str, list[tuple[float, str, Any]]] = {}
        own = (tool, param) in self._rules
        stored, scale = self.counts.stored(), self.counts.scale
        table = self._table(tool, param)
        produced = sources.apply_all(table.rules)
        for i in table.pseudo:
            produced[i] = self._pseudo_keyed(table.keys[i], tool, param, schema, sources)
        records = table.ordinal_records if message_ordinal(sources.user_message) is not None else table.records
        # Only the rules that give a value here (most give none).
        for key, record, found in itertools.compress(zip(table.keys, records, produced, strict=True), produced):
            if found is None:
                continue
            value, value_id = found
            s_key = record.here[0]
            successes = stored[s_key] * scale if s_key in stored else 0.0
            if successes <= 0 and own:
                continue
            if not required or value_id != ABSENT_KEY:
                piece = (self._score(record, successes, stored, scale), key, value)
                if value_id in evidence:
                    evidence[value_id].append(piece)
                else:
                    evidence[value_id] = [piece]
        cue_words = self._cue_words(tool, param, words, stored, scale)
        lazy = self._add_constants(tool, param, required, cue_words, evidence, stored, scale, sources)

        def exact(item: tuple[str, str, Any]) -> float:
            return self._constant_score(*lazy[item[0]], cue_words, stored, scale)

        for value_id, pieces in evidence.items():
            if value_id in lazy or not pieces:
                continue
            if all(_MESSAGE_RULE.match(rule) for _, rule, _ in pieces) and sources.used_elsewhere(pieces[0][2], param):
                evidence[value_id] = [(score * USED_ELSEWHERE_FACTOR, rule, value) for score, rule, value in pieces]
        return self._best(tool, param, schema, evidence, lazy, exact, limit)

    def _add_constants(self, tool: str, param: str, required: bool,
                       cue_words: Sequence[tuple[str, float, Mapping[str, None]]],
                       evidence: dict[str, list[tuple[float, str, Any]]], stored: Mapping[str, float], scale: float,
                       sources: Sources) -> dict[str, tuple[str, tuple[float, float]]]:
        """Add the values stored for the parameter to ``evidence``, after the rules' (absence too, unless
        ``required``). A value with no other evidence gets an upper bound of its score instead of the score
        (when ``z`` >= 0); returned: value key -> (stored key, share of uses) of each such value."""
        lazy: dict[str, tuple[str, tuple[float, float]]] = {}
        prefix = SEP.join(("c", tool, param))
        total = stored[prefix] * scale if prefix in stored else 0.0
        z2 = self.z * self.z
        cue_bounds: dict[str, float] = {}  # stored key -> best upper bound of its score given a cue word
        for cue_prefix, seen, truths in cue_words if self.z >= 0 else ():
            for truth in truths:
                if (k := cue_prefix + truth) in stored:
                    cue_bound = stored[k] * scale / (seen + z2)
                    if truth not in cue_bounds or cue_bound > cue_bounds[truth]:
                        cue_bounds[truth] = cue_bound
        entries = self._values.get((tool, param), {})
        forms = self._forms.get((tool, param), {})
        # The values worth scoring: the most used, those a cue word of the message goes with, those a rule
        # gives here (their constant share agrees with the rule), absence. Any other scores below the most
        # used (by the Wilson bound of a smaller share), so it could only matter were they all refused.
        states_date, states_time = sources.states_when()
        chosen = dict.fromkeys(self._top.get((tool, param), ()))
        chosen.update(dict.fromkeys(sorted({truth for _, _, truths in cue_words for truth in truths})))
        for value_id in evidence:
            chosen.update(dict.fromkeys(forms.get(value_id, ())))
        if not required and ABSENT_KEY in entries:
            chosen[ABSENT_KEY] = None
        for truth in chosen:
            if truth not in entries:
                continue
            stored_value = entries[truth]
            count_key, value, value_id = stored_value.count_key, stored_value.value, stored_value.value_id
            if value_id not in evidence and ((states_date and stored_value.shape in DATE_SHAPES)
                                             or (states_time and stored_value.shape in TIME_SHAPES)):
                continue  # never a date (or time) remembered from elsewhere when the message states one
            if truth == ABSENT_KEY:
                if required:
                    continue
                rule = "absent"
            else:
                value, rule = json.loads(truth) if value is MUTABLE else value, "constant"
            share = (stored[count_key] * scale if count_key in stored else 0.0, total)
            if value_id not in evidence and self.z >= 0:
                # An upper bound of the score (see _constant_score) stands in for it until it is needed.
                bound = share[0] / (total + z2) if total > 0 else 0.0
                if truth in cue_bounds and cue_bounds[truth] > bound:
                    bound = cue_bounds[truth]
                evidence[value_id] = [(bound + BOUND_SLACK, rule, value)]
                lazy[value_id] = (truth, share)
                continue
            if value_id in lazy:  # a second stored form of the same value: both pieces count
                first, first_share = lazy.pop(value_id)
                _, first_rule, first_value = evidence[value_id][0]
                evidence[value_id][0] = (self._constant_score(first, first_share, cue_words, stored, scale),
                                         first_rule, first_value)
            evidence.setdefault(value_id, []).append(
                (self._constant_score(truth, share, cue_words, stored, scale), rule, value))
        return lazy

    def _best(self, tool: str, param: str, schema: Mapping[str, Any],
              evidence: Mapping[str, list[tuple[float, str, Any]]], lazy: Mapping[str, object],
              exact: Callable[[tuple[str, str, Any]], float], limit: int) -> list[ArgCandidate]:
        """The ``limit`` best-scored values that pass the schema check, best first (the score of a value
        in ``lazy`` is ``exact((key, rule, value))``; its one piece holds an upper bound of it)."""
        items: list[tuple[float, bool, tuple[str, str, Any]]] = []
        fits: dict[str, float] = {}  # value key -> its shape's factor (:mod:`shapes`)
        for key, pieces in evidence.items():
            fit = fits[key] = 1.0 if key == ABSENT_KEY else self.shapes.factor(tool, param, pieces[0][2])
            if key in lazy:
                items.append((pieces[0][0] * fit, False, (key, pieces[0][1], pieces[0][2])))
                continue
            if pieces[1:]:
                pieces.sort(key=_SCORE, reverse=True)
            score, rule, value = pieces[0]
            for other, _, _ in pieces[1:]:
                score = 1.0 - (1.0 - score) * (1.0 - AGREEMENT_WEIGHT * other)
            items.append((score * fit, True, (key, rule, value)))
        out: list[ArgCandidate] = []
        if limit <= 0:
            return out
        check: Callable[[Any], Any] | None = None

        def fitted(item: tuple[str, str, Any]) -> float:
            return exact(item) * fits[item[0]]

        for score, (key, rule, value) in best_first(items, fitted):
            if key == ABSENT_KEY:
                out.append(ArgCandidate(value, score, rule, absent=True, key=ABSENT_KEY))
            else:
                if check is None:
                    check = self._checker(tool, param, schema)
                checked = check(value)
                if checked is None:
                    continue
                out.append(ArgCandidate(checked, score, rule, key=key if checked is value else value_key(checked)))
            if len(out) >= limit:
                break
        return out
