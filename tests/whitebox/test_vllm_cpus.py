"""Keeping vLLM on CPUs of its own: the option's checks, the binding it asks vLLM for, the bench's parsing
(no vLLM needed)."""

from __future__ import annotations

import os

import pytest

from forethought.bench.vllm.bench import _cpu_list
from forethought.bench.vllm.server import VllmConfig, _env, locate


def test_the_engine_cpus_reach_vllms_openmp_binding() -> None:
    cpu = min(os.sched_getaffinity(0))
    assert _env(VllmConfig(cpus=(cpu,)))["VLLM_CPU_OMP_THREADS_BIND"] == str(cpu)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in _env(VllmConfig())


@pytest.mark.parametrize("cpus", [(), (10_000,), (-1,)])
def test_cpus_outside_this_process_are_a_clear_error(cpus: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="subset of this machine's CPUs"):
        locate(VllmConfig(cpus=cpus))


@pytest.mark.parametrize(("text", "cpus"), [(None, None), ("0", (0,)), ("0,1", (0, 1)), (" 1 , 3 ", (1, 3)),
                                           ("0-3", (0, 1, 2, 3)), ("5,2-3", (5, 2, 3))])
def test_the_bench_reads_cpu_lists(text: str | None, cpus: tuple[int, ...] | None) -> None:
    assert _cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", ",", "1-", "0-x"])
def test_the_bench_rejects_what_is_not_a_cpu_list(text: str) -> None:
    with pytest.raises(ValueError, match="CPU numbers"):
        _cpu_list(text)
