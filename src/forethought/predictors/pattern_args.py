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
* schema enums: an allowed value that the user message mentions;
* vocabulary: a value used before for this parameter that the user message mentions.

A value backed by several pieces of evidence scores higher than by its best one alone (a damped
noisy-or), and every value offered is checked against (or coerced to) the parameter's schema.
A rule found for the first time is also scored on the last few calls of its tool, so its record does
not start with the one success it was found by.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.calls import Normalizer, compile_schema
from forethought.errors import InvalidArgumentsError
from forethought.predictors.derive_rules import Rule, Sources
from forethought.predictors.derive_values import value_key
from forethought.predictors.pattern_counts import Counts, wilson_lower
from forethought.predictors.pattern_text import parse_number

SEP = "\x1f"
ANY = "*"
ABSENT_KEY = "\x00absent"
"""Value key recorded when an optional parameter is left out."""
ENUM_RULE = '["enum"]'
VOCAB_RULE = '["vocab"]'
PRIOR_WEIGHT = 2.0
DEFAULT_RATE = 0.2
MAX_CONSTANT_CHARS = 120
RECENT_OBSERVATIONS = 32
"""A rule found for the first time is also scored on this many earlier calls of its tool, so that its
record does not start with a success it was chosen for."""
AGREEMENT_WEIGHT = 0.5
"""How much a second piece of evidence for the same value counts (1: as if independent)."""
MIN_CUE_TRIALS = 2.0
"""A cue word must have been seen this often with the parameter before it can select a constant."""


@dataclass(frozen=True, slots=True)
class ArgCandidate:
    """One possible value of one parameter (``absent``: leave the parameter out)."""

    value: Any
    score: float
    rule: str
    absent: bool = False


def _coercions(value: Any) -> list[Any]:
    """The value itself, then the other JSON types it could be meant as (a number in a string...)."""
    out = [value]
    if isinstance(value, str):
        number = parse_number(value)
        if number is not None:
            out.append(int(number) if number.is_integer() else number)
        if value.lower() in ("true", "false"):
            out.append(value.lower() == "true")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))
    if not isinstance(value, list):
        out.append([value])
    return out


def schema_checker(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """A function giving a value in the form ``schema`` accepts (coerced if need be: ``"12"`` -> ``12``,
    ``"a"`` -> ``["a"]``), or None when no coercion fits."""
    try:
        normalize: Normalizer | None = compile_schema(schema)
    except InvalidArgumentsError:
        normalize = None

    def check(value: Any) -> Any:
        if normalize is None:
            return value
        for candidate in _coercions(value):
            try:
                normalize(candidate, "")
            except InvalidArgumentsError:
                continue
            return candidate
        return None

    return check


def _alnum_words(text: str) -> str:
    return " " + " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split()) + " "


class ArgumentModel:
    """Learned derivation rules and constants per (tool, parameter)."""

    def __init__(self, counts: Counts, z: float = 1.0) -> None:
        self.counts = counts
        self.z = z
        self._rules: dict[tuple[str, str], set[str]] = {}
        self._values: dict[tuple[str, str], set[str]] = {}
        self._cues: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._params: dict[str, set[str]] = {}
        self._parsed: dict[str, Rule] = {}
        self._recent: dict[tuple[str, str], deque[tuple[Sources, str]]] = {}
        self._checkers: dict[str, Callable[[Any], Any]] = {}

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store."""
        parts = key.split(SEP)
        if parts[0] == "r" and len(parts) == 5:
            self._rules.setdefault((parts[1], parts[2]), set()).add(parts[3])
            if parts[1] != ANY:
                self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "c" and len(parts) == 4:
            self._values.setdefault((parts[1], parts[2]), set()).add(parts[3])
            self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "k" and len(parts) == 5:
            self._cues.setdefault((parts[1], parts[2]), {}).setdefault(parts[3], set()).add(parts[4])

    def _rule(self, key: str) -> Rule | None:
        if key in (ENUM_RULE, VOCAB_RULE):
            return None
        rule = self._parsed.get(key)
        if rule is None:
            rule = self._parsed[key] = Rule.from_key(key)
        return rule

    def _checker(self, schema: Mapping[str, Any]) -> Callable[[Any], Any]:
        text = json.dumps(schema, sort_keys=True, default=str)
        checker = self._checkers.get(text)
        if checker is None:
            checker = self._checkers[text] = schema_checker(schema)
        return checker

    def _levels(self, tool: str, param: str, rule_key: str) -> list[tuple[str, str]]:
        levels = [(tool, param), (ANY, param)]
        rule = self._rule(rule_key)
        if rule is None or rule.generic:
            levels.append((ANY, ANY))
        return levels

    def _record(self, level: tuple[str, str], rule_key: str) -> tuple[float, float]:
        base = SEP.join(("r", *level, rule_key))
        return self.counts.get(base + SEP + "s"), self.counts.get(base + SEP + "n")

    def rule_score(self, tool: str, param: str, rule_key: str) -> float:
        """Wilson lower bound of the rule's record here, shrunk towards its record elsewhere."""
        rate = DEFAULT_RATE
        for level in reversed(self._levels(tool, param, rule_key)[1:]):
            s, n = self._record(level, rule_key)
            rate = (s + PRIOR_WEIGHT * rate) / (n + PRIOR_WEIGHT)
        s, n = self._record((tool, param), rule_key)
        return wilson_lower(s + PRIOR_WEIGHT * rate, n + PRIOR_WEIGHT, self.z)

    # --- pseudo rules: enums and vocabulary mentioned in the message ------------------------------------

    @staticmethod
    def _mentioned(values: Sequence[Any], sources: Sources) -> Any:
        text = _alnum_words(sources.user_message)
        best: tuple[int, Any] | None = None
        for value in values:
            if not isinstance(value, str) or len(value) < 2:
                continue
            at = text.rfind(_alnum_words(value))
            if at >= 0 and (best is None or at > best[0]):
                best = (at, value)
        return None if best is None else best[1]

    def _vocabulary(self, tool: str, param: str) -> list[Any]:
        return [json.loads(vk) for vk in sorted(self._values.get((tool, param), ())) if vk != ABSENT_KEY]

    def _pseudo(self, key: str, tool: str, param: str, schema: Mapping[str, Any], sources: Sources) -> Any:
        if key == ENUM_RULE:
            enum = schema.get("enum")
            return self._mentioned(list(enum), sources) if isinstance(enum, list) else None
        return self._mentioned(self._vocabulary(tool, param), sources)

    def _produce(self, key: str, tool: str, param: str, schema: Mapping[str, Any], sources: Sources) -> Any:
        rule = self._rule(key)
        return self._pseudo(key, tool, param, schema, sources) if rule is None else sources.apply(rule)

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
            if not absent:
                for rule in sources.explain(value):
                    if rule.key in known:
                        continue
                    known.add(rule.key)
                    self._parsed.setdefault(rule.key, rule)
                    for level in self._levels(tool, param, rule.key)[1:]:
                        self._rules.setdefault(level, set()).add(rule.key)
                    for past, past_truth in recent:
                        self._trial(tool, param, rule.key, past.apply(rule), past_truth)
            for key in sorted({*known, ENUM_RULE, VOCAB_RULE}):
                produced = self._produce(key, tool, param, schema, sources)
                if self._trial(tool, param, key, produced, truth) and key in (ENUM_RULE, VOCAB_RULE):
                    known.add(key)
            recent.append((sources, truth))
            self._count_constant(tool, param, truth, words)

    def _trial(self, tool: str, param: str, key: str, produced: Any, truth: str) -> bool:
        """Count one use of rule ``key`` (none when it gave nothing); whether it gave the truth."""
        if produced is None:
            return False
        hit = value_key(produced) == truth
        for level in self._levels(tool, param, key):
            base = SEP.join(("r", *level, key))
            self.counts.add(base + SEP + "n")
            if hit:
                self.counts.add(base + SEP + "s")
        return hit

    def _count_constant(self, tool: str, param: str, truth: str, words: frozenset[str]) -> None:
        self.counts.add(SEP.join(("c", tool, param)))
        for word in words:
            self.counts.add(SEP.join(("k", tool, param, word)))
        if len(truth) > MAX_CONSTANT_CHARS:
            return
        self.counts.add(SEP.join(("c", tool, param, truth)))
        self._values.setdefault((tool, param), set()).add(truth)
        cues = self._cues.setdefault((tool, param), {})
        for word in words:
            self.counts.add(SEP.join(("k", tool, param, word, truth)))
            cues.setdefault(word, set()).add(truth)

    # --- prediction -----------------------------------------------------------------------------------

    def parameters(self, tool: str, properties: Mapping[str, Any]) -> list[str]:
        """Parameters to fill: the schema's, and any seen used with the tool."""
        return sorted(set(properties) | self._params.get(tool, set()))

    def candidates(self, tool: str, param: str, schema: Mapping[str, Any], required: bool, sources: Sources,
                   words: frozenset[str], limit: int = 3) -> list[ArgCandidate]:
        """The best values for one parameter, most likely first (absence included when optional).

        A value's score is its best piece of evidence, raised by every other piece that agrees with it
        (a damped noisy-or: agreeing rules are rarely independent).
        """
        evidence: dict[str, list[tuple[float, str, Any]]] = {}

        def offer(value: Any, score: float, rule: str) -> None:
            key = ABSENT_KEY if rule == "absent" else value_key(value)
            if key != ABSENT_KEY or not required:
                evidence.setdefault(key, []).append((score, rule, value))

        rules = self._rules.get((tool, param)) or self._rules.get((ANY, param)) or set()
        for key in sorted({*rules, ENUM_RULE}):
            s, _ = self._record((tool, param), key)
            if s <= 0 and (tool, param) in self._rules:
                continue
            produced = self._produce(key, tool, param, schema, sources)
            if produced is not None:
                offer(produced, self.rule_score(tool, param, key), key)
        total = self.counts.get(SEP.join(("c", tool, param)))
        cues = self._cues.get((tool, param), {})
        for truth in self._values.get((tool, param), ()):
            score = wilson_lower(self.counts.get(SEP.join(("c", tool, param, truth))), total, self.z)
            for word in words:
                if truth in cues.get(word, ()):
                    seen = self.counts.get(SEP.join(("k", tool, param, word)))
                    if seen >= MIN_CUE_TRIALS:
                        joint = self.counts.get(SEP.join(("k", tool, param, word, truth)))
                        score = max(score, wilson_lower(joint, seen, self.z))
            offer(None if truth == ABSENT_KEY else json.loads(truth), score,
                  "absent" if truth == ABSENT_KEY else "constant")
        check = self._checker(schema)
        out = []
        for key, pieces in evidence.items():
            pieces.sort(key=lambda piece: -piece[0])
            score, rule, value = pieces[0]
            if key != ABSENT_KEY:
                value = check(value)
                if value is None:
                    continue
            for other, _, _ in pieces[1:]:
                score = 1.0 - (1.0 - score) * (1.0 - AGREEMENT_WEIGHT * other)
            out.append(ArgCandidate(value, score, rule, absent=key == ABSENT_KEY))
        return sorted(out, key=lambda c: -c.score)[:limit]
