"""The records of the argument model's rules: their counter keys, their scores, the table replayed per parameter.

For every (tool, parameter) the model keeps learned derivation rules (:mod:`derive_rules`) with their
observed record: trials (the rule gave a value) and successes (the value the model used). A rule's score is
the Wilson lower bound of that record, shrunk towards the record of the same rule for the same parameter
name on any tool (and, for rules that name no tool, on any parameter). A rule reading a fixed position of
an output keeps a record apart for messages that name an ordinal (:func:`positional`). The rules tried for
a parameter, with their records, form its table (:class:`RuleTable`), kept until a rule is added.
:class:`RuleRecords` holds this state; :class:`~forethought.predictors.patterns.args.ArgumentModel` learns
and predicts with it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forethought.predictors.patterns.args_keys import (
    ABSENT_KEY,
    ANY,
    ENUM_FIRST_RULE,
    ENUM_RULE,
    MUTABLE,
    ORDINAL_MARK,
    PSEUDO_RULES,
    SEP,
    parse_constant,
)
from forethought.predictors.patterns.budgets import (
    CUE_WORDS_PER_PARAMETER,
    GENERIC_RULES,
    RULES_PER_PARAMETER,
    TOP_VALUES,
    VALUES_PER_CUE_WORD,
    VALUES_PER_PARAMETER,
    over,
    weakest,
)
from forethought.predictors.patterns.counts import Counts, wilson_lower
from forethought.predictors.patterns.derive_rule import Rule
from forethought.predictors.patterns.mentions import alnum_words, is_code
from forethought.predictors.patterns.shapes import shape

PRIOR_WEIGHT = 2.0
DEFAULT_RATE = 0.2
MAX_TABLE_RULES = 48
"""Rules replayed per parameter (the best scored): outputs full of common values breed many rules."""
REBUILD_AFTER = 8
"""A parameter's full table of rules (:data:`MAX_TABLE_RULES`) is chosen again after this many rules were
added at its level (choosing scores every rule known: with hundreds, a cost worth sharing)."""
MAX_RECORDS = 8 * RULES_PER_PARAMETER
"""Counter keys of rule records remembered per parameter (rules of this level and of the wider ones it
falls back on, each with its record for messages naming an ordinal)."""


@dataclass(frozen=True, slots=True)
class Record:
    """Counter keys of a rule's record for one parameter: (successes, trials) here, and at each wider level
    it is shrunk towards, widest first."""

    here: tuple[str, str]
    wider: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class StoredValue:
    """A value stored for a parameter, worked out once: the key of its count, the value (None when absent,
    :data:`~.args_keys.MUTABLE` for a list or object), its value key, its words as a message would mention
    it (None: it cannot be mentioned), whether it is a code that may abbreviate a name."""

    count_key: str
    value: Any
    value_id: str
    form: str | None
    code: bool
    shape: str


@dataclass(frozen=True, slots=True)
class RuleTable:
    """The rules to try for one parameter, in order: keys, parsed rules (None: a pseudo rule), records."""

    keys: tuple[str, ...]
    rules: tuple[Rule | None, ...]
    records: tuple[Record, ...]
    ordinal_records: tuple[Record, ...]
    """The records to use when the message names an ordinal (apart for positional rules)."""
    pseudo: tuple[int, ...]
    """Positions of the pseudo rules."""


_UNREADABLE = (ValueError, TypeError, RecursionError)
"""What parsing a rule or value key a store holds may raise when this model did not write it (not JSON, not
a rule's shape, an integer past Python's digit limit, nesting past the recursion limit)."""
_parse_rule = functools.lru_cache(maxsize=4096)(Rule.from_key)
"""Rules are values: parsed once per rule key and process while recently used, shared by every model (and
copy); a model keeps the rules of its tables parsed itself."""


def positional(rule: Rule | None) -> bool:
    """Whether ``rule`` reads a fixed position of an output (a list index in its path, a text atom)."""
    if rule is None:
        return False
    return rule.source == "tok" or (rule.source == "out" and "[" in rule.locator[-1])


class RuleRecords:
    """The known rules and stored values per (tool, parameter), and the records and tables of the rules."""

    def __init__(self, counts: Counts, z: float = 1.0) -> None:
        self.counts = counts
        self.z = z
        self._rules: dict[tuple[str, str], set[str]] = {}
        self._values: dict[tuple[str, str], dict[str, StoredValue]] = {}
        """(tool, parameter) -> its stored values (stored key -> :class:`StoredValue`), in the order stored."""
        self._forms: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
        """(tool, parameter) -> value key -> the stored keys of that value."""
        self._cues: dict[tuple[str, str], dict[str, dict[str, None]]] = {}
        """(tool, parameter) -> each word counted with it -> the values counted with that word (as dict keys:
        a dict of strings is not tracked by the garbage collector, a set is)."""
        self._value_words: dict[tuple[str, str], dict[str, dict[str, None]]] = {}
        """(tool, parameter) -> each value -> the words counted with it (what cutting a value discards)."""
        self._params: dict[str, set[str]] = {}
        self._parsed: dict[str, Rule] = {}
        self._rule_levels: dict[str, int] = {}
        """Rule key -> how many levels hold it (its parsed form is kept while any does)."""
        self._records: dict[tuple[str, str], dict[str, Record]] = {}
        self._tables: dict[tuple[str, str], tuple[tuple[tuple[str, str], int, int], RuleTable]] = {}
        self._top: dict[tuple[str, str], list[str]] = {}
        """(tool, parameter) -> its :data:`~.budgets.TOP_VALUES` most used values, most used first (ties: by
        key), kept as values are counted."""
        self._value_generation: dict[tuple[str, str], int] = {}
        """(tool, parameter) -> moves whenever a value is stored or cut."""
        self._rule_generation: dict[tuple[str, str], int] = {}
        """Level -> moves whenever a rule is added or cut."""
        self._cut_generation: dict[tuple[str, str], int] = {}
        """Level -> moves whenever rules are cut (a table holding a rule cut is worked out again at once)."""

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store."""
        parts = key.split(SEP)
        if parts[0] == "r" and len(parts) == 5 and parts[3].endswith(ORDINAL_MARK):
            return  # the record of a known rule, for messages naming an ordinal
        if parts[0] == "r" and len(parts) == 5:
            rule = parts[3]
            if rule not in self._parsed and rule not in PSEUDO_RULES:
                try:
                    self._parsed[rule] = _parse_rule(rule)
                except _UNREADABLE:
                    return  # not a rule this model wrote (another program's, a damaged store): never used
            self._add_rule((parts[1], parts[2]), rule, cut=False)
            if parts[1] != ANY:
                self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "c" and len(parts) == 4:
            if parts[3] != ABSENT_KEY:
                try:
                    parse_constant(parts[3])
                except _UNREADABLE:
                    return  # not a value key this model wrote: never used
            self._store_value((parts[1], parts[2]), parts[3])
            self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "k" and len(parts) == 4:
            self._cues.setdefault((parts[1], parts[2]), {}).setdefault(parts[3], {})
        elif parts[0] == "k" and len(parts) == 5:
            self._pair((parts[1], parts[2]), parts[3], parts[4])

    def keep_budgets(self) -> None:
        """Cut every table over its budget (after loading a store, which may hold more), and rank the values
        of each parameter."""
        for level in sorted(self._values):
            self._cut_values(level)
        for level in sorted(self._cues):
            self._cut_cue_words(level)
            for word in sorted(self._cues[level]):
                self._cut_pairs(level, word)
        for level in sorted(self._rules):
            self._cut_rules(level)
        stored = self.counts.stored()
        for level, values in self._values.items():
            prefix = SEP.join(("c", *level, ""))
            ranked = sorted(values, key=lambda truth: (-stored.get(prefix + truth, 0.0), truth))
            self._top[level] = ranked[:TOP_VALUES]

    def _rank_value(self, level: tuple[str, str], truth: str) -> None:
        """Keep the parameter's most used values in order, ``truth`` having just been counted."""
        top = self._top.setdefault(level, [])
        stored = self.counts.stored()
        prefix = SEP.join(("c", *level, ""))
        if truth not in top:
            if len(top) >= TOP_VALUES and stored.get(prefix + truth, 0.0) <= stored.get(prefix + top[-1], 0.0):
                return
            top.append(truth)
        top.sort(key=lambda value: (-stored.get(prefix + value, 0.0), value))
        del top[TOP_VALUES:]

    # --- the tables and their budgets -----------------------------------------------------------------

    def _store_value(self, level: tuple[str, str], truth: str) -> bool:
        """Note a value stored for a parameter; whether it is new."""
        values = self._values.setdefault(level, {})
        if truth in values:
            return False
        value, value_id = (None, ABSENT_KEY) if truth == ABSENT_KEY else parse_constant(truth)
        mentionable = isinstance(value, str) and len(value) >= 2
        kind = "empty" if truth == ABSENT_KEY else shape(json.loads(truth) if value is MUTABLE else value)
        values[truth] = StoredValue(SEP.join(("c", *level, truth)), value, value_id,
                                    alnum_words(value) if mentionable else None, is_code(value), kind)
        forms = self._forms.setdefault(level, {})
        forms[value_id] = (*forms.get(value_id, ()), truth)
        self._value_generation[level] = self._value_generation.get(level, 0) + 1
        return True

    def _pair(self, level: tuple[str, str], word: str, truth: str) -> None:
        """Note that ``word`` was counted with value ``truth`` of a parameter."""
        self._cues.setdefault(level, {}).setdefault(word, {})[truth] = None
        self._value_words.setdefault(level, {}).setdefault(truth, {})[word] = None

    def _cut_pairs(self, level: tuple[str, str], word: str) -> None:
        """Cut the values counted with a cue word back to their budget, keeping those seen with it most."""
        truths = self._cues[level][word]
        if not over(len(truths), VALUES_PER_CUE_WORD):
            return
        stored = self.counts.stored()
        base = SEP.join(("k", *level, word, ""))
        words_of = self._value_words.get(level, {})
        cut = weakest(truths, VALUES_PER_CUE_WORD, lambda truth: stored.get(base + truth, 0.0))
        for truth in cut:
            truths.pop(truth, None)
            if truth in words_of:
                words_of[truth].pop(word, None)
        self.counts.discard([base + truth for truth in cut])

    def _add_rule(self, level: tuple[str, str], rule: str, cut: bool = True) -> bool:
        """Note a rule known at a level; whether it is new there (the level is cut back to its budget when
        ``cut`` and over it)."""
        rules = self._rules.setdefault(level, set())
        if rule in rules:
            return False
        rules.add(rule)
        self._rule_levels[rule] = self._rule_levels.get(rule, 0) + 1
        self._rule_generation[level] = self._rule_generation.get(level, 0) + 1
        if cut:
            self._cut_rules(level)
        return True

    def _cut_values(self, level: tuple[str, str]) -> None:
        """Cut the parameter's stored values back to their budget, keeping the most used (absence always)."""
        values = self._values.get(level)
        if not values or not over(len(values), VALUES_PER_PARAMETER):
            return
        stored = self.counts.stored()
        prefix = SEP.join(("c", *level, ""))
        cut = weakest([v for v in values if v != ABSENT_KEY], VALUES_PER_PARAMETER,
                      lambda truth: stored.get(prefix + truth, 0.0))
        words_of = self._value_words.get(level, {})
        cues = self._cues.get(level, {})
        top = self._top.get(level, [])
        discarded = []
        forms = self._forms.get(level, {})
        for truth in cut:
            value_id = values.pop(truth).value_id
            kept = tuple(t for t in forms.get(value_id, ()) if t != truth)
            if kept:
                forms[value_id] = kept
            else:
                forms.pop(value_id, None)
            if truth in top:
                top.remove(truth)
            discarded.append(prefix + truth)
            for word in words_of.pop(truth, ()):
                discarded.append(SEP.join(("k", *level, word, truth)))
                if word in cues:
                    cues[word].pop(truth, None)
        self.counts.discard(discarded)
        self._value_generation[level] = self._value_generation.get(level, 0) + 1

    def _cut_cue_words(self, level: tuple[str, str]) -> None:
        """Cut the parameter's cue words back to their budget, keeping the most seen."""
        cues = self._cues.get(level)
        if not cues or not over(len(cues), CUE_WORDS_PER_PARAMETER):
            return
        stored = self.counts.stored()
        prefix = SEP.join(("k", *level, ""))
        words_of = self._value_words.get(level, {})
        discarded = []
        for word in weakest(cues, CUE_WORDS_PER_PARAMETER, lambda w: stored.get(prefix + w, 0.0)):
            discarded.append(prefix + word)
            for truth in cues.pop(word):
                discarded.append(prefix + word + SEP + truth)
                if truth in words_of:
                    words_of[truth].pop(word, None)
        self.counts.discard(discarded)

    def _level_score(self, level: tuple[str, str], rule: str) -> float:
        """What a rule's place at a level is decided by: its score for a tool's parameter, the Wilson bound
        of its own record at a wider level."""
        if level[0] != ANY:
            return self.rule_score(level[0], level[1], rule)
        base = SEP.join(("r", *level, rule, ""))
        return wilson_lower(self.counts.get(base + "s"), self.counts.get(base + "n"), self.z)

    def _cut_rules(self, level: tuple[str, str]) -> None:
        """Cut a level's rules back to its budget, keeping the best scored (the pseudo rules always)."""
        rules = self._rules.get(level)
        budget = GENERIC_RULES if level == (ANY, ANY) else RULES_PER_PARAMETER
        if not rules or not over(len(rules), budget):
            return
        cut = weakest(sorted(rules - PSEUDO_RULES), budget, lambda rule: self._level_score(level, rule))
        records = self._records.get(level, {})
        discarded = []
        for rule in cut:
            rules.discard(rule)
            for stored_key in (rule, rule + ORDINAL_MARK):
                records.pop(stored_key, None)
                base = SEP.join(("r", *level, stored_key, ""))
                discarded += [base + "s", base + "n"]
            left = self._rule_levels.get(rule, 1) - 1
            if left > 0:
                self._rule_levels[rule] = left
            else:
                self._rule_levels.pop(rule, None)
                self._parsed.pop(rule, None)
        self.counts.discard(discarded)
        self._rule_generation[level] = self._rule_generation.get(level, 0) + 1
        self._cut_generation[level] = self._cut_generation.get(level, 0) + 1

    def build_tables(self) -> None:
        """Work out the rule table of every parameter with rules of its own (after loading a store), so
        that no prediction pays for it."""
        for tool, param in list(self._rules):
            if tool != ANY:
                self._table(tool, param)

    def _rule(self, key: str) -> Rule | None:
        if key in PSEUDO_RULES:
            return None
        rule = self._parsed.get(key)
        if rule is None:
            rule = _parse_rule(key)
            if key in self._rule_levels:
                self._parsed[key] = rule
        return rule

    def _levels(self, tool: str, param: str, rule_key: str) -> list[tuple[str, str]]:
        levels = [(tool, param), (ANY, param)]
        rule = self._rule(rule_key)
        if rule is None or rule.generic:
            levels.append((ANY, ANY))
        return levels

    def _record(self, tool: str, param: str, rule_key: str, ordinal: bool = False) -> Record:
        """The counter keys of the rule's record for the parameter (worked out once); ``ordinal``: for a
        message naming an ordinal (a record apart for a positional rule)."""
        records = self._records.setdefault((tool, param), {})
        stored_key = rule_key + ORDINAL_MARK if ordinal else rule_key
        record = records.get(stored_key)
        if record is not None:
            return record
        if len(records) > MAX_RECORDS:
            records.clear()  # keys of rules since cut at a wider level: worked out again when asked
        if ordinal and not positional(self._rule(rule_key)):
            record = records[stored_key] = self._record(tool, param, rule_key)  # one record in every message
            return record
        pairs = []
        for level in self._levels(tool, param, rule_key):
            base = SEP.join(("r", *level, stored_key))
            pairs.append((base + SEP + "s", base + SEP + "n"))
        record = records[stored_key] = Record(pairs[0], tuple(reversed(pairs[1:])))
        return record

    def _score(self, record: Record, successes: float, stored: Mapping[str, float], scale: float) -> float:
        """Wilson lower bound of the record here (``successes`` already read), shrunk towards its record at
        each wider level. ``stored`` and ``scale`` are the counts' (:meth:`Counts.stored`)."""
        rate = DEFAULT_RATE
        for s_key, n_key in record.wider:
            s = stored[s_key] * scale if s_key in stored else 0.0
            n = stored[n_key] * scale if n_key in stored else 0.0
            rate = (s + PRIOR_WEIGHT * rate) / (n + PRIOR_WEIGHT)
        n_key = record.here[1]
        trials = stored[n_key] * scale if n_key in stored else 0.0
        return wilson_lower(successes + PRIOR_WEIGHT * rate, trials + PRIOR_WEIGHT, self.z)

    def rule_score(self, tool: str, param: str, rule_key: str) -> float:
        """Wilson lower bound of the rule's record here, shrunk towards its record elsewhere."""
        record = self._record(tool, param, rule_key)
        return self._score(record, self.counts.get(record.here[0]), self.counts.stored(), self.counts.scale)

    def _best_rules(self, tool: str, param: str, keys: set[str]) -> set[str]:
        """``keys``, or when there are more than :data:`MAX_TABLE_RULES` of them, the best scored ones (and
        the pseudo rules): a rule found by coincidence in a large output is then not replayed forever."""
        if len(keys) <= MAX_TABLE_RULES:
            return keys
        real = sorted(keys - PSEUDO_RULES)
        scores = {key: self.rule_score(tool, param, key) for key in real}
        real.sort(key=lambda key: -scores[key])  # stable: equal scores stay in key order
        return {*real[:MAX_TABLE_RULES], *(keys & PSEUDO_RULES)}

    def _table(self, tool: str, param: str) -> RuleTable:
        """The rules to try for the parameter, sorted, with the enum pseudo rule: those known here, else
        those known for the parameter name on any tool, the best :data:`MAX_TABLE_RULES` of them (kept
        until a rule is added or cut; a full table until :data:`REBUILD_AFTER` rules were added)."""
        level = (tool, param)
        rules_at = level if self._rules.get(level) else (ANY, param)
        generation = self._rule_generation.get(rules_at, 0)
        version = (rules_at, generation, self._cut_generation.get(rules_at, 0))
        cached = self._tables.get(level)
        if cached is not None and cached[0][:1] == version[:1] and cached[0][2] == version[2] and (
                len(cached[1].keys) >= MAX_TABLE_RULES and generation - cached[0][1] < REBUILD_AFTER):
            return cached[1]  # a full table: rules added since (tried when learning) enter at the next rebuild
        if cached is None or cached[0] != version:
            keys = tuple(sorted({*self._best_rules(tool, param, self._rules.get(rules_at, set())), ENUM_RULE,
                                 ENUM_FIRST_RULE}))
            rules = tuple(self._rule(key) for key in keys)
            table = RuleTable(keys, rules, tuple(self._record(tool, param, key) for key in keys),
                              tuple(self._record(tool, param, key, True) for key in keys),
                              tuple(i for i, rule in enumerate(rules) if rule is None))
            cached = self._tables[level] = (version, table)
        return cached[1]
