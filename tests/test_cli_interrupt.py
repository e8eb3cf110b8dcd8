"""Interrupting a command: one line, exit status 130 (143 for SIGTERM), no worker left behind; help that is not
cut when piped.

The bench is started in a session of its own (as a terminal's foreground job is) and interrupted once its
workers exist — the engine process and the pattern predictor's worker processes — either the way a
terminal's Ctrl-C does (SIGINT to the whole process group) or the way a script does (SIGINT to the command
alone, twice). Waits are on what the processes do (a worker appears, the group empties), each under a
generous guard, never on a fixed delay.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forethought.bench.background import in_daemon_thread
from forethought.cli import stop_workers

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")

GUARD_S = 120.0
"""The most any step may take before the test gives up (a hang, not a speed figure)."""


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` ignores SIGINT (a worker that is up and leaves stopping to its parent)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone: nothing of it can print
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def _workers_up(bench: subprocess.Popen[str]) -> bool:
    """The predictor workers are up (spawned once the engine serves, each ignoring SIGINT once loaded)."""
    workers = [pid for pid in _group(bench.pid) if "multiprocessing.spawn" in _cmdline(pid)]
    return bool(workers) and all(_ignores_sigint(pid) for pid in workers)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


INTERRUPTIBLE = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
"""Start a command with SIGINT's default action, as a terminal's foreground job has it, whatever this test
inherited (a background ``make test`` started by a script runs with SIGINT ignored, and so would the bench)."""


def _start_bench(tmp_path: Path, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    disposition = INTERRUPTIBLE.replace("SIG_DFL", "SIG_IGN") if sigint_ignored else INTERRUPTIBLE
    prefix = [sys.executable, "-c", disposition]
    argv = [*prefix, "-m", "forethought.cli", "bench", "--trajectories", "4", "--agents", "2",
            "--repeats", "2", "--time-scale", "0.05", "--out", str(tmp_path)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=tmp_path)


@pytest.mark.parametrize(("how", "status", "line"), [("terminal", 130, "forethought: interrupted"),
                                                     ("script", 130, "forethought: interrupted"),
                                                     ("terminate", 143, "forethought: terminated"),
                                                     ("terminate-background", 143, "forethought: terminated")])
def test_an_interrupted_bench_exits_with_one_line_and_leaves_no_worker(tmp_path: Path, how: str, status: int,
                                                                        line: str) -> None:
    bench = _start_bench(tmp_path, sigint_ignored=how == "terminate-background")
    try:
        # the engine and the predictor workers run beside the bench once the arms have started
        _wait_for(lambda: _workers_up(bench) or bench.poll() is not None, "the bench's workers")
        assert bench.poll() is None, bench.communicate()[1][-3000:]
        if how == "terminal":  # Ctrl-C: every process of the foreground group gets SIGINT
            os.killpg(bench.pid, signal.SIGINT)
        elif how == "script":  # a script interrupts the command alone, and impatiently a second time
            bench.send_signal(signal.SIGINT)
            bench.send_signal(signal.SIGINT)
        else:  # kill, timeout, a service manager
            bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=GUARD_S)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    assert bench.returncode == status
    assert err.strip().splitlines() == [line], err[-3000:]
    _wait_for(lambda: not _group(bench.pid), "the bench's workers to exit")


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def test_stop_workers_ends_every_worker_process() -> None:
    children = [multiprocessing.get_context("spawn").Process(target=_sleep_forever, daemon=True) for _ in range(2)]
    for child in children:
        child.start()
    assert stop_workers() == 2
    assert not any(child.is_alive() for child in children) and not multiprocessing.active_children()


def test_help_is_not_cut_when_piped() -> None:
    done = subprocess.run([sys.executable, "-m", "forethought.cli", "bench", "--help"], capture_output=True,
                          text=True, timeout=GUARD_S, check=False, env={**os.environ, "TERMINAL_WIDTH": ""})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout  # rich's ellipsis: a cut line
    assert "serial,spec-model,spec-stream,spec-pattern,pattern+stream,all,oracle" in done.stdout


async def test_a_step_in_a_daemon_thread_gives_its_result_or_its_error() -> None:
    assert await in_daemon_thread(lambda: 6 * 7) == 42

    def broken() -> int:
        raise ValueError("no training data")

    with pytest.raises(ValueError, match="no training data"):
        await in_daemon_thread(broken)


async def test_cancelling_a_step_in_a_daemon_thread_does_not_wait_for_it() -> None:
    """What lets Ctrl-C stop the bench while it trains its predictor (17 s at load 6) at once."""
    started, release = threading.Event(), threading.Event()

    def step() -> bool:
        started.set()
        return release.wait(GUARD_S)

    task = asyncio.create_task(in_daemon_thread(step))
    assert await asyncio.to_thread(started.wait, GUARD_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, GUARD_S)  # a step that held the cancellation would time out here
    assert not release.is_set()  # the step is still running: the await did not wait for it
    release.set()
