"""Watching a speculation from outside the authoritative path: called back once it has ended, or given a
moment to start its tool before a claim would cancel it (the agent, code execution and servers use these)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from forethought._core.calls import CallKey
from forethought._core.entry import SettledSpeculation, settled_of
from forethought._core.lifecycle import State
from forethought._core.store import SpeculationStore

__all__ = ["wait_started", "watch_settled"]

_log = logging.getLogger(__name__)


def watch_settled(store: SpeculationStore, key: CallKey, callback: Callable[[SettledSpeculation], object],
                  copy: bool) -> bool:
    """Call ``callback`` once the speculation under ``key`` in ``store`` has ended (see
    :meth:`~forethought._core.session.Session.on_settled`); ``False`` when there is none."""
    entry = store.get(key)
    task = None if entry is None else entry.task
    if entry is None or task is None:
        return False

    def done(_: asyncio.Task[Any]) -> None:
        try:
            callback(settled_of(entry, copy))
        except Exception as exc:
            _log.error("a settled-speculation callback for %s failed: %s", entry.tool.label,
                       type(exc).__name__, exc_info=not entry.tool.hide_key)

    if copy:
        entry.watched = True
    task.add_done_callback(done)
    return True


async def wait_started(store: SpeculationStore, key: CallKey, grace_s: float, poll_s: float) -> None:
    """Give the speculation under ``key`` up to ``grace_s`` to start its tool (or end), polling every
    ``poll_s``."""
    entry = store.get(key)
    if entry is None or entry.task is None:
        return
    for _ in range(int(grace_s / poll_s)):
        if entry.state is not State.QUEUED or entry.task.done():
            return
        await asyncio.sleep(poll_s)
