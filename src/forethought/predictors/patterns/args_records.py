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

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from forethought.predictors.patterns.args_keys import ANY, ENUM_FIRST_RULE, ENUM_RULE, ORDINAL_MARK, PSEUDO_RULES, SEP
from forethought.predictors.patterns.counts import Counts, wilson_lower
from forethought.predictors.patterns.derive_rule import Rule

PRIOR_WEIGHT = 2.0
DEFAULT_RATE = 0.2
MAX_TABLE_RULES = 48
"""Rules replayed per parameter (the best scored): outputs full of common values breed many rules."""


@dataclass(frozen=True, slots=True)
class Record:
    """Counter keys of a rule's record for one parameter: (successes, trials) here, and at each wider level
    it is shrunk towards, widest first."""

    here: tuple[str, str]
    wider: tuple[tuple[str, str], ...]


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


_parse_rule = functools.lru_cache(maxsize=1 << 15)(Rule.from_key)
"""Rules are values: one parse per rule key and process, shared by every model (and copy)."""


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
        self._values: dict[tuple[str, str], set[str]] = {}
        self._cues: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._params: dict[str, set[str]] = {}
        self._parsed: dict[str, Rule] = {}
        self._records: dict[tuple[str, str], dict[str, Record]] = {}
        self._tables: dict[tuple[str, str], tuple[tuple[tuple[str, str], int], RuleTable]] = {}

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store."""
        parts = key.split(SEP)
        if parts[0] == "r" and len(parts) == 5 and parts[3].endswith(ORDINAL_MARK):
            return  # the record of a known rule, for messages naming an ordinal
        if parts[0] == "r" and len(parts) == 5:
            self._rules.setdefault((parts[1], parts[2]), set()).add(parts[3])
            if parts[3] not in self._parsed and parts[3] not in PSEUDO_RULES:
                with contextlib.suppress(ValueError, TypeError):  # an unreadable rule fails where it is used
                    self._parsed[parts[3]] = _parse_rule(parts[3])
            if parts[1] != ANY:
                self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "c" and len(parts) == 4:
            self._values.setdefault((parts[1], parts[2]), set()).add(parts[3])
            self._params.setdefault(parts[1], set()).add(parts[2])
        elif parts[0] == "k" and len(parts) == 5:
            self._cues.setdefault((parts[1], parts[2]), {}).setdefault(parts[3], set()).add(parts[4])

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
            rule = self._parsed[key] = _parse_rule(key)
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
        until a rule is added)."""
        level = (tool, param)
        rules_at = level if self._rules.get(level) else (ANY, param)
        version = (rules_at, len(self._rules.get(rules_at, ())))
        cached = self._tables.get(level)
        if cached is None or cached[0] != version:
            keys = tuple(sorted({*self._best_rules(tool, param, self._rules.get(rules_at, set())), ENUM_RULE,
                                 ENUM_FIRST_RULE}))
            rules = tuple(self._rule(key) for key in keys)
            table = RuleTable(keys, rules, tuple(self._record(tool, param, key) for key in keys),
                              tuple(self._record(tool, param, key, True) for key in keys),
                              tuple(i for i, rule in enumerate(rules) if rule is None))
            cached = self._tables[level] = (version, table)
        return cached[1]
