"""How each client names an MCP server's tool to the model, and which of its own tools only read.

A client offers the model one flat list of tools: its built-in ones and, for every MCP server in its
configuration, that server's tools under a qualified name. The daemon reads the model's calls by those
names, so it must know each client's rule (docs/daemon.md, "Naming", says what was checked):

* **Claude Code**: ``mcp__SERVER__TOOL``, where SERVER is the server's key in the client's MCP configuration
  and every character outside ``[A-Za-z0-9_-]`` (of the server and the tool name) becomes ``_``.
* **Codex** (``codex-rs``, ``mcp_connection_manager``): ``SERVER__TOOL`` in its first releases and
  ``mcp__SERVER__TOOL`` later; the qualified name is sanitised to ``^[a-zA-Z0-9_-]+$`` (anything else becomes
  ``_``), and one longer than 64 characters keeps its first ``64 - 40`` characters followed by the SHA-1 of
  the unsanitised name (40 hex digits).

Names are never parsed. For every (server, tool) a linked shim registered, :func:`model_names` computes the
names the client's rule gives it, and a streamed name maps to a tool only by exact lookup
(:class:`NameTable`); a name two different tools would both get maps to neither, so nothing is ever run
for the wrong tool.

A client's own tools are invisible to the daemon (they never pass through a shim). Those that change
nothing a tool can read are listed per client (:data:`CLIENT_READS`); any other unlinked call in the model's
message counts as a write the daemon cannot see (:mod:`forethought.daemon.dispatch`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CLIENT_READS", "Client", "NameTable", "model_names"]

_INVALID = re.compile(r"[^A-Za-z0-9_-]")
CODEX_MAX_NAME = 64
_SHA1_HEX = 40


class Client(enum.StrEnum):
    """The client whose model traffic and MCP servers the daemon sits between."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    CURSOR = "cursor"
    GENERIC = "generic"
    """Any other client: every known naming rule is tried, and none of its own tools counts as a read."""


CLIENT_READS: Mapping[Client, frozenset[str]] = {
    # Claude Code's built-in tools that read files or the web and change nothing (its docs, "Tools available
    # to Claude"); Bash, Edit, Write, NotebookEdit, Task (a subagent may write) and every other are writes.
    Client.CLAUDE_CODE: frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead", "WebFetch", "WebSearch",
                                   "TodoWrite", "TodoRead", "BashOutput"}),
    # Codex's plan tool only records the plan; its shell and apply_patch tools write.
    Client.CODEX: frozenset({"update_plan", "view_image"}),
    Client.CURSOR: frozenset(),
    Client.GENERIC: frozenset(),
}
"""A client's own tools that change no state another tool reads (by the name the client gives them)."""


def _claude_code(server: str, tool: str) -> tuple[str, ...]:
    return (f"mcp__{_INVALID.sub('_', server)}__{_INVALID.sub('_', tool)}",)


def _codex_qualified(raw: str) -> str:
    name = _INVALID.sub("_", raw) or "_"
    if len(name) > CODEX_MAX_NAME:
        name = name[:CODEX_MAX_NAME - _SHA1_HEX] + hashlib.sha1(raw.encode()).hexdigest()
    return name


def _codex(server: str, tool: str) -> tuple[str, ...]:
    return (_codex_qualified(f"mcp__{server}__{tool}"), _codex_qualified(f"{server}__{tool}"))


_RULES = {Client.CLAUDE_CODE: (_claude_code,), Client.CODEX: (_codex,), Client.CURSOR: (),
          Client.GENERIC: (_claude_code, _codex)}


def model_names(client: Client, server: str, tool: str) -> tuple[str, ...]:
    """Every name under which ``client`` may offer ``server``'s ``tool`` to the model (most likely first)."""
    names: list[str] = []
    for rule in _RULES[client]:
        for name in rule(server, tool):
            if name not in names:
                names.append(name)
    return tuple(names)


@dataclass(frozen=True, slots=True)
class Named:
    """What a model-facing name stands for: ``tool`` of the server registered as ``server``."""

    server: str
    tool: str


class NameTable:
    """Model-facing names -> (server, tool), for one client and a set of registered servers.

    ``servers`` maps each name a server is known by (its key in the client's configuration, its own name)
    to its tool names. A model name that two different (server, tool) pairs would get is *ambiguous* and
    maps to nothing.
    """

    def __init__(self, client: Client, servers: Mapping[str, Iterable[str]]) -> None:
        self.client = client
        found: dict[str, Named | None] = {}
        for server, tools in servers.items():
            for tool in tools:
                named = Named(server, tool)
                for name in model_names(client, server, tool):
                    if name in found and found[name] != named:
                        found[name] = None  # ambiguous: never guess which one the client meant
                    else:
                        found.setdefault(name, named)
        self._names = {name: named for name, named in found.items() if named is not None}

    def get(self, model_name: str) -> Named | None:
        """The (server, tool) ``model_name`` stands for, or ``None`` (not a linked tool, or ambiguous)."""
        return self._names.get(model_name)

    def __len__(self) -> int:
        return len(self._names)

    def is_client_read(self, model_name: str) -> bool:
        """Whether ``model_name`` is one of the client's own tools that only read."""
        return model_name in CLIENT_READS[self.client]
