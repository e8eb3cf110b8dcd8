"""A small MCP server for the proxy tests: progress, a slow tool that notes its cancellation, a crash.

Run as ``python probe_server.py LOG_PATH [PORT]`` (with a port: streamable HTTP on 127.0.0.1). Every call,
and every cancellation it sees, is appended to LOG_PATH as one JSON line, so a test can count what really
reached the upstream.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

LOG = sys.argv[1]
server = MCPServer("probe")
READ = ToolAnnotations(read_only_hint=True)


def note(event: str, **fields: object) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


@server.tool(annotations=READ)
async def lookup(key: str) -> str:
    """Read one value (read-only)."""
    note("call", tool="lookup", key=key)
    return f"value-of-{key}"


@server.tool(annotations=READ)
async def counted(ctx: Context, steps: int) -> str:
    """Report progress ``steps`` times, then answer."""
    note("call", tool="counted", steps=steps)
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"done {steps}"


@server.tool(annotations=READ)
async def slow(seconds: float) -> str:
    """Sleep; a cancellation is noted in the log."""
    note("call", tool="slow", seconds=seconds)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note("cancelled", tool="slow")
        raise
    return "slept"


@server.tool(annotations=READ)
async def failing(key: str) -> str:
    """Always a tool error (isError)."""
    note("call", tool="failing", key=key)
    raise ValueError(f"no such key {key}")


@server.tool()
async def crash() -> str:
    """Exit the server process at once."""
    note("call", tool="crash")
    os._exit(3)


@server.tool()
async def crash_after(seconds: float) -> str:
    """Exit the server process ``seconds`` into the call (no answer ever comes)."""
    note("call", tool="crash_after", seconds=seconds)
    await asyncio.sleep(seconds)
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
