"""Serving an app from a child process on a free loopback port, as a real remote engine would be.

Benchmarks run the simulated engine here: the child has its own interpreter (its own GIL and event
loop), so CPU work on the client side — predictors, the agent loop — can slow the client down but can
never stall the engine's clock. The parent starts ``python -m forethought.serve.subprocess_server``,
sends it an importable factory and its arguments (pickled, over stdin), and reads back the base URL; the
child binds ``127.0.0.1:0`` and serves until its stdin closes or it is terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from forethought.serve.http import STARTUP_TIMEOUT_S, serve_in_process

SHUTDOWN_WAIT_S = 5.0
READY_PREFIX = "serving "


@contextlib.asynccontextmanager
async def serve_in_subprocess(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncIterator[str]:
    """Run ``factory(*args, **kwargs)`` (an ASGI app) in a child process; yield its base URL."""
    payload = pickle.dumps((factory, args, kwargs))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "forethought.serve.subprocess_server",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(len(payload).to_bytes(8, "big") + payload)
        await process.stdin.drain()
        try:
            line = (await asyncio.wait_for(process.stdout.readline(), STARTUP_TIMEOUT_S * 3)).decode()
        except TimeoutError:
            raise RuntimeError("the engine process did not start in time") from None
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"the engine process failed to start: {line.strip() or 'no output'}")
        yield line[len(READY_PREFIX):].strip()
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), SHUTDOWN_WAIT_S)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _serve_from_stdin() -> None:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    size = int.from_bytes(await reader.readexactly(8), "big")
    factory, args, kwargs = pickle.loads(await reader.readexactly(size))
    app = factory(*args, **kwargs)
    async with serve_in_process(app) as url:
        sys.stdout.write(f"{READY_PREFIX}{url}\n")
        sys.stdout.flush()
        await reader.read()  # returns when the parent closes our stdin (or dies)


if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when this engine stops (it
    # closes our stdin or terminates us), so an interrupt here would only print a second traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_serve_from_stdin())
    except Exception as exc:
        sys.stdout.write(f"error: {type(exc).__name__}: {exc}\n")
        sys.stdout.flush()
        raise SystemExit(1) from None
