"""What a pattern prediction costs on sessions with large tool outputs (``python -m forethought.bench.predict_cost``).

The agent predicts at the start of every model step, on the event loop that streams the model's
responses, so a prediction must stay cheap however large the outputs read so far are. This benchmark
generates sessions (nothing from any workload: made-up tools over made-up records, seeded) whose outputs
are JSON documents of about ``output_kb`` kilobytes, trains a predictor on some of them, then replays
the others call by call, timing every ``predict_now`` and ``observe``. It reports latency percentiles per
prediction and per observation (wall clock; ``predict_cpu`` / ``observe_cpu``: the thread's CPU time,
which a busy machine inflates less), and the training time per session.

Deterministic inputs (a seed); timings are the machine's: run it on an idle machine, several times, and
report medians with their spread.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall
from forethought.bench.predict_eval import latency_summary
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train

_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
          "kelp", "lagoon", "meadow", "nectar", "onyx", "prairie", "quartz", "river", "sierra", "tundra")
_CATEGORIES = ("tools", "books", "plants", "maps", "lamps", "boots")


def _schema(required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
    props = {name: {"type": "string"} for name in (*required, *optional)}
    return {"type": "object", "properties": props, "required": list(required)}


TOOLS: dict[str, dict[str, Any]] = {
    "list_items": _schema(["category"], ["sort"]),
    "get_item": _schema(["item_id"]),
    "update_item": _schema(["item_id", "field", "value"]),
    "search_notes": _schema(["query"]),
    "send_summary": _schema(["recipient", "text"]),
}
"""The generated sessions' tools (name -> JSON schema)."""
DESCRIPTIONS = {
    "list_items": "List the items of a category, optionally sorted.",
    "get_item": "Get one item with its record and history by its id.",
    "update_item": "Set one field of an item to a new value.",
    "search_notes": "Search the notes for a word.",
    "send_summary": "Send a short summary text to a recipient.",
}
OPENAI_TOOLS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {"name": name, "description": DESCRIPTIONS[name], "parameters": schema}}
    for name, schema in TOOLS.items())
"""The same tools as offered to a model (OpenAI ``tools`` entries, with descriptions)."""


@dataclass(frozen=True, slots=True)
class CostConfig:
    """Size of the benchmark."""

    train_sessions: int = 40
    test_sessions: int = 20
    output_kb: int = 100
    """Approximate size of each large output, in kilobytes."""
    seed: int = 7


def _record(rng: random.Random, i: int) -> dict[str, Any]:
    name = f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}"
    return {"id": f"IT-{i:05d}", "name": name.title(), "price": round(rng.uniform(1, 500), 2),
            "tags": rng.sample(_WORDS, 3), "owner": {"name": rng.choice(_WORDS).title(), "zone": rng.randint(1, 9)},
            "note": " ".join(rng.choice(_WORDS) for _ in range(12))}


def _listing(rng: random.Random, size: int, start: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    used = 2
    while used < size:
        item = _record(rng, start + len(items))
        used += len(json.dumps(item)) + 2
        items.append(item)
    return items


def generate_sessions(count: int, output_kb: int = 100, seed: int = 7) -> list[RecordedSession]:
    """``count`` generated sessions, each with outputs of about ``output_kb`` KB (deterministic in ``seed``)."""
    rng = random.Random(seed)
    sessions = []
    size = output_kb * 1024
    for n in range(count):
        category = rng.choice(_CATEGORIES)
        items = _listing(rng, size, 1000 * n)
        picks = rng.sample(items, 3)
        listing = ObservedCall(ToolCall("list_items", {"category": category}),
                               json.dumps({"category": category, "items": items}))
        gets = tuple(ObservedCall(ToolCall("get_item", {"item_id": p["id"]}),
                                  json.dumps({"item": p, "history": _listing(rng, size // 4, 10**6 + n)}))
                     for p in picks)
        first = RecordedTurn(f"Show me the {category} and look at {', '.join(p['name'] for p in picks)}.",
                             (listing, *gets))
        value = rng.choice(_WORDS)
        update = ObservedCall(ToolCall("update_item", {"item_id": picks[-1]["id"], "field": "note", "value": value}),
                              json.dumps({"ok": True, "item": {**picks[-1], "note": value}}))
        query = rng.choice(_WORDS)
        notes = " ".join(f"{rng.choice(_WORDS)}-{rng.randint(1, 999)}" for _ in range(size // 12))
        search = ObservedCall(ToolCall("search_notes", {"query": query}), notes[:size])
        second = RecordedTurn(f"Set its note to '{value}', then search my notes for {query}.", (update, search))
        recipient = rng.choice(_WORDS).title()
        summary = ObservedCall(ToolCall("send_summary", {"recipient": recipient, "text": f"updated {picks[-1]['id']}"}),
                               json.dumps({"sent": True}))
        third = RecordedTurn(f"Send {recipient} a summary.", (summary,))
        sessions.append(RecordedSession(f"cost{n}", (first, second, third), TOOLS, "generated", OPENAI_TOOLS))
    return sessions


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    """predict-eval's latency summary (milliseconds) plus the number of samples."""
    summary = latency_summary(samples)
    return {**summary, "count": len(samples)} if summary else {}


def run_predict_cost(config: CostConfig | None = None) -> dict[str, Any]:
    """Train on generated sessions, then time every prediction and observation of the test sessions."""
    config = config or CostConfig()
    sessions = generate_sessions(config.train_sessions + config.test_sessions, config.output_kb, config.seed)
    trained, tested = sessions[: config.train_sessions], sessions[config.train_sessions:]
    predictor = PatternPredictor()
    start = time.perf_counter()
    calls = train(predictor, trained)
    train_s = time.perf_counter() - start
    predict_times: list[float] = []
    predict_cpu: list[float] = []
    observe_times: list[float] = []
    observe_cpu: list[float] = []
    exact = 0
    for session in tested:
        for context, observed, _ in contexts(session):
            start, cpu = time.perf_counter(), time.thread_time()
            predictions = predictor.predict_now(context)
            predict_cpu.append(time.thread_time() - cpu)
            predict_times.append(time.perf_counter() - start)
            exact += int(bool(predictions) and predictions[0].call == observed.call)
            start, cpu = time.perf_counter(), time.thread_time()
            predictor.observe(context, observed)
            observe_cpu.append(time.thread_time() - cpu)
            observe_times.append(time.perf_counter() - start)
    sizes = [len(o.output) for s in tested for t in s.turns for o in t.calls]
    return {"predict": _percentiles(predict_times), "predict_cpu": _percentiles(predict_cpu),
            "observe": _percentiles(observe_times), "observe_cpu": _percentiles(observe_cpu),
            "train_s": train_s, "train_calls": calls, "train_ms_per_session": train_s * 1e3 / max(1, len(trained)),
            "exact_top1": exact / max(1, len(predict_times)), "largest_output_bytes": max(sizes, default=0),
            "config": {"train_sessions": config.train_sessions, "test_sessions": config.test_sessions,
                       "output_kb": config.output_kb, "seed": config.seed}}


_DEFAULTS = CostConfig()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--train-sessions", type=int, default=_DEFAULTS.train_sessions)
    parser.add_argument("--test-sessions", type=int, default=_DEFAULTS.test_sessions)
    parser.add_argument("--output-kb", type=int, default=_DEFAULTS.output_kb)
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    args = parser.parse_args(argv)
    results = run_predict_cost(CostConfig(args.train_sessions, args.test_sessions, args.output_kb, args.seed))
    print(json.dumps(results, indent=2))
    if args.json_path:
        from forethought.bench.report import document, write_json

        write_json(args.json_path, document("predict-cost", results["config"], results))


if __name__ == "__main__":
    main()
