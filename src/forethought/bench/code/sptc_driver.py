"""Drive the public ``spec-ptc`` package over the code benchmark (the comparison arm).

Runs under Python 3.12 in its own virtual environment (spec-ptc needs 3.12); it imports nothing from
forethought. It reads a JSON job on stdin: the path of ``code_tools.py`` (loaded by path, so both arms call
the same tool functions), each tool's effect, the latency, the concurrency cap, and per program its stream
schedule ``[[offset_s, delta], ...]``. For each program it builds a fresh spec-ptc ``Harness`` in ``spec``
mode (streaming segmentation, shadow execution with tail peeking, claiming real run), replays the stream
at the scheduled offsets, and reports wall time, claim hits and misses, unclaimed speculations and their
tool seconds, and the printed output. The JSON result goes to stdout.

PURE and READ_ONLY tools are registered ``speculatable=True, pure=True, deterministic=True`` (spec-ptc's
only opt-in for early runs); the writing tool is not speculatable.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from spec_ptc.runtime.harness import Harness  # type: ignore[import-not-found]

EARLY = ("pure", "read_only")


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("forethought_code_tools", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load tools from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Engine:
    """What spec-ptc's Harness asks of an engine: register the tools."""

    def __init__(self, tools: dict[str, Any], effects: dict[str, str], latency_s: float) -> None:
        self.tools = tools
        self.effects = effects
        self.latency_s = latency_s

    def make_tools(self, registry: Any, bus: Any) -> None:
        for name, fn in self.tools.items():
            early = self.effects[name] in EARLY
            registry.register(name, fn, speculatable=early, pure=early, deterministic=early,
                              latency_hint_ms=self.latency_s * 1000)


def _stream(pairs: list[list[Any]]) -> Iterator[str]:
    start = time.perf_counter()
    for at, delta in pairs:
        wait = start + float(at) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield str(delta)


def run_program(job: dict[str, Any], program: dict[str, Any], tools_module: Any) -> dict[str, Any]:
    outbox: list[str] = []
    engine = _Engine(tools_module.make_tools(job["latency_s"], outbox), job["effects"], job["latency_s"])
    harness = Harness(engine, mode="spec", max_inflight=job["max_inflight"])
    start = time.perf_counter()
    outcome = harness.run_turn(_stream(program["schedule"]))
    wall = time.perf_counter() - start
    now = time.perf_counter()
    unclaimed = [s for s in harness.store.all if s.state != "claimed"]
    wasted_s = sum(((s.t_ready or now) - s.t_dispatch) for s in unclaimed if s.t_dispatch)
    metrics = outcome.metrics
    harness.launcher.shutdown()
    return {"wall_s": wall, "hits": metrics.hits, "misses": metrics.misses, "wasted": len(unclaimed),
            "wasted_tool_s": wasted_s, "stdout": "".join(r.stdout for r in outcome.results),
            "stderr": "".join(r.stderr for r in outcome.results), "outbox": outbox}


def main() -> None:
    job = json.load(sys.stdin)
    tools_module = _load(job["tools_path"])
    out: dict[str, Any] = {"version": importlib.metadata.version("spec-ptc"),
                           "python": ".".join(map(str, sys.version_info[:3])), "programs": {}}
    for program in job["programs"]:
        out["programs"][program["name"]] = run_program(job, program, tools_module)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
