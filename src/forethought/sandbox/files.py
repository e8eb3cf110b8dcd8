"""Snapshots of a directory workspace: speculative calls run in a private copy, commit applies the diff.

:class:`FileWorkspace` is a :class:`~forethought._core.tools.StateCell` for a directory. A snapshot copies the
workspace into a fresh temporary directory (a reflink clone where the file system supports it, a plain
copy otherwise) and records a manifest: for every path, its kind and the content hash of the copy. The
speculative call runs with the copy's :class:`~pathlib.Path` as its target.

Commit rule. The copy's changes (files and directories created, modified or deleted, compared with the
manifest) are applied to the live root only if every path the call may have depended on still has, in
the live root, the hash it had at snapshot time. A plain ``Path`` cannot tell which files a tool read (an
existence check or a ``stat`` leaves no trace), so the read set is the whole manifest: commit succeeds
only when the live workspace is, path by path and byte for byte, the one the call ran against. That is
content-based, not version-based: authoritative calls that only read (``cat``, ``ls``) do not invalidate
snapshots. Otherwise commit returns ``False``, changes nothing, and the caller re-runs the call.

Hard links are never used for the copy: an in-place write through a hard link would change the live file,
and permission bits do not stop a process running as root. Snapshot and commit hold one lock; the
runtime's call ordering keeps a session's authoritative writes out of a commit. Copies are removed on
commit, on discard, and when an abandoned snapshot is garbage-collected; a tool still running on a worker
thread after its speculation was dropped may recreate files in its copy, which the next snapshot, commit or
:meth:`FileWorkspace.sweep` removes, and :meth:`FileWorkspace.close` removes the whole temporary area.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forethought.errors import SnapshotError

_FICLONE = 0x40049409
"""Linux ioctl that clones a file's extents (reflink) on btrfs, XFS and similar file systems."""

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class PathState:
    """One path of a manifest: ``kind`` is ``file``, ``dir`` or ``link``; ``digest`` its content."""

    kind: str
    digest: str = ""
    mode: int = 0


Manifest = dict[str, PathState]
"""Relative POSIX path -> state, for every file, directory and symlink under a root."""


def _hash_file(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _state_of(path: Path) -> PathState:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return PathState("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return PathState("dir", mode=stat.S_IMODE(st.st_mode))
    if stat.S_ISREG(st.st_mode):
        return PathState("file", _hash_file(path), stat.S_IMODE(st.st_mode))
    raise SnapshotError(f"{path}: only files, directories and symlinks can be snapshotted")


def scan(root: Path) -> Manifest:
    """The manifest of everything under ``root`` (not following symlinks)."""
    out: Manifest = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in [*dirnames, *filenames]:
            p = base / name
            out[p.relative_to(root).as_posix()] = _state_of(p)
    return out


def _clone_file(src: Path, dst: Path) -> None:
    """Copy one file's bytes and mode, as a reflink when the file system can."""
    try:
        import fcntl

        with src.open("rb") as s, dst.open("wb") as d:
            fcntl.ioctl(d.fileno(), _FICLONE, s.fileno())
    except (ImportError, OSError):
        shutil.copyfile(src, dst)
    shutil.copymode(src, dst)


def _copy_tree(src: Path, dst: Path) -> Manifest:
    """Copy ``src`` into the empty directory ``dst``; the manifest describes the copy as written."""
    manifest: Manifest = {}
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        base = Path(dirpath)
        rel_base = base.relative_to(src)
        for name in sorted(dirnames):
            s = base / name
            d = dst / rel_base / name
            rel = (rel_base / name).as_posix()
            if s.is_symlink():
                target = os.readlink(s)
                os.symlink(target, d)
                manifest[rel] = PathState("link", target)
            else:
                d.mkdir()
                shutil.copymode(s, d)
                manifest[rel] = _state_of(d)
        for name in sorted(filenames):
            s = base / name
            d = dst / rel_base / name
            rel = (rel_base / name).as_posix()
            if s.is_symlink():
                target = os.readlink(s)
                os.symlink(target, d)
                manifest[rel] = PathState("link", target)
            elif s.is_file():
                _clone_file(s, d)
                manifest[rel] = _state_of(d)
            else:
                raise SnapshotError(f"{s}: only files, directories and symlinks can be snapshotted")
    return manifest


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


class FileWorkspace:
    """A live directory handing out copy snapshots; see the module docstring for the commit rule.

    All copies live under one private temporary area per workspace. A copy is removed when its snapshot
    is committed, discarded or garbage-collected; anything a still-running tool recreates in a finished
    copy is swept at the next snapshot or commit, and the whole area goes on :meth:`close` (or at exit).
    """

    def __init__(self, root: str | os.PathLike[str], temp_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise SnapshotError(f"{self.root} is not a directory")
        self.temp_dir = Path(temp_dir) if temp_dir is not None else None
        self._lock = threading.RLock()  # reentrant: a garbage-collected snapshot may release inside a lock
        self._version = 0
        self._area: Path | None = None
        self._area_cleanup: weakref.finalize[Any, Any] | None = None
        self._active: set[str] = set()

    @property
    def live(self) -> Path:
        """The live root (authoritative calls run against it)."""
        return self.root

    @property
    def version(self) -> int:
        """Count of authoritative writes and commits (informational; commit compares content)."""
        return self._version

    def mark_changed(self) -> None:
        with self._lock:
            self._version += 1

    def copies(self) -> list[Path]:
        """The snapshot copies currently on disk (active ones, and finished ones not yet swept)."""
        area = self._area
        return sorted(area.iterdir()) if area is not None and area.exists() else []

    def sweep(self) -> None:
        """Remove every copy on disk whose snapshot has finished."""
        area = self._area
        if area is None or not area.exists():
            return
        with self._lock:
            for holder in area.iterdir():
                if holder.name not in self._active:
                    shutil.rmtree(holder, ignore_errors=True)

    def close(self) -> None:
        """Remove the temporary area with every copy in it; later snapshots start a new one."""
        with self._lock:
            if self._area_cleanup is not None:
                self._area_cleanup()
            self._area = self._area_cleanup = None
            self._active.clear()

    def snapshot(self) -> FileSnapshot:
        """Copy the live workspace into a fresh directory of the temporary area."""
        self.sweep()
        with self._lock:
            if self._area is None or not self._area.exists():
                self._area = Path(tempfile.mkdtemp(prefix="forethought-ws-", dir=self.temp_dir))
                self._area_cleanup = weakref.finalize(self, shutil.rmtree, self._area, True)
            holder = Path(tempfile.mkdtemp(prefix="copy-", dir=self._area))
            try:
                copy_root = holder / "workspace"
                copy_root.mkdir()
                manifest = _copy_tree(self.root, copy_root)
            except BaseException:
                shutil.rmtree(holder, ignore_errors=True)
                raise
            self._active.add(holder.name)
        return FileSnapshot(self, holder, copy_root, manifest)

    def _release(self, holder: Path) -> None:
        with self._lock:
            self._active.discard(holder.name)
        shutil.rmtree(holder, ignore_errors=True)

    def _apply(self, base: Manifest, copy_root: Path) -> bool:
        with self._lock:
            if scan(self.root) != base:
                return False
            result = scan(copy_root)
            deleted = [p for p in base if p not in result or result[p].kind != base[p].kind]
            changed = [p for p, s in result.items() if base.get(p) != s]
            for rel in sorted(deleted, key=lambda p: -p.count("/")):
                _remove(self.root / rel)
            for rel in sorted(changed, key=lambda p: (p.count("/"), p)):
                self._install(copy_root / rel, self.root / rel, result[rel], base.get(rel))
            self._version += 1
            return True

    @staticmethod
    def _install(src: Path, dst: Path, new: PathState, old: PathState | None) -> None:
        if new.kind == "dir":
            if old is None or old.kind != "dir":
                dst.mkdir()
            os.chmod(dst, new.mode)
        elif new.kind == "link":
            if old is not None and old.kind == "link":
                dst.unlink()
            os.symlink(new.digest, dst)
        else:
            fd, tmp_name = tempfile.mkstemp(prefix=".forethought-", dir=dst.parent)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                _clone_file(src, tmp)
                os.replace(tmp, dst)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise


class FileSnapshot:
    """A private copy of a :class:`FileWorkspace` with the manifest it was taken at."""

    def __init__(self, workspace: FileWorkspace, holder: Path, copy_root: Path, manifest: Manifest) -> None:
        self._workspace = workspace
        self._holder = holder
        self._copy_root = copy_root
        self.manifest = manifest
        self._done = False
        self._cleanup = weakref.finalize(self, workspace._release, holder)

    @property
    def target(self) -> Path:
        """The copy's root: the speculative call reads and writes here."""
        return self._copy_root

    def commit(self) -> bool:
        """Apply the copy's changes to the live root if the live root still matches the manifest."""
        if self._done:
            return False
        self._done = True
        try:
            return self._workspace._apply(self.manifest, self._copy_root)
        finally:
            self._cleanup()
            self._workspace.sweep()

    def discard(self) -> None:
        """Remove the copy; the live root is untouched."""
        self._done = True
        self._cleanup()
