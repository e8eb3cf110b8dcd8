"""The multi-worker bench on a real redis-server: every arm equals serial; the shared arms really share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import redis_fixture
from forethought.bench.workers import WorkersConfig, chain, format_table, run_workers_bench, tasks
from forethought.errors import PolicyError

redis_server, redis_url = redis_fixture.redis_server, redis_fixture.redis_url  # the fixtures
TINY = WorkersConfig(workers=2, agents=4, tasks_per_agent=3, task_types=3, topics=2, gen_s=0.02, tool_s=0.03,
                     repeats=1)


def test_every_arm_equals_serial_and_the_shared_arm_serves_from_redis(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "workers.json"
    doc = run_workers_bench(TINY, redis_url, path)
    assert json.loads(path.read_text()) == doc
    assert doc["command"] == "bench-workers"
    results = doc["results"]
    assert results["equivalent"] is True
    arms = results["arms"]
    assert set(arms) == {"serial", "alone", "shared-patterns", "shared"}
    calls = TINY.agents * TINY.tasks_per_agent * TINY.steps
    for arm in arms.values():
        assert arm["hits"]["median"] + arm["partial_hits"]["median"] + arm["misses"]["median"] == calls
    assert arms["serial"]["hits"]["median"] == 0
    assert arms["alone"]["shared_served"]["median"] == 0 and arms["alone"]["redis_ops_per_call"] == 0
    assert arms["shared-patterns"]["shared_served"]["median"] == 0 and arms["shared-patterns"]["redis_ops_per_call"] > 0
    assert arms["shared"]["shared_served"]["median"] > 0 and arms["shared"]["redis_ops_per_call"] > 0
    assert results["probe"]["served_from_redis"] == results["probe"]["rounds"]
    for arm in arms.values():  # a claim's path is the claim less its wait: never longer than the claim
        if arm["claim_p99_ms"] is not None:
            assert arm["claim_path_p99_ms"] is not None and arm["claim_path_p99_ms"] <= arm["claim_p99_ms"]
    assert "shared" in format_table(doc) and "path p99 ms" in format_table(doc)


def test_tasks_overlap_and_chains_differ_by_kind() -> None:
    drawn = tasks(WorkersConfig())
    assert len(set(drawn)) < len(drawn)  # the same task appears in several agents
    assert len({tuple(chain(kind, 3)) for kind in range(8)}) == 8


def test_workers_need_the_redis_store() -> None:
    from forethought.bench.workers import run_cli

    with pytest.raises(PolicyError):
        run_cli(2, 2, 2, 1, 0, "local", None, None)
