"""The upstream's transport, held in a task of its own: when it fails, the session goes on.

The ``mcp`` SDK's transports run in an anyio task group entered by the code that opens them; when one of
their tasks fails (an HTTP upstream that stops answering: its next request's ``POST`` cannot connect), the
group cancels that code's whole body, which for the proxy is the relay of the client's session: the
requests waiting then were never answered and the client hung until its own timeout. :func:`held` enters
the transport in a task of its own instead, so a failure there only closes the upstream's streams: the
relay sees its upstream end, answers every waiting and later request with the "upstream is gone" error,
and keeps serving until the client disconnects, as it does when a stdio upstream exits. The failure is
logged (its type only: its text may name the upstream's URL) and not raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@contextlib.asynccontextmanager
async def held(transport: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """Enter ``transport`` in a task of its own and yield what it yields; it is exited when the block ends.

    A failure while entering it is raised here; one while the block runs closes what it yielded (as the
    transport's own exit does) and is logged, never raised into the block or out of it.
    """
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[T] = loop.create_future()
    release = asyncio.Event()

    async def hold() -> None:
        try:
            async with transport as streams:
                opened.set_result(streams)
                await release.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
                return
            if not isinstance(exc, asyncio.CancelledError):
                log.warning("the upstream's transport failed while serving: %s", type(exc).__name__)
            if not isinstance(exc, Exception | BaseExceptionGroup | asyncio.CancelledError):
                raise  # SystemExit, KeyboardInterrupt: not ours to keep

    task = loop.create_task(hold())
    try:
        streams = await asyncio.shield(opened)
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    try:
        yield streams
    finally:
        release.set()
        await asyncio.shield(task)
