"""The argument model's pseudo rules: values the message mentions, with no derivation rule behind them.

Four kinds, each the value mentioned last or (``first``) first (:data:`~.args_keys.PSEUDO_RULES`): an
allowed value of the schema (``enum``); a value used before for the parameter (``vocab``); a code that
abbreviates a name of the message (``abbr``: codes of the schema's enum, the parameter's past values and
the lists of the recent outputs); and a value the parameter's description glosses ("'l' for lines") whose
gloss the message names (``gloss``, also ``unused``: the first not yet passed to the parameter this turn).
Each learns its record like a rule (:mod:`args_records`); the forms of the known values are worked out
once per parameter and kept until a value is stored or cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.predictors.patterns.args_keys import (
    ABBR_FIRST_RULE,
    ABBR_RULE,
    ENUM_FIRST_RULE,
    ENUM_RULE,
    GLOSS_FIRST_RULE,
    GLOSS_RULE,
    GLOSS_UNUSED_RULE,
    VOCAB_FIRST_RULE,
)
from forethought.predictors.patterns.args_records import RuleRecords
from forethought.predictors.patterns.counts import Counts
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.mentions import abbreviated, glosses, is_code
from forethought.predictors.patterns.mentions import mention_forms as _mention_forms
from forethought.predictors.patterns.mentions import mentioned as _mentioned


class PseudoRules(RuleRecords):
    """What the pseudo rules give for a parameter at one point of a session."""

    def __init__(self, counts: Counts, z: float = 1.0) -> None:
        super().__init__(counts, z)
        self._vocab: dict[tuple[str, str], tuple[int, tuple[tuple[str, str], ...]]] = {}
        self._enums: dict[tuple[str, str], tuple[list[Any], tuple[tuple[str, str], ...]]] = {}
        self._code_cache: dict[tuple[str, str], tuple[int, Any, tuple[str, ...]]] = {}

    def _vocabulary(self, tool: str, param: str) -> tuple[tuple[str, str], ...]:
        """The values used before for the parameter that a message can mention, with their words (as
        :func:`_mention_forms` gives them), in the order stored; kept until a value is stored or cut."""
        generation = self._value_generation.get((tool, param), 0)
        cached = self._vocab.get((tool, param))
        if cached is None or cached[0] != generation:
            values = self._values.get((tool, param), {})
            forms = tuple((v.value, v.form) for v in values.values() if v.form is not None)
            cached = self._vocab[(tool, param)] = (generation, forms)
        return cached[1]

    def _enum(self, tool: str, param: str, enum: list[Any]) -> tuple[tuple[str, str], ...]:
        """The schema's allowed values, as :func:`_mention_forms` (kept while the schema is the same)."""
        cached = self._enums.get((tool, param))
        if cached is None or cached[0] is not enum:
            cached = self._enums[(tool, param)] = (enum, _mention_forms(enum))
        return cached[1]

    def _codes(self, tool: str, param: str, schema: Mapping[str, Any]) -> tuple[str, ...]:
        """The codes of the parameter's allowed values and of the values used before (kept until they
        change)."""
        generation = self._value_generation.get((tool, param), 0)
        enum = schema.get("enum")
        cached = self._code_cache.get((tool, param))
        if cached is None or cached[0] != generation or cached[1] is not enum:
            codes = [v for v in enum if is_code(v)] if isinstance(enum, list) else []
            codes += [v.value for v in self._values.get((tool, param), {}).values() if v.code]
            cached = self._code_cache[(tool, param)] = (generation, enum, tuple(dict.fromkeys(codes)))
        return cached[2]

    def _pseudo(self, key: str, tool: str, param: str, schema: Mapping[str, Any], sources: Sources) -> Any:
        if key in (ABBR_RULE, ABBR_FIRST_RULE):
            names = sources.names()
            if not names:
                return None
            codes = self._codes(tool, param, schema)
            listed = sources.listed_codes()
            return abbreviated(tuple(dict.fromkeys((*codes, *listed))) if listed else codes, names,
                               key == ABBR_FIRST_RULE)
        first = key in (ENUM_FIRST_RULE, VOCAB_FIRST_RULE, GLOSS_FIRST_RULE)
        if key in (GLOSS_RULE, GLOSS_FIRST_RULE, GLOSS_UNUSED_RULE):
            description = schema.get("description")
            found = glosses(description) if isinstance(description, str) else ()
            if found and key == GLOSS_UNUSED_RULE:
                found = tuple(form for form in found if not sources.used_for(form[0], param))
                first = True
            return _mentioned(found, sources.user_message, first) if found else None
        if key in (ENUM_RULE, ENUM_FIRST_RULE):
            enum = schema.get("enum")
            return (_mentioned(self._enum(tool, param, enum), sources.user_message, first)
                    if isinstance(enum, list) else None)
        return _mentioned(self._vocabulary(tool, param), sources.user_message, first)

    def _pseudo_keyed(self, key: str, tool: str, param: str, schema: Mapping[str, Any], sources: Sources
                      ) -> tuple[Any, str] | None:
        value = self._pseudo(key, tool, param, schema, sources)
        return None if value is None else (value, value_key(value))
