"""How the argument model names what it counts: counter keys, the absent key, the pseudo rules' keys.

Every statistic of :mod:`~forethought.predictors.patterns.args` is a counter whose key joins its parts with
:data:`SEP`: ``r`` (a rule's record: tool, parameter, rule key, ``s`` successes or ``n`` trials), ``c`` (a
stored value: tool, parameter, value key) and ``k`` (a cue word: tool, parameter, word, value key). A
parameter left out is stored as :data:`ABSENT_KEY`; a record kept apart for messages naming an ordinal
ends its rule key with :data:`ORDINAL_MARK`. The pseudo rules (values the message mentions, with no
derivation rule behind them) have rule keys of their own (:data:`PSEUDO_RULES`), stored like any other.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from forethought.predictors.patterns.derive_values import value_key

SEP = "\x1f"
ANY = "*"
ABSENT_KEY = "\x00absent"
"""Value key recorded when an optional parameter is left out."""
ENUM_RULE = '["enum"]'
VOCAB_RULE = '["vocab"]'
ENUM_FIRST_RULE = '["enum","first"]'
VOCAB_FIRST_RULE = '["vocab","first"]'
"""Pseudo rules: an allowed value (``enum``) or a value used before (``vocab``) that the message mentions,
the one mentioned last or (``first``) first: "from LAX to JFK" names two values of one vocabulary."""
ABBR_RULE = '["abbr"]'
ABBR_FIRST_RULE = '["abbr","first"]'
"""Pseudo rules: a code (an allowed value, a value used before, or an item of a recent output's list)
that abbreviates a name of the message, the last such name or (``first``) the first (:mod:`mentions`)."""
GLOSS_RULE = '["enum","gloss"]'
GLOSS_FIRST_RULE = '["enum","gloss first"]'
GLOSS_UNUSED_RULE = '["enum","gloss unused"]'
"""Pseudo rules (allowed values stated in prose, so reported as ``enum``): a value the parameter's
description glosses ("'l' for lines", :func:`~forethought.predictors.patterns.mentions.glosses`) whose
gloss the message mentions, the one mentioned last, or (``first``) first, or (``unused``) the first not yet
passed to the parameter this turn ("the lines, words, and characters": one call each)."""
PSEUDO_RULES = frozenset((ENUM_RULE, VOCAB_RULE, ENUM_FIRST_RULE, VOCAB_FIRST_RULE, ABBR_RULE, ABBR_FIRST_RULE,
                          GLOSS_RULE, GLOSS_FIRST_RULE, GLOSS_UNUSED_RULE))
ORDINAL_MARK = "\x1eord"
"""Suffix of the record of a rule reading a fixed list position, kept apart for messages that name an
ordinal ("the first one"): there a fixed position is a different bet
(:func:`~forethought.predictors.patterns.args_records.positional`)."""
MUTABLE = object()
"""Stands for a list or object value, which is parsed afresh for every use."""


@functools.lru_cache(maxsize=8192)
def parse_constant(truth: str) -> tuple[Any, str]:
    """A stored value key parsed: the value (:data:`MUTABLE` for a list or object) and its key."""
    value = json.loads(truth)
    return (MUTABLE if isinstance(value, list | dict) else value), value_key(value)
