"""Control flow: which tool comes next, learned from the tool sequences and user words of past sessions.

Each candidate tool gets a few features, combined by a small softmax whose weights are learned online
(AdaGrad steps, so features of any scale learn at comparable rates):

* ``ngram``: log-probability of the tool after the last k calls (names and ok/error outcomes, with a
  turn-start marker), k = 1..order, interpolated Witten-Bell style so short contexts back off to longer
  evidence smoothly and a context seen once does not dominate;
* ``maxent``: the log-probability the discriminative scorer of :mod:`flow_maxent` gives the tool (one
  learned weight per context feature and tool: last calls, words, tools called in the session and turn,
  the turn's position; rehearsing earlier calls after each one);
* ``assoc`` / ``assoc_start``: how strongly the words of the latest user message go with the tool being
  used in that turn (smoothed pointwise mutual information), and the same at the start of a turn;
* ``assoc_first``: at the start of a turn, how strongly the message's words go with the tool being the
  turn's *first* call (a turn's words name all its tools; this tells which one comes first);
* ``name_match``: the share of the tool's name words that occur in the user message (works for tools never
  seen before);
* ``desc_match``: at the start of a turn, how well the message's words pick out the tool by its description
  (:mod:`describe`: idf-weighted over the tools offered; 0 when the tools come without descriptions);
* ``in_turn`` / ``repeat``: whether the tool was already called in this turn / is the last call;
* ``unseen``: the tool has never been observed.

All counts are decayed counters (:mod:`pattern_counts`), so the model follows a workload that drifts.
The words associated with tools and the call contexts counted have budgets (:mod:`budgets`): the most
seen are kept, the others cut with their counters.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from forethought.predictors.patterns.budgets import FLOW_WORDS, NGRAM_CONTEXTS, over, weakest
from forethought.predictors.patterns.counts import PLAIN_PREFIX, Counts
from forethought.predictors.patterns.describe import description_match
from forethought.predictors.patterns.flow_maxent import ToolScorer, context_features
from forethought.predictors.patterns.text import name_words

SEP = "\x1f"
TURN_MARK = "^"
START_MARK = "<s>"
ERROR_MARK = "!"

_NO_TOOLS: frozenset[str] = frozenset()
FEATURES = ("ngram", "maxent", "assoc", "assoc_start", "assoc_first", "name_match", "in_turn", "repeat", "unseen",
            "desc_match")
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "ngram": 1.0, "maxent": 0.5, "assoc": 1.0, "assoc_start": 0.5, "assoc_first": 0.5, "name_match": 2.0,
    "desc_match": 1.0, "in_turn": -0.5, "repeat": -0.5, "unseen": 0.0,
}
"""Starting weights: a sensible predictor before anything is learned."""

_WEIGHT_KEYS = {feature: PLAIN_PREFIX + SEP.join(("W", feature)) for feature in FEATURES}
"""Counter key of each feature's learned weight offset."""
_SQUARES_KEYS = {feature: SEP.join(("G", feature)) for feature in FEATURES}
"""Counter key of the (decayed) sum of each feature's squared gradients, which sets its step size."""
LEARNING_RATE = 0.1
"""Step size of the weights, divided per feature by the root of its squared gradients so far (AdaGrad;
over a decayed window, so a drifting workload keeps learning)."""
ADAGRAD_START = 1.0
"""Squared gradients a feature is taken to have had before any (the first steps are LEARNING_RATE at most)."""
ASSOC_SMOOTHING = 2.0
ASSOC_TOP_WORDS = 4
NGRAM_FLOOR = 1e-4


@dataclass(frozen=True, slots=True)
class FlowView:
    """What the control-flow model looks at: recent call tokens, user words, this turn's calls."""

    tokens: tuple[str, ...]
    words: frozenset[str]
    turn_calls: tuple[str, ...]
    session_tools: frozenset[str] = frozenset()
    """The tools called so far in the session."""
    descriptions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Tool name -> the words of its description (:func:`describe.description_words`)."""

    @property
    def turn_start(self) -> bool:
        return not self.turn_calls


def call_token(name: str, ok: bool) -> str:
    """The token of one call in a context: its tool name, marked when it failed."""
    return name if ok else name + ERROR_MARK


def _ngram_key(context: Sequence[str], tool: str | None = None) -> str:
    parts = ["n", *context] if tool is None else ["n", *context, "=" + tool]
    return SEP.join(parts)


class FlowModel:
    """Scores candidate next tools; learns from each observed call."""

    def __init__(self, counts: Counts, order: int = 3) -> None:
        if order < 1:
            raise ValueError("order must be at least 1")
        self.counts = counts
        self.order = order
        self._followers: dict[str, dict[str, None]] = {}
        """n-gram context key -> tools counted after it (every other tool's count there is 0)."""
        self._word_tools: dict[str, dict[str, None]] = {}
        """user word -> tools counted in a turn with it (every other tool's joint count is 0); every word
        counted is a key (the words' table, whose budget is :data:`~.budgets.FLOW_WORDS`)."""
        self._word_firsts: dict[str, dict[str, None]] = {}
        """user word -> tools counted as the first call of a turn with it."""
        self.maxent = ToolScorer(counts)
        self._known: set[str] = set()
        self._tools: dict[str, tuple[str, str, frozenset[str], int]] = {}
        self._word_keys: dict[str, tuple[str, str]] = {}
        """user word -> the key of its count and the prefix of its joint counts' keys."""
        self._last_rows: tuple[FlowView, tuple[str, ...], int, dict[str, tuple[float, ...]]] | None = None
        """The rows of the latest ranking (view, candidates, counts version, rows): learning the call that
        follows a prediction reuses them while no counter changed."""
        self._name_matches: tuple[frozenset[str], dict[str, float]] = (frozenset(), {})
        """The words of the latest message ranked for, and each tool's name_match feature with them."""

    @property
    def known_tools(self) -> frozenset[str]:
        """Every tool observed so far."""
        return frozenset(self._known)

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store."""
        if key.startswith(PLAIN_PREFIX):
            self.maxent.register(key)
            return
        parts = key.split(SEP)
        if parts[0] == "n" and len(parts) >= 2 and parts[-1].startswith("="):
            self._followers.setdefault(SEP.join(parts[:-1]), {})[parts[-1][1:]] = None
        elif parts[0] == "t" and len(parts) == 2:
            self._known.add(parts[1])
            self._info(parts[1])
        elif parts[0] == "w" and len(parts) == 3:
            self._word_tools.setdefault(parts[1], {})[parts[2]] = None
        elif parts[0] == "w" and len(parts) == 2:
            self._word_tools.setdefault(parts[1], {})
        elif parts[0] == "wf" and len(parts) == 3:
            self._word_tools.setdefault(parts[1], {})
            self._word_firsts.setdefault(parts[1], {})[parts[2]] = None

    def keep_budgets(self) -> None:
        """Cut the words and the call contexts back to their budgets when over them (after loading a store,
        which may hold more; learning keeps them so)."""
        self._cut_words()
        self._cut_contexts()
        self.maxent.keep_budget()

    def _cut_words(self) -> None:
        """Cut the words associated with tools back to :data:`~.budgets.FLOW_WORDS`, keeping the most seen
        at a turn's start."""
        if not over(len(self._word_tools), FLOW_WORDS):
            return
        stored = self.counts.stored()
        discarded = []
        for word in weakest(self._word_tools, FLOW_WORDS, lambda w: stored.get(SEP.join(("w", w)), 0.0)):
            discarded.append(SEP.join(("w", word)))
            discarded += [SEP.join(("w", word, tool)) for tool in self._word_tools.pop(word)]
            discarded += [SEP.join(("wf", word, tool)) for tool in self._word_firsts.pop(word, ())]
            self._word_keys.pop(word, None)
        self.counts.discard(discarded)

    def _cut_contexts(self) -> None:
        """Cut the call contexts back to :data:`~.budgets.NGRAM_CONTEXTS`, keeping the most seen."""
        if not over(len(self._followers), NGRAM_CONTEXTS):
            return
        stored = self.counts.stored()
        discarded = []
        for base in weakest(self._followers, NGRAM_CONTEXTS, lambda key: stored.get(key, 0.0)):
            discarded.append(base)
            discarded += [base + SEP + "=" + tool for tool in self._followers.pop(base)]
        self.counts.discard(discarded)

    def _info(self, tool: str) -> tuple[str, str, frozenset[str], int]:
        """What is fixed about ``tool``: the keys of its call count and turn count, its name words and how
        many there are."""
        info = self._tools.get(tool)
        if info is None:
            words = frozenset(name_words(tool))
            info = self._tools[tool] = (SEP.join(("t", tool)), SEP.join(("tt", tool)), words, len(words))
        return info

    # --- features -------------------------------------------------------------------------------------

    def _contexts(self, tokens: Sequence[str]) -> list[tuple[str, ...]]:
        padded = (START_MARK,) * self.order + tuple(tokens)
        return [tuple(padded[len(padded) - k:]) for k in range(1, self.order + 1)]

    def _ngram(self, view: FlowView, candidates: Sequence[str]) -> dict[str, float]:
        stored, scale = self.counts.stored(), self.counts.scale
        get = self.counts.get
        total = get("N")
        vocab = max(1, len(self._known) + len(set(candidates) - self._known))
        info = self._tools
        probs = {t: ((stored[k] * scale if (k := (info[t] if t in info else self._info(t))[0]) in stored else 0.0)
                     + 1.0) / (total + vocab) for t in candidates}
        for context in self._contexts(view.tokens):
            base = _ngram_key(context)
            seen = get(base)
            followers = self._followers.get(base, ())
            n = len(followers)
            if seen <= 0 or n == 0:
                continue
            prefix = base + SEP + "="
            probs = {t: ((stored[k] * scale if t in followers and (k := prefix + t) in stored else 0.0) + n * p)
                     / (seen + n) for t, p in probs.items()}
        return probs

    def _word_counts(self, words: Iterable[str], first: bool = False
                     ) -> list[tuple[str, float, float, Collection[str]]]:
        """For each word seen at a turn start: the prefix of its joint keys, its count, the count plus the
        smoothing, and the tools counted with it (``first``: as the first call of the turn)."""
        stored, scale = self.counts.stored(), self.counts.scale
        keys = self._word_keys
        tools_of = self._word_firsts if first else self._word_tools
        out: list[tuple[str, float, float, Collection[str]]] = []
        for word in words:
            key, prefix = keys[word] if word in keys else (SEP.join(("w", word)), SEP.join(("w", word, "")))
            seen = stored[key] * scale if key in stored else 0.0
            if seen > 0:
                keys[word] = (key, prefix)  # only words counted before: as many as the counters hold
                if first:
                    prefix = "wf" + prefix[1:]
                out.append((prefix, seen, seen + ASSOC_SMOOTHING, tools_of.get(word, _NO_TOOLS)))
        return out

    def _maxent_features(self, view: FlowView) -> tuple[str, ...]:
        return context_features(view.tokens, view.words, view.turn_start, view.session_tools, view.turn_calls)

    def _assoc(self, candidates: Sequence[str], priors: Sequence[float],
               word_counts: Sequence[tuple[str, float, float, Collection[str]]]) -> list[float]:
        """Per candidate: the mean of the best :data:`ASSOC_TOP_WORDS` smoothed PMIs of its words."""
        stored, scale = self.counts.stored(), self.counts.scale
        smoothings = [ASSOC_SMOOTHING * prior for prior in priors]
        # Row-major, one row of len(word_counts) per tool.
        ratios = [((stored[k] * scale if tool in tools and (k := prefix + tool) in stored else 0.0) + smoothing)
                  / smoothed / prior
                  for tool, prior, smoothing in zip(candidates, priors, smoothings, strict=True)
                  for prefix, _, smoothed, tools in word_counts]
        pmis = list(map(math.log, ratios))
        width = len(word_counts)
        top = min(ASSOC_TOP_WORDS, width)
        out = []
        for row in range(len(candidates)):
            assoc = 0.0
            if top:
                values = pmis[row * width:(row + 1) * width]
                values.sort(reverse=True)
                assoc = sum(values[:top]) / top
            out.append(assoc)
        return out

    def _rows(self, view: FlowView, candidates: Sequence[str]) -> dict[str, tuple[float, ...]]:
        """Feature values of each candidate tool, in the order of :data:`FEATURES`."""
        ngram = self._ngram(view, candidates)
        stored, scale = self.counts.stored(), self.counts.scale
        spread = self.counts.get("T") + max(1, len(candidates))
        word_counts = self._word_counts(view.words)
        info = self._tools
        infos = [info[tool] if tool in info else self._info(tool) for tool in candidates]
        priors = [((stored[k] * scale if (k := tool_info[1]) in stored else 0.0) + 1.0) / spread for tool_info in infos]
        # Smoothed PMI of each word with each tool is log(q), q the ratio of joint to expected counts; the
        # feature is the mean of the best ASSOC_TOP_WORDS.
        assocs = self._assoc(candidates, priors, word_counts)
        turn_start = view.turn_start
        firsts = [0.0] * len(candidates)
        if turn_start:
            first_spread = self.counts.get("T") + max(1, len(candidates))
            first_priors = [((stored[k] * scale if (k := SEP.join(("tf", tool))) in stored else 0.0) + 1.0)
                            / first_spread for tool in candidates]
            firsts = self._assoc(candidates, first_priors, self._word_counts(view.words, first=True))
        maxent = self.maxent.log_probs(self._maxent_features(view), candidates)
        floored = [ngram[tool] if ngram[tool] > NGRAM_FLOOR else NGRAM_FLOOR for tool in candidates]
        next_logs = list(map(math.log, floored))
        if self._name_matches[0] is not view.words:
            self._name_matches = (view.words, {})
        name_matches = self._name_matches[1]
        last = view.turn_calls[-1] if view.turn_calls else None
        # The message describes the turn's task; later in the turn its words also describe calls made.
        described = description_match(view.words, view.descriptions, candidates) if turn_start else {}
        rows: dict[str, tuple[float, ...]] = {}
        for row, (tool, (_, _, words, word_count), next_log) in enumerate(zip(candidates, infos, next_logs,
                                                                              strict=True)):
            assoc = assocs[row]
            if tool not in name_matches:
                name_matches[tool] = len(words & view.words) / word_count if word_count else 0.0
            rows[tool] = (
                next_log,
                maxent[tool],
                assoc,
                assoc if turn_start else 0.0,
                firsts[row],
                name_matches[tool],
                1.0 if tool in view.turn_calls else 0.0,
                1.0 if tool == last else 0.0,
                0.0 if tool in self._known else 1.0,
                described.get(tool, 0.0),
            )
        return rows

    def features(self, view: FlowView, candidates: Sequence[str]) -> dict[str, dict[str, float]]:
        """Feature values of each candidate tool."""
        return {tool: dict(zip(FEATURES, row, strict=True)) for tool, row in self._rows(view, candidates).items()}

    def weight(self, feature: str) -> float:
        return DEFAULT_WEIGHTS[feature] + self.counts.get(_WEIGHT_KEYS[feature])

    def _softmax(self, rows: Mapping[str, Sequence[float]]) -> dict[str, float]:
        stored = self.counts.stored()  # weights are plain (never decayed) counters
        weights = [DEFAULT_WEIGHTS[f] + (stored[k] if (k := _WEIGHT_KEYS[f]) in stored else 0.0) for f in FEATURES]
        logits = {t: sum(map(operator.mul, weights, row)) for t, row in rows.items()}
        top = max(logits.values(), default=0.0)
        exps = dict(zip(logits, map(math.exp, [v - top for v in logits.values()]), strict=True))
        total = sum(exps.values()) or 1.0
        return {t: v / total for t, v in exps.items()}

    def rank(self, view: FlowView, candidates: Sequence[str]) -> list[tuple[str, float]]:
        """Candidate tools with their probability of being called next, most likely first."""
        if not candidates:
            return []
        rows = self._rows(view, candidates)
        self._last_rows = (view, tuple(candidates), self.counts.version, rows)
        ranked = sorted(self._softmax(rows).items())
        ranked.sort(key=operator.itemgetter(1), reverse=True)  # stable: equal probabilities stay by name
        return ranked

    # --- learning -------------------------------------------------------------------------------------

    def learn(self, view: FlowView, candidates: Sequence[str], tool: str) -> None:
        """Count one observed call (``tool``, made in ``view``) and take one gradient step on the weights."""
        pool = list(dict.fromkeys([*candidates, tool]))
        last = self._last_rows
        if (last is not None and last[0] is view and last[2] == self.counts.version
                and last[1] == tuple(pool)):
            rows = last[3]  # ranked just before, nothing learned since: the same rows
        else:
            rows = self._rows(view, pool)
        self._last_rows = None
        probs = self._softmax(rows)
        for i, feature in enumerate(FEATURES):
            expected = sum(probs[t] * rows[t][i] for t in pool)
            gradient = rows[tool][i] - expected
            if gradient:
                # AdaGrad: a feature's steps shrink with the squared gradients it has had, so features of
                # any scale (log-probabilities, shares, indicators) learn at comparable rates.
                squares = self.counts.get(_SQUARES_KEYS[feature]) + gradient * gradient
                self.counts.add(_SQUARES_KEYS[feature], gradient * gradient)
                self.counts.add(_WEIGHT_KEYS[feature], LEARNING_RATE * gradient / math.sqrt(ADAGRAD_START + squares))
        maxent_column = FEATURES.index("maxent")
        maxent_features = self._maxent_features(view)
        self.maxent.learn(maxent_features, pool, tool, {t: row[maxent_column] for t, row in rows.items()})
        self.maxent.rehearse(maxent_features, pool, tool)
        keys = ["N", self._info(tool)[0]]
        self._known.add(tool)
        for context in self._contexts(view.tokens):
            base = _ngram_key(context)
            keys.append(base)
            keys.append(_ngram_key(context, tool))
            self._followers.setdefault(base, {})[tool] = None
        if tool not in view.turn_calls:
            if view.turn_start:
                keys.append("T")
                keys.append(SEP.join(("tf", tool)))
                for word in view.words:
                    keys.append(SEP.join(("w", word)))
                    keys.append(SEP.join(("wf", word, tool)))
                    self._word_tools.setdefault(word, {})
                    self._word_firsts.setdefault(word, {})[tool] = None
            keys.append(self._info(tool)[1])
            for word in view.words:
                keys.append(SEP.join(("w", word, tool)))
                self._word_tools.setdefault(word, {})[tool] = None
        self.counts.add_ones(keys)
        self._cut_words()
        self._cut_contexts()
