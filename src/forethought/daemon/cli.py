"""``forethought serve`` (and ``serve config``) and ``forethought doctor``: the daemon's command line.

The typer app :data:`app` holds two top-level commands; the main command line mounts it with
``app.add_typer(daemon_app)`` (no name: its commands join the top level). The daemon itself is imported only
when a command runs (``forethought --help`` stays quick). Configuration enters here, is
checked, and flows inward as a :class:`~forethought.daemon.app.DaemonConfig`; a bad flag or policy file is
one line on stderr and exit status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from forethought._core.policy import Policy
from forethought._core.policy_file import policy_from_mapping, read_policy_file
from forethought.daemon.naming import Client
from forethought.daemon.setup import DEFAULT_PORT, ServerEntry, client_setup, parse_server
from forethought.errors import ForethoughtError, PolicyError

if TYPE_CHECKING:
    from forethought.daemon.app import DaemonConfig

__all__ = ["app", "load_daemon_policy"]

STORE_FILE = "daemon-patterns.sqlite"
EDGE_TABLES = ("mcp", "daemon")
"""Tables of a policy file that belong to edges (the MCP proxy's, the daemon's): not runtime policy."""
DAEMON_KEYS: frozenset[str] = frozenset()
"""The keys of a policy file's ``[daemon]`` table that ``serve`` reads (none yet: any key there is an error)."""

app = typer.Typer(add_completion=False, help="The local daemon on the model and MCP paths.")
serve_app = typer.Typer(invoke_without_command=True, add_completion=False,
                        help="Run the daemon: model pass-through plus linked MCP servers (docs/daemon.md).")
app.add_typer(serve_app, name="serve")


def _fail(message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(2)


def load_daemon_policy(path: Path | None, trust: bool = False) -> Policy:
    """The runtime policy of a policy file, every key checked: the ``[daemon]`` table is the daemon's own (a key
    it does not know is an error), the ``[mcp]`` table is left to ``mcp-proxy`` (which checks it)."""
    policy = Policy()
    if path is not None:
        data = read_policy_file(path)
        _check_daemon_table(data.get("daemon", {}), str(path))
        policy = policy_from_mapping({k: v for k, v in data.items() if k not in EDGE_TABLES}, str(path))
    return dataclasses.replace(policy, trust_servers=True) if trust else policy


def _check_daemon_table(table: Any, origin: str) -> None:
    if not isinstance(table, Mapping):
        raise PolicyError(f"{origin}: key 'daemon': expected a table")
    unknown = sorted(set(table) - DAEMON_KEYS)
    if unknown:
        raise PolicyError(f"{origin}: unknown key 'daemon.{unknown[0]}'")


def _upstream(url: str, option: str) -> str | None:
    """An upstream's base URL: http(s) with a host, or ``''`` for none (``None``)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        good = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        good = False
    if not good:
        raise _fail(f"{option} {url!r}: expected an http:// or https:// URL ('' for none)")
    return url


def _default_store() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forethought" / STORE_FILE


@serve_app.callback()
def serve(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1.")] = DEFAULT_PORT,
    anthropic_upstream: Annotated[str, typer.Option(help="Where Anthropic Messages requests go ('' for none).")] =
        "https://api.anthropic.com",
    openai_upstream: Annotated[str, typer.Option(help="Where OpenAI requests go ('' for none).")] =
        "https://api.openai.com",
    client: Annotated[str, typer.Option(help="claude-code, codex, cursor or generic: how the client names MCP "
                                             "tools, and which of its own tools only read.")] = "generic",
    policy: Annotated[Path | None, typer.Option(help="TOML policy file (servers, tools, limits).")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="Believe every linked server's readOnlyHint.")] = False,
    store: Annotated[Path | None, typer.Option(help="SQLite file of learned patterns "
                                                    "(default: ~/.cache/forethought/daemon-patterns.sqlite).")] = None,
    memory: Annotated[bool, typer.Option("--memory", help="Learn in memory only.")] = False,
    patterns: Annotated[bool, typer.Option(help="Guess with the pattern predictor.")] = True,
    speculator_model: Annotated[str | None, typer.Option(
        help="A cheaper model of the same provider, sampled at each step (off by default: it costs tokens).")] = None,
    speculator_samples: Annotated[int, typer.Option(min=1, help="Samples per step (lambda).")] = 2,
    speculator_budget: Annotated[int, typer.Option(min=0, help="Speculator tokens per conversation (0: none).")] =
        200_000,
    announce: Annotated[Path | None, typer.Option("--daemon-file", help="Where to write the URL and link token "
                                                                        "(default: see docs/daemon.md).")] = None,
) -> None:
    """Run the daemon until interrupted."""
    if ctx.invoked_subcommand is not None:
        return
    from forethought.daemon.app import DaemonConfig  # the daemon loads only when it runs
    from forethought.daemon.guesses import SpeculatorSettings
    from forethought.daemon.relay import Upstreams
    from forethought.mcp.daemon_link import daemon_file

    try:
        chosen = Client(client)
    except ValueError:
        raise _fail(f"unknown client {client!r}: use {', '.join(c.value for c in Client)}") from None
    if memory and store is not None:
        raise _fail("--memory and --store are alternatives: give one of them")
    upstreams = Upstreams(_upstream(anthropic_upstream, "--anthropic-upstream"),
                          _upstream(openai_upstream, "--openai-upstream"))
    try:
        config = DaemonConfig(
            upstreams, chosen,
            load_daemon_policy(policy, trust), None if memory else (store or _default_store()), patterns,
            SpeculatorSettings(speculator_model, speculator_samples, speculator_budget)
            if speculator_model else None, announce or daemon_file())
    except (ForethoughtError, ValueError) as exc:
        raise _fail(str(exc)) from None
    try:
        asyncio.run(_serve(config, port))
    except KeyboardInterrupt:
        pass
    except _StoreError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}") from None


class _StoreError(ForethoughtError):
    """The pattern store cannot be opened (not a database, a damaged one, one another program locks)."""


async def _serve(config: DaemonConfig, port: int) -> None:
    from forethought.daemon.app import serve_daemon

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:  # only the daemon's start opens the store: an error of SQLite while it serves is not this one
            daemon = await stack.enter_async_context(serve_daemon(config, port=port))
        except sqlite3.Error as exc:  # the file is left as it is
            raise _StoreError(f"cannot open the pattern store {config.store}: {exc}") from None
        upstreams = config.upstreams
        print(f"forethought serve: {daemon.url} (anthropic -> {upstreams.anthropic or 'none'}, openai -> "
              f"{upstreams.openai or 'none'}); link token in {config.daemon_file}", file=sys.stderr)
        await stop.wait()
        status = daemon.status()["claims"]
        print(f"forethought serve: {status['claims']} calls claimed, {status['hits']} served early, "
              f"{status['saved_s']:.2f} s saved", file=sys.stderr)


@serve_app.command("config")
def config(
    client: Annotated[str, typer.Option(help="claude-code, codex or cursor.")],
    server: Annotated[list[str] | None, typer.Option(help="An MCP server: KEY=COMMAND ARGS... (repeat).")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="The daemon's port.")] = DEFAULT_PORT,
) -> None:
    """Print the environment and MCP configuration that put a client behind the daemon (writes nothing)."""
    try:
        chosen = Client(client)
        entries: list[ServerEntry] = [parse_server(s) for s in server or ()]
        text = client_setup(chosen, f"http://127.0.0.1:{port}", entries)
    except ValueError as exc:
        raise _fail(str(exc) if "client" in str(exc) or "server" in str(exc) else f"unknown client {client!r}") \
            from None
    print(text, end="")


@app.command()
def doctor(
    announce: Annotated[Path | None, typer.Option("--daemon-file", help="The daemon's file (default: as serve).")] =
        None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the daemon, its upstreams, the linked servers and what would run early."""
    from forethought.daemon.doctor import run_doctor

    checks = run_doctor(announce)
    if as_json:
        doc: list[dict[str, Any]] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks]
        print(json.dumps(doc, indent=2))
    else:
        for check in checks:
            mark = "ok  " if check.ok else "--  " if check.ok is None else "FAIL"
            print(f"[{mark}] {check.name}: {check.detail}")
    if any(c.ok is False for c in checks):
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - `forethought serve` and `forethought doctor` are the way in
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
