"""Next-call prediction accuracy of the pattern predictor on BFCL multi-turn base (``predict-eval``).

Protocol: two folds with interleaved ids (train on one, test on the other, then the reverse). Before each
test call the predictor gets the context an agent would have (user message, earlier calls and outputs,
tools offered) and proposes up to ``top_k`` calls; then it observes the real call, so online learning
within the test fold uses only calls already seen. Ground-truth outputs come from running each
session's calls in order on fresh BFCL backends.

Metrics, overall and per domain:

* ``name_top1`` / ``name_top3``: the real tool is the first / among the first three predictions;
* ``exact_top1`` / ``exact_top3``: the same for the whole call (name and canonical arguments, keyed by
  the tool's schema as speculation keys are);
* ``coverage``: share of positions where at least one executable prediction was made;
* ``precision``: share of positions with an executable first prediction where that prediction is exact;
* ``latency``: percentiles of the time of one prediction (``train_s``: time spent training, both folds);
* ``derivations``: the share of each kind of derivation (:func:`derivation`) among the argument values
  of the exact first predictions;

and ``by_threshold``: coverage and precision if only predictions at or above a confidence were made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from forethought._core.calls import ArgumentSpec, ToolCall, compile_arguments
from forethought._core.policy import Policy
from forethought._core.tools import Tool
from forethought.errors import ForethoughtError, InvalidArgumentsError, WorkloadError
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext, reports_failure
from forethought.predictors.patterns.args import ABSENT_KEY
from forethought.predictors.patterns.derive_time import WHEN
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, tool_schemas
from forethought.predictors.trajectory import Trajectory

if TYPE_CHECKING:
    from rich.console import Console

METRICS = ("name_top1", "name_top3", "exact_top1", "exact_top3", "coverage", "precision")
TOP_NAMES = 3
THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7)


@dataclass(slots=True)
class Tally:
    """Counts behind the metrics of one group of positions."""

    positions: int = 0
    name_top1: int = 0
    name_top3: int = 0
    exact_top1: int = 0
    exact_top3: int = 0
    covered: int = 0
    executable_top1: int = 0
    executable_top1_exact: int = 0
    firsts: list[tuple[float, bool, bool]] = field(default_factory=list)
    """Per position: the best executable confidence, whether the first prediction is executable, and exact."""

    def add(self, predictions: Sequence[Prediction], truth: ToolCall, same: Callable[[ToolCall], bool]) -> None:
        """Score one position: ``same(call)`` tells whether a predicted call is exactly the real one."""
        self.positions += 1
        names = [p.call.name for p in predictions]
        exact = [same(p.call) for p in predictions]
        self.name_top1 += int(names[:1] == [truth.name])
        self.name_top3 += int(truth.name in names[:TOP_NAMES])
        self.exact_top1 += int(any(exact[:1]))
        self.exact_top3 += int(any(exact[:TOP_NAMES]))
        executable = [p.confidence for p in predictions if p.executable]
        self.covered += int(bool(executable))
        first_executable = bool(predictions) and predictions[0].executable
        if first_executable:
            self.executable_top1 += 1
            self.executable_top1_exact += int(exact[0])
        self.firsts.append((max(executable, default=-1.0), first_executable, first_executable and exact[0]))

    def merge(self, other: Tally) -> None:
        for name in self.__slots__:
            if name == "firsts":
                self.firsts.extend(other.firsts)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def metrics(self) -> dict[str, float | int]:
        n = max(1, self.positions)
        return {
            "name_top1": self.name_top1 / n, "name_top3": self.name_top3 / n,
            "exact_top1": self.exact_top1 / n, "exact_top3": self.exact_top3 / n,
            "coverage": self.covered / n,
            "precision": self.executable_top1_exact / max(1, self.executable_top1),
            "positions": self.positions,
        }

    def by_threshold(self, thresholds: Sequence[float] = THRESHOLDS) -> dict[str, dict[str, float]]:
        """Coverage and precision if only predictions at or above each confidence threshold were made."""
        n = max(1, self.positions)
        out = {}
        for threshold in thresholds:
            covered = [f for f in self.firsts if f[0] >= threshold]
            speculated = [f for f in covered if f[1]]
            out[f"{threshold:g}"] = {"coverage": len(covered) / n,
                                     "precision": sum(f[2] for f in speculated) / max(1, len(speculated))}
        return out


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def record_bfcl(entries: Iterable[Any]) -> list[RecordedSession]:
    """Run each entry's ground truth on fresh backends, in order; the sessions with real outputs."""
    from forethought.bench.workloads.bfcl import build_session

    sessions = []
    for entry in entries:
        live = build_session(entry)
        tools = {t.name: t for t in live.tools}
        turns = []
        for user, calls in zip(entry.turns, entry.ground_truth, strict=True):
            observed = []
            for call in calls:
                tool = tools.get(call.name)
                if tool is None:
                    raise WorkloadError(f"{entry.id}: ground truth calls {call.name!r}, which is not offered")
                target = tool.state.live if tool.state is not None else None
                try:
                    value = tool.fn(target, **call.arguments) if tool.state is not None else tool.fn(**call.arguments)
                    ok = not reports_failure(value)
                except Exception as exc:  # a failing ground-truth call is part of the session
                    value, ok = f"Error: {exc}", False
                observed.append(ObservedCall(call, _render(value), ok))
            turns.append(RecordedTurn(user, tuple(observed)))
        sessions.append(RecordedSession(entry.id, tuple(turns), tool_schemas(entry.tools), entry.domain,
                                        tuple(entry.tools)))
    return sessions


async def record_trajectories(trajectories: Iterable[Trajectory],
                              tools_for: Callable[[Trajectory], Sequence[Tool]]) -> list[RecordedSession]:
    """Run each trajectory's calls in order through a :class:`~forethought._core.runtime.Runtime` session with
    the tools ``tools_for`` gives it (fresh state per trajectory); the sessions with real outputs.

    For training a pattern predictor on any workload before a run, e.g.
    ``await record_trajectories(workload.training(), lambda t: workload.session_tools(t, None).tools)``.
    A call that raises is recorded with ``ok=False`` and the error text as its output.
    """
    from forethought._core.runtime import Runtime

    sessions = []
    for trajectory in trajectories:
        runtime = Runtime()
        session = runtime.session(tools=tools_for(trajectory))
        turns = []
        try:
            for turn in trajectory.turns:
                observed = []
                for call in turn.calls:
                    try:
                        value = await session.execute(call)
                        ok = not reports_failure(value)
                    except ForethoughtError as exc:
                        value, ok = f"Error: {exc}", False
                    observed.append(ObservedCall(call, _render(value), ok))
                turns.append(RecordedTurn(turn.user, tuple(observed), turn.answer))
        finally:
            await session.close()
            runtime.close()
        sessions.append(RecordedSession(trajectory.id, tuple(turns), tool_schemas(trajectory.tools),
                                        trajectory.domain, tuple(trajectory.tools)))
    return sessions


def _specs(session: RecordedSession) -> dict[str, ArgumentSpec]:
    return {name: compile_arguments(name, schema) for name, schema in session.tools.items()}


def _same_call(specs: Mapping[str, ArgumentSpec], truth: ToolCall) -> Callable[[ToolCall], bool]:
    spec = specs.get(truth.name)
    truth_key = spec.key(truth) if spec is not None else None

    def same(call: ToolCall) -> bool:
        if call.name != truth.name or spec is None:
            return False
        try:
            return spec.key(call) == truth_key
        except InvalidArgumentsError:
            return False

    return same


def calls_only(context: PredictionContext) -> PredictionContext:
    """``context`` as a proxy between the model and its tools sees it: the calls and their outputs, no
    user (or system) text."""
    kept = tuple(m for m in context.messages if m.get("role") not in ("user", "system", "developer"))
    return replace(context, messages=kept, user_message="")


def _contexts(session: RecordedSession, user_text: bool
              ) -> Iterator[tuple[PredictionContext, ObservedCall, int]]:
    for context, observed, turn in contexts(session):
        yield (context if user_text else calls_only(context)), observed, turn


def derivation(rule: str) -> str:
    """The kind of derivation a candidate's rule is (its source, and ``date`` for a date re-spelled).

    A rule is ``[source, locator, transform, wrap]`` (:class:`~forethought.predictors.patterns.derive_rules.Rule`,
    its locator a list); any other list naming a kind first is a pseudo rule (enum, vocab, abbr, and whatever
    the argument model adds) and counts as that kind; anything else is ``other``."""
    if rule in ("constant", "absent"):
        return rule
    try:
        parsed = json.loads(rule)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return "other"
    if not isinstance(parsed, list) or not parsed or not isinstance(parsed[0], str) or not parsed[0]:
        return "other"
    kind: str = parsed[0]
    if len(parsed) < 3 or not isinstance(parsed[1], list):
        return kind
    locator, transform = parsed[1], parsed[2]
    if (isinstance(transform, str) and transform.startswith("date:")) or (
            isinstance(locator, list) and locator[:1] == [WHEN]):
        return f"{kind}+date"
    return kind


def _derivations(predictor: PatternPredictor, context: PredictionContext, call: ToolCall,
                 shares: dict[str, int]) -> None:
    """Count the derivation of each argument of ``call``, a first prediction that was exact."""
    step = predictor._step(context)
    schema = context.tools.get(call.name) or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    for param in predictor.args.parameters(call.name, properties):
        wanted = value_key(call.arguments[param]) if param in call.arguments else ABSENT_KEY
        found = predictor.args.candidates(call.name, param, properties.get(param) or {}, param in required,
                                          step.sources, step.words, predictor.config.arg_alternatives)
        rule = next((c.rule for c in found if c.key == wanted), "other")
        shares[derivation(rule)] = shares.get(derivation(rule), 0) + 1


MISS_RANKS = 8
"""Candidates of a wrong argument looked at for the rank of the right value (``misses``)."""


def _miss(predictor: PatternPredictor, context: PredictionContext, predictions: Sequence[Prediction],
          truth: ToolCall, session_id: str, exact_rank: int | None) -> dict[str, Any]:
    """One position whose first prediction was not exact, with its category: ``name`` (wrong tool) or
    ``args`` (right tool), and per wrong argument the right value, the one predicted, the rule of the one
    predicted and the rank of the right value among the parameter's candidates (None: not derived)."""
    names = [p.call.name for p in predictions]
    miss: dict[str, Any] = {"session": session_id, "position": len(context.history),
                            "user": context.user_message[:300], "truth": {"name": truth.name,
                                                                          "arguments": dict(truth.arguments)},
                            "predicted": [{"name": p.call.name, "arguments": dict(p.call.arguments),
                                           "confidence": round(p.confidence, 4), "executable": p.executable}
                                          for p in predictions],
                            "exact_rank": exact_rank,
                            "truth_name_rank": names.index(truth.name) if truth.name in names else None}
    if not predictions or predictions[0].call.name != truth.name:
        miss["category"] = "name"
        return miss
    miss["category"] = "args"
    step = predictor._step(context)
    schema = context.tools.get(truth.name) or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    wrong = []
    guessed = predictions[0].call.arguments
    for param in predictor.args.parameters(truth.name, properties):
        wanted = value_key(truth.arguments[param]) if param in truth.arguments else ABSENT_KEY
        got = value_key(guessed[param]) if param in guessed else ABSENT_KEY
        if wanted == got:
            continue
        found = predictor.args.candidates(truth.name, param, properties.get(param) or {}, param in required,
                                          step.sources, step.words, MISS_RANKS)
        rank = next((i for i, c in enumerate(found) if c.key == wanted), None)
        wrong.append({"param": param, "truth": truth.arguments.get(param, "<absent>"),
                      "predicted": guessed.get(param, "<absent>"),
                      "predicted_rule": derivation(found[0].rule) if found else None,
                      "truth_rank": rank, "truth_rule": derivation(found[rank].rule) if rank is not None else None})
    miss["wrong"] = wrong
    return miss


def write_misses(path: str, misses: Sequence[Mapping[str, Any]]) -> None:
    """Write ``misses`` (of :func:`evaluate`) as JSON Lines."""
    with open(path, "w", encoding="utf-8") as f:
        for miss in misses:
            f.write(json.dumps(miss, ensure_ascii=False, default=str) + "\n")


def admitted(policy: Policy, predictions: Sequence[Prediction]) -> list[Prediction]:
    """The predictions a runtime under ``policy`` could run early: the tool may speculate
    (``speculate = true``) and the confidence reaches ``min_confidence``."""
    return [p for p in predictions
            if policy.for_tool(p.call.name).speculate and p.confidence >= policy.min_confidence]


def evaluate(predictor: PatternPredictor, sessions: Iterable[RecordedSession], user_text: bool = True,
             latencies: list[float] | None = None, shares: dict[str, int] | None = None,
             misses: list[dict[str, Any]] | None = None, policy: Policy | None = None) -> dict[str, Tally]:
    """Predict then observe every call of ``sessions`` in order; tallies by domain. Without
    ``user_text`` the predictor sees the calls only (:func:`calls_only`); the time of each prediction
    is appended to ``latencies`` (seconds); ``shares`` counts the derivation of each argument value of
    the exact first predictions (:func:`derivation`); ``misses`` gets each position whose first
    prediction was not exact (:func:`_miss`). With a ``policy``, only :func:`admitted` predictions count."""
    tallies: dict[str, Tally] = {}
    for session in sessions:
        specs = _specs(session)
        tally = tallies.setdefault(session.domain or "all", Tally())
        for context, observed, _ in _contexts(session, user_text):
            start = time.perf_counter()
            predictions = predictor.predict_now(context)
            if latencies is not None:
                latencies.append(time.perf_counter() - start)
            if policy is not None:
                predictions = admitted(policy, predictions)
            same = _same_call(specs, observed.call)
            tally.add(predictions, observed.call, same)
            if shares is not None and predictions and same(predictions[0].call):
                _derivations(predictor, context, predictions[0].call, shares)
            if misses is not None and not (predictions and same(predictions[0].call)):
                rank = next((i for i, p in enumerate(predictions) if same(p.call)), None)
                misses.append(_miss(predictor, context, predictions, observed.call, session.id, rank))
            predictor.observe(context, observed)
    return tallies


def latency_summary(samples: Sequence[float]) -> dict[str, float]:
    """Percentiles of per-prediction times, in milliseconds."""
    ordered = sorted(samples)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": ordered[-1] * 1e3,
            "mean_ms": sum(ordered) / len(ordered) * 1e3}


def run_predict_eval(workload: str = "bfcl", folds: int = 2, top_k: int = 3,
                     config: PatternConfig | None = None, user_text: bool = True,
                     misses: list[dict[str, Any]] | None = None, policy: Policy | None = None) -> dict[str, Any]:
    """Two-fold interleaved next-call evaluation; ``{"overall": {...}, "by_domain": {DOMAIN: {...}}}``,
    with ``latency`` (per prediction) and ``train_s``. Without ``user_text`` the predictor is trained and
    tested on the calls and outputs only (what a tool proxy sees). ``misses`` gets every position whose
    first prediction was not exact, with its category (:func:`evaluate`). With a ``policy``, predictions it
    would not let run early are not made (:func:`admitted`)."""
    if workload != "bfcl":
        raise WorkloadError(f"predict-eval knows the workload 'bfcl' only, not {workload!r}")
    if folds not in (1, 2):
        raise ValueError("folds must be 1 or 2")
    from forethought.bench.workloads.bfcl import load_bfcl, split_interleaved

    entries = load_bfcl()
    recorded = {s.id: s for s in record_bfcl(entries)}
    base = config or PatternConfig()
    config = PatternConfig(**{**{f: getattr(base, f) for f in base.__slots__}, "top_k": max(top_k, TOP_NAMES)})
    by_domain: dict[str, Tally] = {}
    latencies: list[float] = []
    shares: dict[str, int] = {}
    train_s = 0.0
    for fold in range(folds):
        train_entries, test_entries = split_interleaved(entries, fold)
        predictor = PatternPredictor(config=config)
        start = time.perf_counter()
        for e in train_entries:
            for context, observed, _ in _contexts(recorded[e.id], user_text):
                predictor.observe(context, observed)
        train_s += time.perf_counter() - start
        tested = (recorded[e.id] for e in test_entries)
        for domain, tally in evaluate(predictor, tested, user_text, latencies, shares, misses, policy).items():
            by_domain.setdefault(domain, Tally()).merge(tally)
    overall = Tally()
    for tally in by_domain.values():
        overall.merge(tally)
    return {"overall": overall.metrics(),
            "by_domain": {d: t.metrics() for d, t in sorted(by_domain.items())},
            "by_threshold": overall.by_threshold(),
            "latency": latency_summary(latencies), "train_s": train_s,
            "derivations": {kind: count / max(1, sum(shares.values()))
                            for kind, count in sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))},
            "folds": folds, "top_k": top_k, "user_text": user_text, "policy": policy is not None}


def print_predict_eval(console: Console, results: Mapping[str, Any]) -> None:
    """Render :func:`run_predict_eval` results as two tables: metrics by domain, and by threshold."""
    from rich.table import Table

    calls_only_note = "" if results.get("user_text", True) else ", calls only (no user text)"
    table = Table(title=f"next-call prediction ({results.get('folds', 2)}-fold, interleaved ids{calls_only_note})")
    table.add_column("domain")
    for metric in (*METRICS, "positions"):
        table.add_column(metric, justify="right")
    rows = [*sorted(results["by_domain"].items()), ("overall", results["overall"])]
    for domain, metrics in rows:
        table.add_row(domain, *(f"{metrics[m]:.3f}" for m in METRICS), str(metrics["positions"]))
    console.print(table)
    sweep = Table(title="speculating only predictions at or above a confidence")
    sweep.add_column("threshold", justify="right")
    sweep.add_column("coverage", justify="right")
    sweep.add_column("precision", justify="right")
    for threshold, values in results.get("by_threshold", {}).items():
        sweep.add_row(threshold, f"{values['coverage']:.3f}", f"{values['precision']:.3f}")
    console.print(sweep)
    latency = results.get("latency") or {}
    if latency:
        console.print(f"per prediction: p50 {latency['p50_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms, "
                      f"max {latency['max_ms']:.2f} ms; training {results.get('train_s', 0.0):.2f} s")
