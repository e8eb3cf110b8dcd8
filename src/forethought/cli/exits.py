"""How a command ends: one line and exit status 2 for a bad input, 130 (143) after an interrupt (SIGTERM), with
its worker processes stopped; ``--debug`` lets errors propagate with their traceback instead."""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from forethought.errors import ForethoughtError

T = TypeVar("T")

_DEBUG = False
"""``--debug``: let errors propagate with their traceback instead of one line."""
INTERRUPTED = 130
"""The exit status of a command stopped by an interrupt (128 + SIGINT, as shells report it)."""
TERMINATED = 143
"""The exit status of a command stopped by SIGTERM (128 + SIGTERM)."""
STOP_WAIT_S = 5.0
"""How long a stopped worker process may take to exit before it is killed."""
PIPED_WIDTH = 140
"""Columns for tables and help when the output is not a terminal (rich would cut at 80)."""


def stop_workers(wait_s: float = STOP_WAIT_S) -> int:
    """Terminate this process's worker processes (then kill those that linger); returns how many there were."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(wait_s)
        if child.is_alive():
            child.kill()
            child.join(wait_s)
    return len(children)


_terminated = False
"""A SIGTERM arrived: it takes the interrupt's way out (see :func:`_on_sigterm`)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (``kill``, ``timeout``) stops the command as Ctrl-C does: the running bench is cancelled and its
    workers stopped, rather than the process vanishing with its workers and their semaphores behind it. It
    does so even where SIGINT is ignored (a command started in the background by a script)."""
    global _terminated
    _terminated = True
    on_interrupt = signal.getsignal(signal.SIGINT)
    if callable(on_interrupt):  # asyncio's (cancels the running job) or Python's own (raises KeyboardInterrupt)
        on_interrupt(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def interrupted() -> NoReturn:
    """The way out after an interrupt: further interrupts are ignored, workers stopped, one line, status 130."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # asked once is enough: the rest of the way out is not cut short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop_workers()
    typer.echo(f"forethought: {'terminated' if _terminated else 'interrupted'}", err=True)
    raise typer.Exit(TERMINATED if _terminated else INTERRUPTED)


_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
"""click's UsageError (typer vendors click as a private module in recent releases, imports it in older ones)."""


class Commands(TyperGroup):
    """The command group: an error of the forethought family, a bad option value or an unreadable file is one
    line, exit status 2; an interrupt is one line, exit status 130."""

    def invoke(self, ctx: Any) -> Any:
        before = signal.getsignal(signal.SIGTERM)
        if before is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            if _DEBUG:
                raise
            interrupted()
        except _USAGE_ERROR as exc:
            if _DEBUG:
                raise
            failed = getattr(exc, "ctx", None)
            where = f" (see: {failed.command_path} --help)" if failed is not None else ""
            typer.echo(f"error: {exc.format_message()}{where}", err=True)  # type: ignore[attr-defined]
            raise typer.Exit(2) from None
        except (ForethoughtError, OSError) as exc:
            if _DEBUG:
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        finally:
            if before is signal.SIG_DFL:  # the command ran in a process that lives on (a test's CliRunner)
                signal.signal(signal.SIGTERM, before)


def set_debug(debug: bool) -> None:
    """``--debug``: errors propagate with their traceback."""
    global _DEBUG
    _DEBUG = debug


def run(job: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(_stoppable(job))  # errors: one line via Commands


async def _stoppable(job: Callable[[], Awaitable[T]]) -> T:
    """Run ``job``; the first SIGINT (unless ignored, as in a background job) or SIGTERM cancels it, and later
    ones change nothing. A cancellation ends at the job's next await, never inside a synchronous step (a
    worker half spawned would print a traceback of its own); the job's own cleanup stops its workers."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stopping = False

    def stop(terminate: bool) -> None:
        nonlocal stopping
        global _terminated
        if not stopping:
            stopping, _terminated = True, terminate
            task.cancel()

    signals = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else [])
    before = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        loop.add_signal_handler(sig, stop, sig == signal.SIGTERM)
    try:
        return await job()
    except asyncio.CancelledError:
        if stopping:
            raise KeyboardInterrupt from None  # the interrupt's way out: interrupted()
        raise
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
            if before[sig] is not None:  # None: a handler installed outside Python, left as remove_ set it
                signal.signal(sig, before[sig])
