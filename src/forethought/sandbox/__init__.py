"""Snapshots for stateful tools: in-memory objects and file workspaces, with their commit rules.

A state cell (:class:`~forethought._core.tools.StateCell`) hands out snapshots; a speculative ISOLATED_WRITE
call runs against a snapshot, and its effects reach the live state only through ``commit()``, which
refuses when the live state has moved on since the snapshot. See ``docs/sandbox.md``.
"""

from forethought.sandbox.files import FileSnapshot, FileWorkspace
from forethought.sandbox.fingerprint import fingerprint
from forethought.sandbox.objects import LazyTarget, ObjectSnapshot, ObjectState, resolve_target

__all__ = [
    "FileSnapshot",
    "FileWorkspace",
    "LazyTarget",
    "ObjectSnapshot",
    "ObjectState",
    "fingerprint",
    "resolve_target",
]
