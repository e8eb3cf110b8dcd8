"""Health events of shared stores: degraded (fell back to local), recovered, rejected (bad MAC), dropped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoreEvent:
    """A change in a shared store's health: ``kind`` is ``degraded``, ``recovered``, ``rejected`` or ``dropped``."""

    kind: str
    store: str
    detail: str = ""


EventSink = Callable[[StoreEvent], None]


def emit(sink: EventSink | None, event: StoreEvent) -> None:
    """Log ``event`` and hand it to ``sink``; a failing sink is logged, never propagated."""
    log.warning("shared store %s: %s %s", event.store, event.kind, event.detail)
    if sink is None:
        return
    try:
        sink(event)
    except Exception:
        log.exception("store event subscriber failed")
