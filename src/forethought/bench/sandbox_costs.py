"""Measure the side-effect boundary on BFCL: which ground-truth calls change state, and what snapshots cost.

``python -m forethought.bench.sandbox_costs [--json PATH] [--repeat N]`` runs every ground-truth call of the
200 BFCL multi-turn base trajectories on fresh backends and reports:

* how many calls change backend state (canonical fingerprint before vs after), per backend class, and
  which tools whose names read as queries (``get_``, ``check``, ...) changed state anyway;
* the median cost of one snapshot (deep copy) of the owning backend, per class, taken right before
  each call (so over the states the trajectories actually pass through);
* for comparison, the median snapshot + commit cost of a small :class:`FileWorkspace`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from forethought._version import __version__
from forethought.sandbox.files import FileWorkspace

QUERY_PREFIXES = ("get_", "check", "display", "view", "list", "find", "search", "ls", "cat", "pwd", "grep",
                  "estimate", "compute", "verify", "retrieve")


def measure_bfcl(repeat: int = 5) -> dict[str, Any]:
    """State changes and snapshot costs over all ground-truth calls (see the module docstring)."""
    from forethought.bench.workloads.bfcl import build_session, function_docs, load_bfcl, state_fingerprint

    owners = {name: owner for name, (owner, _) in function_docs().items()}
    calls = Counter[str]()
    changed = Counter[str]()
    query_tools_changing = Counter[str]()
    snapshot_us: dict[str, list[float]] = defaultdict(list)
    for entry in load_bfcl():
        tools, state = build_session(entry, lazy=False)
        by_name = {t.name: t for t in tools}
        for call in entry.calls:
            owner = owners[call.name]
            cell = state.cells[owner]
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                cell.snapshot().discard()
                samples.append((time.perf_counter() - start) * 1e6)
            snapshot_us[owner].append(min(samples))
            t = by_name[call.name]
            before = state_fingerprint(state)
            try:
                t.fn(cell.live, **t.arguments.canonical_arguments(call))
            finally:
                cell.mark_changed()
            calls[owner] += 1
            if state_fingerprint(state) != before:
                changed[owner] += 1
                if call.name.startswith(QUERY_PREFIXES):
                    query_tools_changing[call.name] += 1
    total, total_changed = sum(calls.values()), sum(changed.values())
    return {
        "calls": total,
        "state_changing": total_changed,
        "state_changing_fraction": round(total_changed / total, 4) if total else 0.0,
        "by_class": {c: {"calls": calls[c], "state_changing": changed[c],
                         "snapshot_median_us": round(statistics.median(snapshot_us[c]), 1),
                         "snapshot_p90_us": round(statistics.quantiles(snapshot_us[c], n=10)[-1], 1)
                         if len(snapshot_us[c]) > 1 else round(snapshot_us[c][0], 1)}
                     for c in sorted(calls)},
        "query_named_tools_that_changed_state": dict(sorted(query_tools_changing.items())),
    }


def measure_workspace(files: int = 20, size: int = 4096, repeat: int = 20) -> dict[str, Any]:
    """Median snapshot and snapshot+write+commit cost of a ``files`` x ``size`` byte workspace."""
    with tempfile.TemporaryDirectory(prefix="forethought-measure-") as tmp:
        root = Path(tmp) / "live"
        root.mkdir()
        for i in range(files):
            (root / f"f{i}.txt").write_bytes(bytes([65 + i % 26]) * size)
        ws = FileWorkspace(root, temp_dir=tmp)
        snap_ms, commit_ms = [], []
        for i in range(repeat):
            start = time.perf_counter()
            snap = ws.snapshot()
            snap_ms.append((time.perf_counter() - start) * 1e3)
            (snap.target / "f0.txt").write_text(str(i))
            start = time.perf_counter()
            if not snap.commit():
                raise AssertionError("an uncontended commit was refused")
            commit_ms.append((time.perf_counter() - start) * 1e3)
    return {"files": files, "file_bytes": size, "snapshot_median_ms": round(statistics.median(snap_ms), 3),
            "commit_median_ms": round(statistics.median(commit_ms), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forethought.bench.sandbox_costs", description=__doc__)
    parser.add_argument("--json", type=Path, help="write machine-readable results here")
    parser.add_argument("--repeat", type=int, default=5, help="snapshots timed per call (the minimum is kept)")
    args = parser.parse_args(argv)
    results = {"bfcl": measure_bfcl(args.repeat), "workspace": measure_workspace()}
    doc = {"command": "sandbox-measure", "version": __version__, "params": {"repeat": args.repeat},
           "results": results}
    text = json.dumps(doc, indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
