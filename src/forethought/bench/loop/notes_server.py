"""A small MCP server of project notes, for the loop bench and the daemon's tests: reads, writes, latency.

``python -m forethought.bench.loop.notes_server STATE [--latency S] [--log PATH]`` serves, on stdio, a
folder of text notes kept in the JSON file STATE (read at every call and written after every change, like a
filesystem: a change made to the file by anything else shows, and arms can compare final states).
``read_note``, ``list_notes``, ``search_notes`` and ``note_info`` say they only read (``readOnlyHint``);
``write_note`` and ``append_note`` write and say nothing. Every call sleeps ``--latency`` seconds first (a
server that does real work: a remote API, a database, a build), and with ``--log`` it is appended to PATH as
one JSON line, so a run can count what really reached the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="notes_server")
    parser.add_argument("state")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--log", default=None)
    options = parser.parse_args(argv)
    state = Path(options.state)
    notes: dict[str, str] = {}
    server = MCPServer("notes")

    def note(tool: str, fields: dict[str, object]) -> None:
        if options.log:
            with open(options.log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"tool": tool, **fields}, sort_keys=True) + "\n")

    def load() -> None:
        notes.clear()
        if state.exists():
            notes.update(json.loads(state.read_text(encoding="utf-8")))

    async def work(tool: str, **fields: object) -> None:
        note(tool, fields)  # small local files: the server's own work is the latency below
        if options.latency > 0:
            await asyncio.sleep(options.latency)
        load()

    def save() -> None:
        temp = state.with_suffix(".tmp")
        temp.write_text(json.dumps(notes, sort_keys=True, indent=1), encoding="utf-8")
        os.replace(temp, state)

    @server.tool(annotations=READ)
    async def read_note(path: str) -> str:
        """Read one note."""
        await work("read_note", path=path)
        if path not in notes:
            raise ValueError(f"no note at {path}")
        return notes[path]

    @server.tool(annotations=READ)
    async def list_notes(folder: str = "") -> str:
        """List the notes under a folder."""
        await work("list_notes", folder=folder)
        return "\n".join(sorted(p for p in notes if p.startswith(folder))) or "(none)"

    @server.tool(annotations=READ)
    async def search_notes(text: str) -> str:
        """The notes whose text contains ``text``, with the matching lines."""
        await work("search_notes", text=text)
        hits = [f"{p}: {line}" for p, body in sorted(notes.items()) for line in body.splitlines() if text in line]
        return "\n".join(hits) or "(no match)"

    @server.tool(annotations=READ)
    async def note_info(path: str) -> str:
        """Size and line count of a note."""
        await work("note_info", path=path)
        body = notes.get(path)
        return "missing" if body is None else json.dumps({"chars": len(body), "lines": len(body.splitlines())})

    @server.tool()
    async def write_note(path: str, text: str) -> str:
        """Create or replace a note."""
        await work("write_note", path=path)
        notes[path] = text
        save()
        return f"wrote {path}"

    @server.tool()
    async def append_note(path: str, text: str) -> str:
        """Append a line to a note."""
        await work("append_note", path=path)
        notes[path] = notes.get(path, "") + ("\n" if notes.get(path) else "") + text
        save()
        return f"appended to {path}"

    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
