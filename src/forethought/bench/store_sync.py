"""What a shared predictor's sync costs as the stored model grows: by changes against a whole load, on Redis.

``python -m forethought.bench.store_sync [--sizes 2000,20000,100000] [--changed 650] [--rounds 7] [--json PATH]``
starts a local ``redis-server`` on 127.0.0.1 (:class:`~forethought.stores.server.RedisServer`), stores
``size`` counters under a fingerprint, then ``rounds`` times: a writer merges ``changed`` counters (about
what one learning task of the workers bench merges) and a reader (a
:class:`~forethought.predictors.patterns.predictor.PatternPredictor` behind
:class:`~forethought.stores.fallback.FallbackPatternStore`, as the workers bench builds it) syncs, timed. Arm
``changes`` syncs from its last mark (:meth:`~forethought.predictors.patterns.store.IncrementalStore.load_since`);
arm ``whole`` forgets its mark first, which is what every sync cost before syncs by changes (and what it
costs on a store that cannot tell what changed). The arms alternate per size. Reported per size and arm:
median, min and max in milliseconds, and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forethought.bench.report import document, write_json
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.stores.fallback import FallbackPatternStore
from forethought.stores.redis_patterns import RedisPatternStore
from forethought.stores.server import RedisServer

SIZES = (2_000, 20_000, 100_000)
CHANGED, ROUNDS, BATCH = 650, 7, 5_000


def _fill(store: RedisPatternStore, fingerprint: str, size: int) -> None:
    for start in range(0, size, BATCH):
        store.merge(fingerprint, {f"key{i}": 1.0 for i in range(start, min(size, start + BATCH))}, 1.0, 0.0, None)


def run(url: str, sizes: Sequence[int] = SIZES, changed: int = CHANGED, rounds: int = ROUNDS,
        seed: int = 0) -> dict[str, Any]:
    """Sync times per size and arm against the Redis server at ``url`` (see the module's docstring)."""
    rng = random.Random(seed)
    results: dict[str, Any] = {}
    for size in sizes:
        writer = RedisPatternStore.from_url(url)
        readers: dict[str, PatternPredictor] = {}
        for arm in ("changes", "whole"):
            fingerprint = f"store-sync-{arm}-{size}-{os.getpid()}"
            _fill(writer, fingerprint, size)
            readers[arm] = PatternPredictor(FallbackPatternStore(RedisPatternStore.from_url(url)), fingerprint)
        times: dict[str, list[float]] = {"changes": [], "whole": []}
        for _ in range(rounds):
            for arm, reader in readers.items():
                writer.merge(reader.fingerprint, {f"key{rng.randrange(size)}": 1.0 for _ in range(changed)},
                             1.0, 0.0, None)
                if arm == "whole":
                    reader._store_mark = None
                start = time.perf_counter()
                reader.sync()
                times[arm].append(time.perf_counter() - start)
        for reader in readers.values():
            reader.close()
        writer.close()
        results[str(size)] = {arm: {"p50_ms": statistics.median(t) * 1e3, "min_ms": min(t) * 1e3,
                                    "max_ms": max(t) * 1e3} for arm, t in times.items()}
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="counters stored, comma-separated")
    parser.add_argument("--changed", type=int, default=CHANGED, help="counters merged between two syncs")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or args.changed < 1 or args.rounds < 1:
        parser.error("--sizes, --changed and --rounds take positive numbers")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        server = RedisServer(Path(work))
        server.start()
        try:
            results = run(server.url, sizes, args.changed, args.rounds)
        finally:
            server.stop()
    results["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
    for size, arms in results.items():
        if size != "load_average":
            print(f"{int(size):>8,} counters: " + "; ".join(
                f"{arm} p50 {a['p50_ms']:.1f} ms [{a['min_ms']:.1f}, {a['max_ms']:.1f}]" for arm, a in arms.items()))
    print(f"load average before {load_before:.2f}, after {results['load_average']['after']:.2f}")
    if args.json_path:
        write_json(args.json_path, document("store_sync", {"sizes": sizes, "changed": args.changed,
                                                           "rounds": args.rounds}, results))


if __name__ == "__main__":
    main()
