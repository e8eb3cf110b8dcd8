"""JSON-RPC over the pipes the proxy took over from its warm-up: its own stdin and stdout, and a running
upstream process's.

The ``mcp`` SDK's stdio transports start their own process and read their own stdin from the beginning; a
proxy that started its upstream first and relayed the first lines itself (:mod:`~forethought.mcp.warmup`)
goes on from where that left off, with bytes already read (the start of the next message). These transports
read newline-delimited JSON-RPC from a file descriptor (after that prefix) and write it, exactly as the SDK's
do: one message per line, parsed with the SDK's own message adapter (a line that does not parse is handed on
as the exception, as the SDK does), written as the SDK writes it. :func:`process_streams` ends the upstream as
the SDK does: its stdin closed, a grace period, then its whole process group terminated, then killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

LINE_LIMIT = 64 * 1024 * 1024
"""The longest line (one message) read, in bytes."""
GRACE_S = 2.0
"""How long the upstream has to exit after its stdin is closed, and again after it is terminated."""

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        log.warning("a message that is not JSON-RPC: %s", type(exc).__name__)
        return exc


async def _reader(fd: int, prefix: bytes, out: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    if prefix:
        reader.feed_data(prefix)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(fd, "rb", buffering=0, closefd=False))
    try:
        async with out:
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.strip():
                    await out.send(_parse(line))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
        return
    finally:
        transport.close()


async def _writer(fd: int, messages: MemoryObjectReceiveStream[SessionMessage]) -> None:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                        os.fdopen(fd, "wb", buffering=0, closefd=False))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        async with messages:
            async for item in messages:
                json = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(json.encode("utf-8") + b"\n")
                await writer.drain()
    except (ConnectionError, BrokenPipeError, anyio.ClosedResourceError):
        return
    finally:
        transport.close()


@contextlib.asynccontextmanager
async def fd_streams(read_fd: int, write_fd: int, prefix: bytes = b"") -> AsyncIterator[Streams]:
    """The message streams over two file descriptors (``prefix``: bytes already read from ``read_fd``)."""
    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)
    tasks = [asyncio.create_task(_reader(read_fd, prefix, incoming_send)),
             asyncio.create_task(_writer(write_fd, outgoing_receive))]
    try:
        yield incoming, outgoing
    finally:
        outgoing.close()
        incoming.close()
        with anyio.move_on_after(0.5, shield=True):
            await asyncio.wait([tasks[1]])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def process_streams(process: subprocess.Popen[Any], prefix: bytes = b"") -> AsyncIterator[Streams]:
    """The message streams of a running upstream process; it is stopped when they close."""
    assert process.stdin is not None and process.stdout is not None
    try:
        async with fd_streams(process.stdout.fileno(), process.stdin.fileno(), prefix) as streams:
            yield streams
    finally:
        with anyio.CancelScope(shield=True):
            await stop(process)


async def stop(process: subprocess.Popen[Any]) -> None:
    """Close the process's stdin, give it ``GRACE_S`` to exit, then terminate and kill its process group."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, sig)
        for _ in range(int(GRACE_S / 0.01)):
            if process.poll() is not None:
                break
            await asyncio.sleep(0.01)
        if process.returncode is not None:
            break
    with contextlib.suppress(OSError):
        if process.stdout is not None:
            process.stdout.close()
