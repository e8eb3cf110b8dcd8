"""A stateful MCP server (``mcp`` SDK) for the proxy's write-clock, key, progress and observability tests.

Run as ``python state_server.py LOG_PATH [STATE_FILE]``: with a state file, the value lives in it, so several
server processes share it (as two servers of one user share the files they both see). Every call is appended to
LOG_PATH as one JSON line (``{"tool", "id", "args"}``), so a test counts what reached the upstream, guesses
included (their ids are the proxy's). Tools (the read-only ones annotated so):

- ``read()``: the current value (read-only);
- ``peek()``: ``"ok"`` (read-only; changes nothing);
- ``write(value, delay_s)``: sets the value ``delay_s`` seconds after the call began, and then answers. The
  write goes on when the call is cancelled (it is shielded), and a cancelled call gets no answer, as the
  SDK's server does: the server goes on writing after the client stopped waiting;
- ``typed(x)``: what the server received of ``x``, its Python type and its JSON with keys sorted (read-only):
  ``3`` and ``3.0`` are different answers, the order of an object's keys (which JSON says is meaningless) is not;
- ``counter()``: how many times it has been called, itself included (read-only, but its reads are
  observable: every call, a guess too, moves the number on);
- ``steps(n)``: reports progress ``n`` times, then answers (read-only);
- ``logged(n)``: sends one log notification naming ``n``, then answers (read-only);
- ``tenant()``: the ``acme/tenant`` key of the request's ``_meta`` (read-only);
- ``mutable(n)``: read-only until ``flip()`` (destructive) makes it destructive and says the tools changed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

LOG = sys.argv[1]
STATE_FILE = sys.argv[2] if len(sys.argv) > 2 else None
server = MCPServer("state")
READ = ToolAnnotations(read_only_hint=True)
STATE: dict[str, Any] = {"value": "initial", "counter": 0}
WRITES: set[asyncio.Task[None]] = set()


def current() -> str:
    if STATE_FILE is not None:
        try:
            with open(STATE_FILE, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return "initial"
    return str(STATE["value"])


def set_value(new: str) -> None:
    if STATE_FILE is not None:
        with open(STATE_FILE, "w", encoding="utf-8") as f:
            f.write(new)
    STATE["value"] = new


def note(tool: str, ctx: Context, **args: Any) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "id": ctx.request_id, "args": args}) + "\n")


@server.tool(annotations=READ)
async def read(ctx: Context) -> str:
    """The current value."""
    note("read", ctx)
    return current()


@server.tool(annotations=READ)
async def peek(ctx: Context) -> str:
    """Changes nothing."""
    note("peek", ctx)
    return "ok"


@server.tool()
async def write(ctx: Context, value: str, delay_s: float) -> str:
    """Set the value after ``delay_s`` seconds, even if the call is cancelled meanwhile."""
    note("write", ctx, value=value, delay_s=delay_s)

    async def land() -> None:
        await asyncio.sleep(delay_s)
        set_value(value)

    task = asyncio.ensure_future(land())
    WRITES.add(task)
    task.add_done_callback(WRITES.discard)
    await asyncio.shield(task)
    return "written"


@server.tool(annotations=READ)
async def typed(ctx: Context, x: Any) -> str:
    """What the server received of ``x``."""
    note("typed", ctx, x=x)
    return f"{type(x).__name__} {json.dumps(x, sort_keys=True, ensure_ascii=False)}"


@server.tool(annotations=READ)
async def counter(ctx: Context) -> str:
    """How many times this tool has been called, this call included."""
    note("counter", ctx)
    STATE["counter"] += 1
    return str(STATE["counter"])


@server.tool(annotations=READ)
async def steps(ctx: Context, n: int) -> str:
    """Report progress ``n`` times, then answer."""
    note("steps", ctx, n=n)
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1}")
    return f"done {n}"


@server.tool(annotations=READ)
async def logged(ctx: Context, n: int) -> str:
    """Send one log notification naming ``n``, then answer (read-only)."""
    note("logged", ctx, n=n)
    await ctx.info(f"logged {n}")
    return f"logged {n}"


@server.tool(annotations=READ)
async def tenant(ctx: Context) -> str:
    """The ``acme/tenant`` key of the request's ``_meta`` (read-only): a server can tell two calls with
    different ``_meta`` apart."""
    meta = ctx.request_context.meta
    extra = (meta if isinstance(meta, dict) else getattr(meta, "model_extra", None) or {}) if meta is not None else {}
    note("tenant", ctx)
    return f"tenant {extra.get('acme/tenant')}"


async def _mutable(ctx: Context, n: int) -> str:
    """Read-only until ``flip``: then it counts as a write (and says so in its annotations)."""
    note("mutable", ctx, n=n)
    return f"mutable {n}"


server.add_tool(_mutable, name="mutable", annotations=READ)


@server.tool()
async def flip(ctx: Context) -> str:
    """Make ``mutable`` a destructive tool (its annotations say so) and tell the client the tools changed."""
    note("flip", ctx)
    server.remove_tool("mutable")
    server.add_tool(_mutable, name="mutable", annotations=ToolAnnotations(read_only_hint=False,
                                                                         destructive_hint=True))
    await ctx.session.send_tool_list_changed()
    return "flipped"


if __name__ == "__main__":
    server.run("stdio")
