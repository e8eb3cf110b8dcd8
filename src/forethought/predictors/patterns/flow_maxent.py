"""A discriminative next-tool scorer: a sparse log-linear model over the step's context, learned online.

The count-based features of :mod:`flow` each look at one thing (the last calls, the message's words, the
tools already called); their combination is one weight per feature, the same for every tool. What they
cannot say is *which* tool a given piece of context favours over the others once the rest is known: "the
message says *book* and the last call was a lookup" is not the sum of the two. This model learns that
directly: one weight per (context feature, tool), trained by online softmax regression on every observed
call (the gradient of the log-probability of the tool that came, over the tools offered).

Context features (indicators, nothing known about any tool or workload): a bias; the last call token
(its name and ok/error outcome, or the turn-start marker) and the last two; each content word of the
message (or, with no user text, of the latest call and output); each word at a turn's start; each tool
called earlier in the session and each called already in this turn; how many calls the turn has had (0,
1, 2, 3 or more: which tools come first, second, later). Its log-probabilities feed
:mod:`flow`'s softmax as one more feature (``maxent``), whose weight is learned like the others.

Weights live in the predictor's :class:`~forethought.predictors.patterns.counts.Counts` as plain
(never decayed) counters, so they are saved, merged and reloaded like everything else. The features with
weights have a budget (:data:`~forethought.predictors.patterns.budgets.SCORER_FEATURES`): those used least
recently in a step are cut, their weights discarded (a word seen once in a while does not keep a row). A step updates
only the tools that matter to its gradient: the one called and those the model gave at least
:data:`UPDATE_FLOOR` of probability.

One online pass is little data for a discriminative model, so after each step the scorer *rehearses*: it
takes :data:`REHEARSE_STEPS` more steps on calls it learned earlier (kept in a bounded memory, drawn by a
seeded generator: the same calls give the same weights in every process), as further passes over the data
would. The memory is not saved in a store (a scorer loaded from one scores as the one saved, and rehearses
what it learns from then on); a copy or a pickle of the predictor carries it (:meth:`ToolScorer.rehearsal`),
so a worker restarted from a checkpoint learns on exactly as the one it replaces.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from forethought.predictors.patterns.budgets import SCORER_FEATURES, over, weakest
from forethought.predictors.patterns.counts import PLAIN_PREFIX, Counts

SEP = "\x1f"
PREFIX = PLAIN_PREFIX + "M"
LEARNING_RATE = 0.5
"""Step size per (feature, tool) weight, divided by the root of the number of active features (a step
then moves a logit by about LEARNING_RATE * sqrt(features), whatever the message's length)."""
UPDATE_FLOOR = 1e-3
"""Tools given less probability than this are not updated (their gradient is negligible)."""
UPDATE_RIVALS = 32
"""Besides the tool called, only the most probable others are pushed down (at most this many: a step's cost
is bounded however many tools are offered)."""
LOG_FLOOR = math.log(UPDATE_FLOOR)
MAX_WORDS = 24
"""Words of a message used as features (in sorted order)."""
TURN_POSITIONS = 3
"""Calls of the turn so far told apart by the turn-position feature (more count as this many)."""
REHEARSE_STEPS = 8
"""Steps on earlier calls taken after each call learned (BFCL, both folds, exact top-1 / top-3 at learning
rate 0.5: 0 steps 0.589 / 0.711, 4: 0.595 / 0.719, 8: 0.597 / 0.721, 16: 0.596 / 0.722; docs/patterns.md)."""
REHEARSE_MEMORY = 4096
"""Calls kept for rehearsal (the oldest are overwritten): memory and cost bounded however long it runs."""
REHEARSE_SEED = 0


def context_features(tokens: Sequence[str], words: frozenset[str], turn_start: bool,
                     session_tools: frozenset[str], turn_calls: Sequence[str]) -> tuple[str, ...]:
    """The indicator features of one step (see the module's docstring)."""
    feats = ["b"]
    if tokens:
        feats.append("p1" + SEP + tokens[-1])
        if len(tokens) > 1:
            feats.append("p2" + SEP + tokens[-2] + SEP + tokens[-1])
    chosen = sorted(words)[:MAX_WORDS]
    feats.extend("w" + SEP + w for w in chosen)
    if turn_start:
        feats.extend("ws" + SEP + w for w in chosen)
    feats.append("tp" + SEP + str(min(len(turn_calls), TURN_POSITIONS)))
    feats.extend("s" + SEP + t for t in sorted(session_tools))
    feats.extend("i" + SEP + t for t in sorted(set(turn_calls)))
    return tuple(feats)


class ToolScorer:
    """Per (context feature, tool) weights; log-probabilities of candidate tools; online updates.

    The weights are counters (saved and merged like every other); a mirror holds each feature's weights
    as one row indexed by tool, so that a step's logits are a column sum of a few rows (done by built-ins,
    not a Python loop per weight)."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self._column: dict[str, int] = {}
        """tool -> its place in every row."""
        self._rows: dict[str, list[float]] = {}
        """feature -> its weights by tool column (columns past the row's end are 0)."""
        self._memory: list[tuple[tuple[str, ...], tuple[str, ...], str]] = []
        """Calls learned, for rehearsal: (features, candidates, tool called); a ring of REHEARSE_MEMORY."""
        self._remembered = 0
        self._draw = random.Random(REHEARSE_SEED)
        self._last_pool: tuple[str, ...] = ()
        self._steps = 0
        self._used: dict[str, int] = {}
        """feature -> the step that last updated its weights (features loaded from a store: 0)."""

    def _place(self, tool: str) -> int:
        column = self._column.get(tool)
        if column is None:
            column = self._column[tool] = len(self._column)
        return column

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store (the mirror takes the counter's value)."""
        if key.startswith(PREFIX + SEP):
            parts = key.split(SEP)
            if len(parts) >= 3:
                self._set(SEP.join(parts[1:-1]), self._place(parts[-1]), self.counts.get(key))

    def _set(self, feat: str, column: int, value: float) -> None:
        row = self._rows.get(feat)
        if row is None:
            row = self._rows[feat] = []
            self._used.setdefault(feat, 0)
        if len(row) <= column:
            row.extend([0.0] * (column + 1 - len(row)))
        row[column] = value

    def _logits(self, feats: Sequence[str], candidates: Sequence[str]) -> dict[str, float]:
        rows = self._rows
        found = [row for feat in feats if (row := rows.get(feat)) is not None]
        totals = list(map(sum, itertools.zip_longest(*found, fillvalue=0.0))) if found else []
        width = len(totals)
        column = self._column
        return {t: float(totals[c]) if (c := column.get(t, width)) < width else 0.0 for t in candidates}

    def log_probs(self, feats: Sequence[str], candidates: Sequence[str]) -> dict[str, float]:
        """Log-probability of each candidate being called next."""
        if not candidates:
            return {}
        logits = self._logits(feats, candidates)
        top = max(logits.values())
        log_total = top + math.log(sum(math.exp(v - top) for v in logits.values()))
        return {t: v - log_total for t, v in logits.items()}

    def learn(self, feats: Sequence[str], candidates: Sequence[str], tool: str,
              log_probs: Mapping[str, float] | None = None) -> None:
        """One gradient step of the log-probability of ``tool`` (called in a step with ``feats``), on the
        tool and its :data:`UPDATE_RIVALS` most probable rivals. ``log_probs``: :meth:`log_probs` of
        ``feats`` over the candidates and ``tool``, when already worked out."""
        logs = log_probs if log_probs is not None else self.log_probs(feats, list(dict.fromkeys([*candidates, tool])))
        step = LEARNING_RATE / math.sqrt(max(1, len(feats)))
        rivals = sorted(((-v, t) for t, v in logs.items() if t != tool and v >= LOG_FLOOR))[:UPDATE_RIVALS]
        updates = [(tool, (1.0 - math.exp(logs.get(tool, 0.0))) * step),
                   *((t, -math.exp(-neg) * step) for neg, t in rivals)]
        columns = [(t, self._place(t), delta) for t, delta in updates]
        width = max(column for _, column, _ in columns) + 1
        rows, used = self._rows, self._used
        self._steps += 1
        step_number = self._steps
        additions = []
        for feat in feats:
            used[feat] = step_number
            row = rows.get(feat)
            if row is None:
                row = rows[feat] = []
            if len(row) < width:
                row.extend([0.0] * (width - len(row)))
            base = PREFIX + SEP + feat + SEP
            for t, column, delta in columns:
                row[column] += delta
                additions.append((base + t, delta))
        self.counts.add_plain(additions)
        if over(len(rows), SCORER_FEATURES):
            self.keep_budget()

    def keep_budget(self) -> None:
        """Cut the features with weights back to :data:`~.budgets.SCORER_FEATURES` when over it, keeping
        those used most recently; their weights are discarded."""
        rows, used = self._rows, self._used
        if not over(len(rows), SCORER_FEATURES):
            return
        tools = sorted(self._column, key=self._column.__getitem__)
        discarded = []
        for feat in weakest(rows, SCORER_FEATURES, lambda f: float(used.get(f, 0))):
            width = len(rows.pop(feat))
            used.pop(feat, None)
            base = PREFIX + SEP + feat + SEP
            discarded += [base + tool for tool in tools[:width]]
        self.counts.discard(discarded)

    def rehearse(self, feats: Sequence[str], candidates: Sequence[str], tool: str,
                 steps: int | None = None) -> None:
        """Remember one call just learned (``tool``, called in a step with ``feats`` among ``candidates``),
        then take ``steps`` (default :data:`REHEARSE_STEPS`) steps of :meth:`learn` on remembered calls drawn
        at random (this one included)."""
        pool = tuple(dict.fromkeys([*candidates, tool]))
        if pool == self._last_pool:
            pool = self._last_pool  # one object for the steps of one tool set (a pickle stores it once)
        self._last_pool = pool
        example = (tuple(map(sys.intern, feats)), pool, tool)
        memory = self._memory
        if len(memory) < REHEARSE_MEMORY:
            memory.append(example)
        else:
            memory[self._remembered % REHEARSE_MEMORY] = example
        self._remembered += 1
        for _ in range(REHEARSE_STEPS if steps is None else steps):
            old_feats, old_candidates, old_tool = memory[self._draw.randrange(len(memory))]
            self.learn(old_feats, old_candidates, old_tool)

    def rehearsal(self) -> tuple[Any, ...]:
        """What rehearsal and the feature budget depend on besides the weights (the calls remembered, where
        the ring is, the generator's state, when each feature was last used), for :meth:`load_rehearsal` in
        a copy or an unpickled predictor."""
        return (list(self._memory), self._remembered, self._draw.getstate(), self._steps, dict(self._used))

    def load_rehearsal(self, state: tuple[Any, ...]) -> None:
        """Take over :meth:`rehearsal` of another scorer (one saved before the feature budget: the first
        three parts)."""
        memory, remembered, draw = state[:3]
        self._memory = [(tuple(f), tuple(c), t) for f, c, t in memory]
        self._remembered = int(remembered)
        self._draw.setstate(draw)
        if len(state) >= 5:
            self._steps = int(state[3])
            self._used.update({str(f): int(n) for f, n in state[4].items() if f in self._rows})

    @property
    def remembered(self) -> int:
        """Calls kept for rehearsal."""
        return len(self._memory)

    def weights(self, feat: str) -> Mapping[str, float]:
        """The weights of one feature, by tool (for tests and inspection), read from the counters."""
        row = self._rows.get(feat, [])
        return {t: self.counts.get(PREFIX + SEP + feat + SEP + t)
                for t, column in sorted(self._column.items()) if column < len(row)}

    def mirrored(self, feat: str) -> Mapping[str, float]:
        """The mirror's weights of one feature, by tool (equal to :meth:`weights`; for tests)."""
        row = self._rows.get(feat, [])
        return {t: row[column] for t, column in sorted(self._column.items()) if column < len(row)}
