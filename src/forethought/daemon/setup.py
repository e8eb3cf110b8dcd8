"""What a user pastes to put a client behind the daemon: its environment and its MCP configuration.

:func:`client_setup` writes nothing; it returns the text ``forethought serve config`` prints, with absolute
executable paths (a client starts MCP servers without the user's shell, so a bare ``forethought`` may not be
found). Per client (docs/daemon.md, "Setting up a client", says what was checked):

* **Claude Code** reaches a gateway through ``ANTHROPIC_BASE_URL`` (it appends ``/v1/messages``, and also
  calls ``/v1/messages/count_tokens``, both passed through); its MCP servers are the ``mcpServers`` object of
  ``.mcp.json``, each server's key being the name its tools get (``mcp__KEY__TOOL``).
* **Codex** takes a provider table ``[model_providers.NAME]`` with ``base_url`` (it appends ``/responses``),
  ``env_key`` (the variable holding the key) and ``wire_api = "responses"``, selected by ``model_provider``;
  its MCP servers are ``[mcp_servers.KEY]`` tables of ``~/.codex/config.toml``.
* **Cursor** sends its agent's model requests through its own service, so no local base URL carries them:
  only the MCP servers (``~/.cursor/mcp.json``) are put behind shims, which then guess from calls alone.

Each server runs behind ``forethought mcp-proxy --daemon URL --name KEY -- <server command>``: the shim
that links it to the daemon, under the key the client names its tools by.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from forethought.daemon.naming import Client

__all__ = ["DEFAULT_PORT", "ServerEntry", "client_setup", "forethought_command", "parse_server"]

DEFAULT_PORT = 7337
_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One MCP server of the client's configuration: its key and its command (absolute executable)."""

    key: str
    command: tuple[str, ...]


def parse_server(text: str) -> ServerEntry:
    """``KEY=COMMAND ARGS...`` as given to ``--server``; ``ValueError`` with the reason otherwise."""
    key, sep, rest = text.partition("=")
    words = shlex.split(rest)
    if not sep or not key or not words:
        raise ValueError(f"--server takes KEY=COMMAND [ARGS...], got {text!r}")
    if not _KEY.match(key):
        raise ValueError(f"server key {key!r}: use letters, digits, '_' and '-' (the client names tools by it)")
    return ServerEntry(key, (_absolute(words[0]), *words[1:]))


def _absolute(executable: str) -> str:
    if os.path.isabs(executable):
        return executable
    found = shutil.which(executable)
    return os.path.abspath(found) if found else executable


def forethought_command() -> list[str]:
    """How to start ``forethought`` by an absolute path: its script next to this Python, else ``python -m``."""
    script = os.path.join(os.path.dirname(sys.executable), "forethought")
    if os.path.exists(script):
        return [script]
    found = shutil.which("forethought")
    return [os.path.abspath(found)] if found else [sys.executable, "-m", "forethought.cli"]


def _shim(url: str, server: ServerEntry) -> list[str]:
    return [*forethought_command(), "mcp-proxy", "--daemon", url, "--name", server.key, "--", *server.command]


def client_setup(client: Client, url: str, servers: Sequence[ServerEntry]) -> str:
    """The environment and configuration that put ``client`` behind the daemon at ``url``."""
    shims = {s.key: _shim(url, s) for s in servers}
    if client is Client.CLAUDE_CODE:
        mcp = {"mcpServers": {key: {"command": argv[0], "args": argv[1:]} for key, argv in shims.items()}}
        return ("# 1. the model path: in the shell that starts claude (or the env block of ~/.claude/settings.json)\n"
                f"export ANTHROPIC_BASE_URL={url}/anthropic\n"
                "# keep ANTHROPIC_API_KEY / your login as they are: they pass through, never stored\n\n"
                "# 2. the MCP servers: .mcp.json in the project (or: claude mcp add-json KEY '<one entry>')\n"
                + json.dumps(mcp, indent=2) + "\n")
    if client is Client.CODEX:
        lines = ["# ~/.codex/config.toml", 'model_provider = "forethought"', "", "[model_providers.forethought]",
                 'name = "forethought serve (local pass-through)"', f'base_url = "{url}/openai/v1"',
                 'env_key = "OPENAI_API_KEY"', 'wire_api = "responses"']
        for key, argv in shims.items():
            lines += ["", f"[mcp_servers.{key}]", f"command = {json.dumps(argv[0])}",
                      f"args = [{', '.join(json.dumps(a) for a in argv[1:])}]"]
        return "\n".join(lines) + "\n"
    if client is Client.CURSOR:
        mcp = {"mcpServers": {key: {"command": argv[0], "args": argv[1:]} for key, argv in shims.items()}}
        return ("# Cursor's agent sends its model requests through Cursor's own service: no local base URL\n"
                "# carries them, so only the MCP servers are linked (they guess from calls alone).\n"
                "# ~/.cursor/mcp.json (or .cursor/mcp.json in the project)\n" + json.dumps(mcp, indent=2) + "\n")
    raise ValueError(f"no set-up is known for client {client!s}: use claude-code, codex or cursor")
