"""Control flow: which tool comes next, learned from the tool sequences and user words of past sessions.

Each candidate tool gets a few features, combined by a small softmax whose weights are learned online:

* ``ngram``: log-probability of the tool after the last k calls (names and ok/error outcomes, with a
  turn-start marker), k = 1..order, interpolated Witten-Bell style so short contexts back off to longer
  evidence smoothly and a context seen once does not dominate;
* ``assoc`` / ``assoc_start``: how strongly the words of the latest user message go with the tool being
  used in that turn (smoothed pointwise mutual information), and the same at the start of a turn;
* ``name_match``: the share of the tool's name words that occur in the user message (works for tools never
  seen before);
* ``in_turn`` / ``repeat``: whether the tool was already called in this turn / is the last call;
* ``unseen``: the tool has never been observed.

All counts are decayed counters (:mod:`pattern_counts`), so the model follows a workload that drifts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from forethought.predictors.pattern_counts import PLAIN_PREFIX, Counts
from forethought.predictors.pattern_text import name_words

SEP = "\x1f"
TURN_MARK = "^"
START_MARK = "<s>"
ERROR_MARK = "!"

FEATURES = ("ngram", "assoc", "assoc_start", "name_match", "in_turn", "repeat", "unseen")
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "ngram": 1.0, "assoc": 1.0, "assoc_start": 0.5, "name_match": 2.0, "in_turn": -0.5, "repeat": -0.5,
    "unseen": 0.0,
}
"""Starting weights: a sensible predictor before anything is learned."""

LEARNING_RATE = 0.05
ASSOC_SMOOTHING = 2.0
ASSOC_TOP_WORDS = 4
NGRAM_FLOOR = 1e-4


@dataclass(frozen=True, slots=True)
class FlowView:
    """What the control-flow model looks at: recent call tokens, user words, this turn's calls."""

    tokens: tuple[str, ...]
    words: frozenset[str]
    turn_calls: tuple[str, ...]

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
        self._followers: dict[str, set[str]] = {}
        self._known: set[str] = set()
        self._name_words: dict[str, frozenset[str]] = {}

    @property
    def known_tools(self) -> frozenset[str]:
        """Every tool observed so far."""
        return frozenset(self._known)

    def register(self, key: str) -> None:
        """Index a counter key loaded from a store."""
        parts = key.split(SEP)
        if parts[0] == "n" and len(parts) >= 2 and parts[-1].startswith("="):
            self._followers.setdefault(SEP.join(parts[:-1]), set()).add(parts[-1][1:])
        elif parts[0] == "t" and len(parts) == 2:
            self._known.add(parts[1])

    # --- features -------------------------------------------------------------------------------------

    def _contexts(self, tokens: Sequence[str]) -> list[tuple[str, ...]]:
        padded = (START_MARK,) * self.order + tuple(tokens)
        return [tuple(padded[len(padded) - k:]) for k in range(1, self.order + 1)]

    def _ngram(self, view: FlowView, candidates: Sequence[str]) -> dict[str, float]:
        total = self.counts.get("N")
        vocab = max(1, len(self._known | set(candidates)))
        probs = {t: (self.counts.get(SEP.join(("t", t))) + 1.0) / (total + vocab) for t in candidates}
        for context in self._contexts(view.tokens):
            base = _ngram_key(context)
            seen = self.counts.get(base)
            followers = len(self._followers.get(base, ()))
            if seen <= 0 or followers == 0:
                continue
            probs = {t: (self.counts.get(_ngram_key(context, t)) + followers * p) / (seen + followers)
                     for t, p in probs.items()}
        return probs

    def _assoc(self, words: Iterable[str], tool: str, prior: float) -> float:
        values = []
        for word in words:
            seen = self.counts.get(SEP.join(("w", word)))
            if seen <= 0:
                continue
            joint = self.counts.get(SEP.join(("w", word, tool)))
            p = (joint + ASSOC_SMOOTHING * prior) / (seen + ASSOC_SMOOTHING)
            values.append(math.log(p / prior))
        values.sort(reverse=True)
        top = values[:ASSOC_TOP_WORDS]
        return sum(top) / len(top) if top else 0.0

    def features(self, view: FlowView, candidates: Sequence[str]) -> dict[str, dict[str, float]]:
        """Feature values of each candidate tool."""
        ngram = self._ngram(view, candidates)
        turns = self.counts.get("T")
        last = view.turn_calls[-1] if view.turn_calls else None
        out: dict[str, dict[str, float]] = {}
        for tool in candidates:
            in_turns = self.counts.get(SEP.join(("tt", tool)))
            prior = (in_turns + 1.0) / (turns + max(1, len(candidates)))
            assoc = self._assoc(view.words, tool, prior)
            words = self._name_words.get(tool)
            if words is None:
                words = self._name_words[tool] = frozenset(name_words(tool))
            out[tool] = {
                "ngram": math.log(max(NGRAM_FLOOR, ngram[tool])),
                "assoc": assoc,
                "assoc_start": assoc if view.turn_start else 0.0,
                "name_match": len(words & view.words) / len(words) if words else 0.0,
                "in_turn": 1.0 if tool in view.turn_calls else 0.0,
                "repeat": 1.0 if tool == last else 0.0,
                "unseen": 0.0 if tool in self._known else 1.0,
            }
        return out

    def weight(self, feature: str) -> float:
        return DEFAULT_WEIGHTS[feature] + self.counts.get(PLAIN_PREFIX + SEP.join(("W", feature)))

    def _softmax(self, feats: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        weights = {f: self.weight(f) for f in FEATURES}
        logits = {t: sum(weights[f] * v for f, v in fv.items()) for t, fv in feats.items()}
        top = max(logits.values(), default=0.0)
        exps = {t: math.exp(v - top) for t, v in logits.items()}
        total = sum(exps.values()) or 1.0
        return {t: v / total for t, v in exps.items()}

    def rank(self, view: FlowView, candidates: Sequence[str]) -> list[tuple[str, float]]:
        """Candidate tools with their probability of being called next, most likely first."""
        if not candidates:
            return []
        probs = self._softmax(self.features(view, candidates))
        return sorted(probs.items(), key=lambda kv: (-kv[1], kv[0]))

    # --- learning -------------------------------------------------------------------------------------

    def learn(self, view: FlowView, candidates: Sequence[str], tool: str) -> None:
        """Count one observed call (``tool``, made in ``view``) and take one gradient step on the weights."""
        pool = list(dict.fromkeys([*candidates, tool]))
        feats = self.features(view, pool)
        probs = self._softmax(feats)
        for feature in FEATURES:
            expected = sum(probs[t] * feats[t][feature] for t in pool)
            gradient = feats[tool][feature] - expected
            if gradient:
                self.counts.add(PLAIN_PREFIX + SEP.join(("W", feature)), LEARNING_RATE * gradient)
        self.counts.add("N")
        self.counts.add(SEP.join(("t", tool)))
        self._known.add(tool)
        for context in self._contexts(view.tokens):
            base = _ngram_key(context)
            self.counts.add(base)
            self.counts.add(_ngram_key(context, tool))
            self._followers.setdefault(base, set()).add(tool)
        if tool not in view.turn_calls:
            if view.turn_start:
                self.counts.add("T")
                for word in view.words:
                    self.counts.add(SEP.join(("w", word)))
            self.counts.add(SEP.join(("tt", tool)))
            for word in view.words:
                self.counts.add(SEP.join(("w", word, tool)))
