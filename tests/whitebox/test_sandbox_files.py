"""FileWorkspace: private copies, the content-hash commit rule, diffs applied, nothing left behind."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

import pytest

from forethought import Effect, Runtime, Tool, ToolCall
from forethought._core.tools import Snapshot, StateCell
from forethought.errors import SnapshotError
from forethought.sandbox.files import FileWorkspace, scan


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    live = tmp_path / "live"
    (live / "docs").mkdir(parents=True)
    (live / "a.txt").write_text("alpha")
    (live / "docs" / "b.txt").write_text("beta")
    (live / "old").mkdir()
    (live / "old" / "c.txt").write_text("gamma")
    os.symlink("a.txt", live / "link")
    spare = tmp_path / "spare"
    spare.mkdir()
    return live, spare


def test_implements_the_protocols(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    assert isinstance(ws, StateCell) and ws.live == live.resolve()
    snap = ws.snapshot()
    assert isinstance(snap, Snapshot)
    snap.discard()


def test_copy_is_private_and_hard_links_are_not_used(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    copy = snap.target
    assert copy != live and (copy / "a.txt").read_text() == "alpha"
    assert (copy / "a.txt").stat().st_ino != (live / "a.txt").stat().st_ino
    with (copy / "a.txt").open("a") as f:
        f.write("!")
    assert (live / "a.txt").read_text() == "alpha"
    assert os.readlink(copy / "link") == "a.txt"
    snap.discard()
    assert ws.copies() == []


def test_commit_applies_creations_modifications_and_deletions(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    copy = snap.target
    (copy / "a.txt").write_text("ALPHA")
    (copy / "new" / "deep").mkdir(parents=True)
    (copy / "new" / "deep" / "n.txt").write_text("new")
    (copy / "docs" / "b.txt").unlink()
    for p in (copy / "old").iterdir():
        p.unlink()
    (copy / "old").rmdir()
    (copy / "old").write_text("now a file")
    (copy / "link").unlink()
    os.symlink("docs", copy / "link")
    (copy / "exec.sh").write_text("#!/bin/sh\n")
    (copy / "exec.sh").chmod(0o755)
    expected = scan(copy)
    assert snap.commit() is True
    assert scan(live) == expected
    assert (live / "exec.sh").stat().st_mode & 0o777 == 0o755
    assert ws.copies() == []
    assert not [p for p in live.rglob(".forethought-*")]


def test_commit_refused_when_live_changed_since_the_snapshot(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    (snap.target / "a.txt").write_text("speculative")
    (live / "docs" / "b.txt").write_text("changed by an authoritative call")
    ws.mark_changed()
    before = scan(live)
    assert snap.commit() is False
    assert scan(live) == before
    assert ws.copies() == []


def test_created_file_conflicts_with_a_live_creation(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    (snap.target / "x.txt").write_text("spec")
    (live / "x.txt").write_text("live")
    assert snap.commit() is False
    assert (live / "x.txt").read_text() == "live"


def test_live_reads_do_not_invalidate_a_snapshot(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    (snap.target / "a.txt").write_text("spec")
    assert (live / "a.txt").read_text() == "alpha"
    ws.mark_changed()  # an authoritative read-only call ran
    assert snap.commit() is True
    assert (live / "a.txt").read_text() == "spec"


def test_abandoned_snapshots_are_cleaned_up(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    assert len(ws.copies()) == 1
    del snap
    gc.collect()
    assert ws.copies() == []
    ws.close()
    assert list(spare.iterdir()) == []


def test_sweep_removes_what_a_late_tool_recreates_in_a_finished_copy(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)
    snap = ws.snapshot()
    target = snap.target
    snap.discard()
    (target / "late").mkdir(parents=True)  # a worker thread still running after its speculation was dropped
    assert ws.copies() != []
    keep = ws.snapshot()
    assert ws.copies() == [keep.target.parent]  # swept at the next snapshot; the active copy stays
    keep.discard()
    ws.close()
    assert list(spare.iterdir()) == [] and ws.copies() == []
    assert ws.snapshot().commit() is True  # usable again after close


def test_bad_roots_and_special_files_are_refused(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    live, spare = dirs
    with pytest.raises(SnapshotError):
        FileWorkspace(tmp_path / "missing")
    os.mkfifo(live / "pipe")
    ws = FileWorkspace(live, temp_dir=spare)
    with pytest.raises(SnapshotError):
        ws.snapshot()
    assert ws.copies() == []


async def test_runtime_speculates_file_writes_through_snapshots(dirs: tuple[Path, Path]) -> None:
    live, spare = dirs
    ws = FileWorkspace(live, temp_dir=spare)

    def append(root: Path, path: str, text: str) -> str:
        p = root / path
        with p.open("a") as f:
            f.write(text)
        return p.read_text()

    t = Tool(name="append", fn=append, effect=Effect.ISOLATED_WRITE, state=ws, threaded=True,
             parameters={"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}})
    runtime = Runtime([t])
    session = runtime.session()
    first = ToolCall("append", {"path": "a.txt", "text": "1"})
    second = ToolCall("append", {"path": "a.txt", "text": "2"})
    session.speculate(first)
    session.speculate(second)
    await asyncio.wait([e.task for e in session._store if e.task is not None])  # both ran on copies
    one = await session.execute_detailed(first)
    two = await session.execute_detailed(second)
    assert (one.kind, one.value) == ("hit", "alpha1")
    assert (two.kind, two.value) == ("miss", "alpha12")  # its copy predates "1": conflict, re-run
    assert (live / "a.txt").read_text() == "alpha12"
    await session.close()
    runtime.close()
    gc.collect()
    assert ws.copies() == []
    ws.close()
    assert list(spare.iterdir()) == []
