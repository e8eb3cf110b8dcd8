"""``forethought serve``: one local daemon on both paths of a coding agent's loop (docs/daemon.md).

It sits on the **model path** (a pass-through for OpenAI Chat Completions, Responses and Anthropic Messages:
the client receives exactly what the upstream sent) and on the **MCP path** (shims of ``forethought
mcp-proxy --daemon`` link their servers to it). So it sees each tool call the moment its arguments close in
the model's stream, starts the READ-only ones of trusted servers at once, guesses the next calls from the
conversation itself, and serves the shims' ``tools/call`` from what ran early. Every way in is a thin edge
over the core: keys, the write clock and policy resolution are the core's.

Modules, one idea each: ``app`` (the assembly), ``relay`` (the model pass-through), ``observer`` (reading a
response beside the relay), ``wire`` (the three APIs' decoders), ``transcript`` (a request read as a
conversation), ``conversation`` (a conversation's session, tools and steps), ``dispatch`` (one response:
what starts early, what the daemon cannot see), ``naming`` (how each client names MCP tools), ``shims`` and
``link_api`` (linked servers), ``linked`` (their tools as core tools), ``claims`` (a shim's call through the
core), ``guesses`` and ``speculator`` (where guesses come from), ``headers`` (what crosses, what is secret),
``token_file`` (the link token), ``setup`` (client configuration), ``doctor`` (health checks), ``cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forethought.daemon.app import Daemon, DaemonConfig, serve_daemon
    from forethought.daemon.naming import Client
    from forethought.daemon.relay import Upstreams

__all__ = ["Client", "Daemon", "DaemonConfig", "Upstreams", "serve_daemon"]

_HOMES = {"Client": "naming", "Daemon": "app", "DaemonConfig": "app", "Upstreams": "relay", "serve_daemon": "app"}


def __getattr__(name: str) -> Any:
    """The package's names, imported on first use (``forethought --help`` does not load the daemon)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forethought.daemon' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"forethought.daemon.{home}"), name)
