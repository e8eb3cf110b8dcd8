"""Client set-up: the configuration snippet that puts the proxy in front of a server, per MCP client.

:func:`snippet` returns text for the user to paste (it writes nothing), in the format each client documents
(checked against each client's documentation; docs/mcp.md cites the pages):

* Claude Code: ``.mcp.json`` in the project, ``{"mcpServers": {NAME: {"type": "stdio", "command", "args"}}}``
  (also what ``claude mcp add-json NAME`` takes);
* Claude Desktop: ``claude_desktop_config.json``, ``{"mcpServers": {NAME: {"command", "args"}}}``;
* Cursor: ``~/.cursor/mcp.json`` or ``.cursor/mcp.json``, ``{"mcpServers": {NAME: {"command", "args"}}}``;
* Codex: ``~/.codex/config.toml``, a ``[mcp_servers.NAME]`` table with ``command`` and ``args``;
* VS Code: ``.vscode/mcp.json``, ``{"servers": {NAME: {"type": "stdio", "command", "args"}}}``.

The command is the absolute path of the ``forethought`` executable this interpreter installed (a client
starts servers with its own ``PATH``, which seldom holds a virtual environment's ``bin``), or this
interpreter with ``-m forethought.cli`` where there is no such script. The proxy's options (``--trust``,
``--policy``, ...) come before ``--``; the server's command, unchanged, after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from forethought.mcp.errors import McpProxyError

PROXY_SCRIPT = "forethought"
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Client:
    """One MCP client: where its configuration lives, the page that documents it, and how to write an entry."""

    name: str
    title: str
    where: str
    documented: str
    render: Callable[[str, str, Sequence[str]], str]
    """``render(entry name, command, args)``: the text to paste."""


def _json_entry(top: str, stdio_type: bool) -> Callable[[str, str, Sequence[str]], str]:
    def render(name: str, command: str, args: Sequence[str]) -> str:
        entry: dict[str, object] = {"type": "stdio"} if stdio_type else {}
        entry.update(command=command, args=list(args))
        return json.dumps({top: {name: entry}}, indent=2, ensure_ascii=False) + "\n"

    return render


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (quotes, backslashes and control characters escaped)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _codex(name: str, command: str, args: Sequence[str]) -> str:
    key = name if BARE_KEY.fullmatch(name) else toml_string(name)
    return (f"[mcp_servers.{key}]\ncommand = {toml_string(command)}\n"
            f"args = [{', '.join(toml_string(a) for a in args)}]\n")


CLIENTS: dict[str, Client] = {client.name: client for client in (
    Client("claude-code", "Claude Code",
           ".mcp.json in the project root (or: claude mcp add-json NAME '<the object under mcpServers>')",
           "https://code.claude.com/docs/en/mcp", _json_entry("mcpServers", stdio_type=True)),
    Client("claude-desktop", "Claude Desktop",
           "claude_desktop_config.json (Settings > Developer > Edit Config; macOS: ~/Library/Application Support/"
           "Claude/, Windows: %APPDATA%\\Claude\\), then restart Claude Desktop",
           "https://modelcontextprotocol.io/quickstart/user", _json_entry("mcpServers", stdio_type=False)),
    Client("cursor", "Cursor", "~/.cursor/mcp.json (every project) or .cursor/mcp.json (this project)",
           "https://cursor.com/docs/mcp", _json_entry("mcpServers", stdio_type=False)),
    Client("codex", "Codex", "~/.codex/config.toml (or .codex/config.toml in a trusted project)",
           "https://github.com/openai/codex/blob/main/docs/config.md", _codex),
    Client("vscode", "VS Code", ".vscode/mcp.json in the workspace (or the profile's: MCP: Open User Configuration)",
           "https://code.visualstudio.com/docs/copilot/reference/mcp-configuration",
           _json_entry("servers", stdio_type=True)),
)}
"""The clients :func:`snippet` knows, by their ``--client`` name."""


def proxy_executable(bin_dir: str | Path | None = None) -> list[str]:
    """The absolute command that starts ``forethought``: the script beside this interpreter (its venv's
    ``bin``), else the one on ``PATH``, else this interpreter running ``-m forethought.cli``."""
    python = os.path.abspath(sys.executable)  # not resolved: a venv's python is a symlink out of the venv
    script = Path(bin_dir if bin_dir is not None else os.path.dirname(python)) / PROXY_SCRIPT
    if script.is_file() and os.access(script, os.X_OK):
        return [os.path.abspath(script)]
    found = shutil.which(PROXY_SCRIPT) if bin_dir is None else None
    if found:
        return [os.path.abspath(found)]
    return [python, "-m", "forethought.cli"]


def server_name(command: Sequence[str]) -> str:
    """A name for the server entry, from its command (``uvx mcp-server-git`` -> ``git``)."""
    words = [w for w in command if not w.startswith("-")]
    picked = next((w for w in words if "mcp" in w or "server" in w), words[-1] if words else "server")
    base = os.path.basename(picked.split("@")[0] if not picked.startswith("@") else picked.split("/")[-1])
    base = re.sub(r"^(mcp-server-|server-|mcp-)|(-mcp|-server)$", "", base.split("@")[0]) or "server"
    return re.sub(r"[^A-Za-z0-9_-]", "-", base)


def proxy_args(command: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    return ["mcp-proxy", *options, "--", *command]


def _check_text(words: Sequence[str]) -> None:
    for word in words:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            raise McpProxyError(f"{word!a} is not valid Unicode text: a client's configuration file cannot "
                                "hold it") from None


def snippet(client: str, command: Sequence[str], name: str | None = None, options: Sequence[str] = (),
            executable: Sequence[str] | None = None) -> str:
    """The configuration text that makes ``client`` start ``command`` behind the proxy (``options`` before
    ``--``; ``executable``: the command that starts forethought, by default :func:`proxy_executable`)."""
    if client not in CLIENTS:
        raise McpProxyError(f"unknown client {client!r}: expected one of {', '.join(CLIENTS)}")
    if not command:
        raise McpProxyError("give the server's command after --")
    entry = name if name is not None else server_name(command)
    if not entry:
        raise McpProxyError("the server's entry name is empty")
    start = list(executable) if executable is not None else proxy_executable()
    args = [*start[1:], *proxy_args(command, options)]
    _check_text([entry, *start, *args])
    return CLIENTS[client].render(entry, start[0], args)


def relative_paths(command: Sequence[str]) -> list[str]:
    """Arguments of the server's command that look like relative paths (``.``, ``./x``, ``../x``): a client
    resolves them in the directory it starts the proxy in, which is not always the project."""
    return [w for w in command[1:] if w in (".", "..") or w.startswith(("./", "../"))]
