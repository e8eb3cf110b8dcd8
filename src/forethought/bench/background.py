"""CPU-bound harness work (training a predictor before the arms) in a daemon thread, so Ctrl-C need not wait.

A long synchronous step inside ``asyncio.run`` holds the event loop: an interrupt cancels the bench's task
only when the step ends (training the pattern predictor takes 2 s on an idle machine, 17 s at load 6).
:func:`in_daemon_thread` runs the step in a daemon thread and awaits its result, so a cancellation takes
effect at once and the process may exit while the thread still runs (a daemon thread does not hold up
the interpreter's exit; nothing it computes is used after the interrupt).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T], name: str = "bench-step") -> T:
    """``fn()`` in a daemon thread; its result or exception here. Cancelling the await abandons the thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled meanwhile: nobody waits for it
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # error is None: fn returned a T

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(), None)
        except BaseException as exc:  # handed to the awaiting task, which raises it
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: the bench is gone
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
