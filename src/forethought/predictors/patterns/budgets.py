"""Budgets: how much the pattern predictor remembers, table by table, so its memory is flat after warm-up.

Every table that grows with what is observed has a budget here: the values stored per parameter, the cue
words counted per parameter, the rules kept per parameter, the message words the flow model associates
with tools, the scorer's context features, the n-gram contexts, and the recent observations kept to score
new rules on. A table may grow to :data:`SLACK` times its budget; then it is cut back to its budget,
keeping the entries with the most evidence (:func:`weakest` gives the others: least evidence first, ties
by key, so every process cuts the same way). A cut sorts one table, once per budget's worth of additions:
its cost, spread over those additions, is constant, and no table's size depends on the number of sessions
seen. What is cut is forgotten: its counters are discarded (:meth:`Counts.discard
<forethought.predictors.patterns.counts.Counts.discard>`), and deleted from a store that can at the next
save. An entry cut and seen again starts afresh.

Caches of what was worked out from a text or an output (:mod:`derive_outputs`, :mod:`derive_index`,
:mod:`derive_time`) are bounded where they are defined, by count or by bytes, and never hold a session's
outputs beyond them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

SLACK = 2
"""A table is cut when it holds more than this many times its budget."""

VALUES_PER_PARAMETER = 64
"""Values (constants) stored per (tool, parameter): the most used. Values used once each (ids, names)
come and go; values used again stay."""
CUE_WORDS_PER_PARAMETER = 256
"""Message words counted per (tool, parameter) as cues for its constants: the most seen with it."""
VALUES_PER_CUE_WORD = 4
"""Values counted with one cue word of a parameter: those seen with it most (a word seen with many values
names none of them)."""
TOP_VALUES = 8
"""Stored values of a parameter offered as constants on their own share of its uses: the most used (a value
the message cues, or that a rule derives, is offered too)."""
RULES_PER_PARAMETER = 192
"""Derivation rules kept per (tool, parameter) and per parameter name on any tool: the best scored (four
times the rules replayed per parameter, so a rule has room to earn its place)."""
GENERIC_RULES = 1024
"""Rules kept at the widest level (any tool, any parameter), the best scored."""
FLOW_WORDS = 4096
"""Message words the flow model associates with tools: the most seen."""
SCORER_FEATURES = 4096
"""Context features of the discriminative scorer with learned weights: the most recently used."""
NGRAM_CONTEXTS = 8192
"""Call contexts (the last 1 to 3 calls) with counts of the tool that followed: the most seen."""
RECENT_OBSERVATIONS = 2048
"""Points of sessions kept, over all parameters, to score a rule found later on (each holds its session's
calls so far, outputs included)."""

K = TypeVar("K")


def over(size: int, budget: int) -> bool:
    """Whether a table of ``size`` entries must be cut back to ``budget``."""
    return size > budget * SLACK


def weakest(keys: Iterable[K], budget: int, evidence: Callable[[K], float],
            order: Callable[[K], str] = str) -> list[K]:
    """The keys to cut so that ``budget`` remain: least ``evidence`` first, ties by ``order`` (the keys'
    text: deterministic in every process). Nothing when there are ``budget`` or fewer."""
    ranked = sorted(keys, key=lambda key: (evidence(key), order(key)))
    return ranked[: max(0, len(ranked) - budget)]
