"""Client set-up: the configuration snippet that puts the proxy in front of a server, per MCP client.

:func:`snippet` returns text for the user to paste (it writes nothing): the ``mcpServers`` JSON that Claude
Code (``.mcp.json``) and Cursor (``~/.cursor/mcp.json``) read, or the ``[mcp_servers.NAME]`` TOML table of
Codex (``~/.codex/config.toml``). The server's command becomes the proxy's upstream, after ``--``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

from forethought.mcp.errors import McpProxyError

CLIENTS = ("claude-code", "cursor", "codex")
WHERE = {"claude-code": ".mcp.json in the project (or: claude mcp add-json NAME '<the server object>')",
         "cursor": "~/.cursor/mcp.json (or .cursor/mcp.json in the project)",
         "codex": "~/.codex/config.toml"}
PROXY_COMMAND = "forethought"


def server_name(command: Sequence[str]) -> str:
    """A name for the server entry, from its command (``uvx mcp-server-git`` -> ``git``)."""
    words = [w for w in command if not w.startswith("-")]
    picked = next((w for w in words if "mcp" in w or "server" in w), words[-1] if words else "server")
    base = os.path.basename(picked.split("@")[0] if not picked.startswith("@") else picked.split("/")[-1])
    base = re.sub(r"^(mcp-server-|server-|mcp-)|(-mcp|-server)$", "", base.split("@")[0]) or "server"
    return re.sub(r"[^A-Za-z0-9_-]", "-", base)


def proxy_args(command: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    return ["mcp-proxy", *options, "--", *command]


def snippet(client: str, command: Sequence[str], name: str | None = None, options: Sequence[str] = ()) -> str:
    """The configuration text that makes ``client`` start ``command`` behind the proxy."""
    if not command:
        raise McpProxyError("give the server's command after --")
    if client not in CLIENTS:
        raise McpProxyError(f"unknown client {client!r}: expected one of {', '.join(CLIENTS)}")
    entry = name or server_name(command)
    args = proxy_args(command, options)
    if client == "codex":
        quoted = ", ".join(json.dumps(a) for a in args)
        return f"[mcp_servers.{json.dumps(entry) if not re.fullmatch(r'[A-Za-z0-9_-]+', entry) else entry}]\n" \
               f"command = {json.dumps(PROXY_COMMAND)}\nargs = [{quoted}]\n"
    return json.dumps({"mcpServers": {entry: {"command": PROXY_COMMAND, "args": args}}}, indent=2) + "\n"
