"""``forethought mcp-proxy``: the proxy's command line (run, ``stats``, ``config``).

``forethought mcp-proxy [OPTIONS] -- <upstream command ...>`` serves an MCP client on stdio in front of a
stdio upstream (``--upstream-url`` for a streamable-HTTP one); ``--daemon URL`` links it to ``forethought
serve`` (:mod:`~forethought.mcp.daemon_hook`). ``stats --store PATH`` prints the totals
saved in a store, ``config --client NAME -- <server command>`` prints a client's configuration snippet.
Configuration enters here and flows inward as values; errors of the forethought family print one line and
exit with status 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from forethought.errors import ForethoughtError
from forethought.mcp.config import CLIENTS, relative_paths, snippet
from forethought.mcp.effects import load_mcp_policy
from forethought.mcp.errors import McpProxyError

UPSTREAM_KEY = "forethought_upstream"
WARM_WAIT_S = 10.0
"""How long the command lets the upstream start (and answer) before it loads the rest of the proxy."""
STORE_FILE = "mcp-patterns.sqlite"
PROBE_TIMEOUT_S = 10.0
"""How long ``--upstream-url`` may take to answer at start-up."""


class _ProxyGroup(TyperGroup):
    """Words after ``--`` are the upstream command, unless a subcommand (``config``) comes first."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            if not any(a in self.commands for a in args[:cut]):
                ctx.meta[UPSTREAM_KEY] = args[cut + 1:]
                args = args[:cut]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_ProxyGroup, invoke_without_command=True, add_completion=False,
                  help="Speculative tool execution in front of any MCP server.")


def default_store() -> Path:
    """The store under the user's cache directory (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forethought" / STORE_FILE


def _fail(exc: ForethoughtError) -> typer.Exit:
    print(f"error: {exc}", file=sys.stderr)
    return typer.Exit(2)


def probe_url(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail now, in one line, when nothing answers HTTP at ``url``: the SDK's client connects only at the
    client's first request, so a dead upstream would otherwise show as a silent exit or a traceback later.
    Any HTTP answer will do (an MCP endpoint may well answer a plain GET with 405)."""
    import httpx2

    try:
        with httpx2.Client(timeout=timeout_s) as client, client.stream("GET", url,
                                                                      headers={"Accept": "text/event-stream"}):
            pass  # the status line arrived: something serves HTTP there
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        from forethought.mcp.proxy import scrubbed, upstream_label

        reason = scrubbed(str(exc) or type(exc).__name__, (), url)
        raise McpProxyError(f"cannot reach the upstream at {upstream_label((), url)}: {reason}") from None


def _leaf(exc: BaseException) -> BaseException:
    """The first exception that is not a group, inside ``exc`` (the SDK's task groups wrap the real one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _lost_upstream(exc: BaseException, command: Sequence[str], url: str | None) -> McpProxyError | None:
    """A one-line error for an upstream connection lost while serving (``None`` for anything else); it names
    the upstream by its label, never its arguments or a URL's credentials or query."""
    import httpx2

    from forethought.mcp.proxy import scrubbed, upstream_label

    leaf = _leaf(exc)
    if isinstance(leaf, httpx2.HTTPError | OSError):
        reason = scrubbed(str(leaf) or type(leaf).__name__, command, url)
        return McpProxyError(f"lost the upstream at {upstream_label(command, url)}: {reason}")
    return None


@app.callback()
def proxy(
    ctx: typer.Context,
    policy: Annotated[Path | None, typer.Option(help="TOML policy file (servers, tools, limits).")] = None,
    store: Annotated[Path | None, typer.Option(help="SQLite file of learned patterns and stats "
                                                    "(default: ~/.cache/forethought/mcp-patterns.sqlite).")] = None,
    memory: Annotated[bool, typer.Option("--memory", help="Learn in memory only (no store).")] = False,
    upstream_url: Annotated[str | None, typer.Option(help="A streamable-HTTP upstream instead of a command.")] =
        None,
    name: Annotated[str | None, typer.Option(help="The upstream's name in the policy (default: its own).")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="Believe the upstream's readOnlyHint annotations.")] =
        False,
    accept_observable_reads: Annotated[bool, typer.Option(
        "--accept-observable-reads", help="Speculate tools whose reads the policy calls observable (a wrong guess "
                                          "then shows in the server's state).")] = False,
    metrics_port: Annotated[int | None, typer.Option(min=0, max=65535, help="Serve Prometheus /metrics on "
                                                                           "127.0.0.1:PORT.")] = None,
    listen: Annotated[str | None, typer.Option(help="Serve clients over streamable HTTP on 127.0.0.1:PORT "
                                                    "(/mcp, and /metrics) instead of stdio.")] = None,
    in_process: Annotated[bool, typer.Option("--in-process", help="Learn and predict on the proxy's own event "
                                                                  "loop, not in a worker process.")] = False,
    daemon: Annotated[str | None, typer.Option(help="Link to the forethought serve at this URL "
                                                    "(http://127.0.0.1:PORT): it guesses, the proxy runs its early "
                                                    "calls.")] = None,
    daemon_file: Annotated[Path | None, typer.Option(help="With --daemon: the daemon's file (URL and link token) "
                                                          "(default: the one forethought serve writes).")] = None,
) -> None:
    """Run the proxy: forethought mcp-proxy [OPTIONS] -- <upstream command ...>."""
    if ctx.invoked_subcommand is not None:
        return
    command: list[str] = ctx.meta.get(UPSTREAM_KEY, [])
    if not command and not upstream_url:
        print(ctx.get_help(), file=sys.stderr)
        raise typer.Exit(2)
    if memory and store is not None:
        raise _fail(McpProxyError("--memory and --store are alternatives: give one of them"))
    store_path = None if memory else (store or default_store())
    address = None
    if listen is not None:  # before anything starts: a wrong address is one line, exit 2
        from forethought.mcp.http import parse_listen

        try:
            address = parse_listen(listen)
        except ForethoughtError as exc:
            raise _fail(exc) from None
    linked = None
    if daemon is not None or daemon_file is not None:
        linked = _daemon(daemon, daemon_file)  # before anything starts: a wrong link is one line, exit 2
    warm = None
    stopped = threading.Event()
    if command and address is None and not upstream_url:
        # A SIGTERM while the proxy loads ends the session once it runs (what was relayed meanwhile is saved).
        signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
        warm = _warm_start(command, store_path)  # the upstream first, relayed at once; the proxy loads after
        if warm is not None:
            warm.wait_started(WARM_WAIT_S)
    from forethought.mcp.metrics import serve_metrics
    from forethought.mcp.proxy import Proxy, ProxyConfig, run_stdio_until_stopped

    try:
        if upstream_url is not None:
            probe_url(upstream_url)
        mcp_policy = load_mcp_policy(policy)
        if trust:
            mcp_policy = mcp_policy.trusting()
        if accept_observable_reads:
            mcp_policy = mcp_policy.accepting_observable_reads()
        config = ProxyConfig(command=tuple(command), url=upstream_url, policy=mcp_policy,
                             store=store_path, name=name, in_process=in_process, daemon=linked)
        server = Proxy(config, clock=warm.clock if warm is not None else None)
    except ForethoughtError as exc:
        raise _fail(exc) from None
    stop = serve_metrics(server.current, metrics_port) if metrics_port is not None else None
    try:
        if address is not None:
            from forethought.mcp.http import serve_http

            asyncio.run(serve_http(server, *address))
        else:
            asyncio.run(run_stdio_until_stopped(server, warm, stopped))
    except ForethoughtError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # the SDK's task groups: a lost upstream connection is one line, anything else raises
        lost = _lost_upstream(exc, command, upstream_url)
        if lost is None:
            raise
        raise _fail(lost) from None
    finally:
        if stop is not None:
            stop()
        server.close()
        print(server.finished.summary(), file=sys.stderr)


def _daemon(url: str | None, path: Path | None) -> Any:
    """The daemon's address and token (``--daemon``, ``--daemon-file``), or exit 2 with one line. A daemon that
    is not running (no daemon file: ``forethought serve`` removes it when it stops) is not an error: one warning
    line, and the proxy runs unlinked, as a plain speculative proxy (``None``)."""
    if url is None:
        raise _fail(McpProxyError("--daemon-file needs --daemon URL (the daemon's http://127.0.0.1:PORT)"))
    from forethought.mcp.daemon_hook import daemon_address, parse_daemon_url
    from forethought.mcp.daemon_link import daemon_file

    try:
        base = parse_daemon_url(url)
        where = path or daemon_file()
        if not where.exists():
            print(f"forethought mcp-proxy: no daemon file at {where} (is forethought serve running?); going on as "
                  f"a plain proxy, not linked to {base}", file=sys.stderr)
            return None
        return daemon_address(url, path)
    except ForethoughtError as exc:
        raise _fail(exc) from None


def _warm_start(command: list[str], store: Path | None) -> Any:
    """Start the upstream and relay the session's first lines at once (:mod:`~forethought.mcp.warmup`), where
    stdin and stdout are pipes as a client gives them; ``None`` otherwise."""
    from forethought.mcp.warmup import WarmStart, can_warm_start

    if not can_warm_start():
        return None
    from forethought._core.versions import StateVersion
    from forethought.mcp.sharedclock import SqliteVersion

    try:
        clock = SqliteVersion(store) if store is not None else StateVersion()
        return WarmStart(command, clock)
    except OSError as exc:
        label = Path(command[0]).name or "the upstream command"
        raise _fail(McpProxyError(f"cannot start the upstream server {label!r}: {exc.strerror or exc}")) from None
    except sqlite3.Error as exc:
        raise _fail(McpProxyError(f"cannot open the pattern store {store}: {exc}")) from None


@app.command()
def stats(
    store: Annotated[Path | None, typer.Option(help="The proxy's store (default: the cache one).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Totals saved in a store: calls, hits, misses, seconds saved, extra upstream calls (in all and per tool)."""
    from forethought.mcp.stats import StatsStore, stats_document

    path = store or default_store()
    if not path.exists():
        raise _fail(McpProxyError(f"no store at {path}"))
    try:
        stats_store = StatsStore(path)
        try:
            per = stats_store.by_fingerprint()
            total = stats_store.total()
        finally:
            stats_store.close()
    except sqlite3.Error as exc:  # not a database, a damaged one, one another program locks or garbled
        raise _fail(McpProxyError(f"cannot read the store {path}: {exc}")) from None
    if as_json:
        doc: dict[str, Any] = {"store": str(path), "total": stats_document(total),
                               "by_fingerprint": {k: stats_document(v) for k, v in per.items()}}
        print(json.dumps(doc, indent=2))
        return
    print(total.summary().replace("forethought mcp-proxy: ", f"{path}: {total.sessions} sessions, "))
    for fingerprint, s in per.items():
        print(f"  {fingerprint}: {s.summary().replace('forethought mcp-proxy: ', '')}")
        for tool, t in sorted(s.tools.items()):
            print(f"    {tool}: {t.calls} calls, {t.hits} hits, {t.upstream_calls} upstream calls "
                  f"({t.extra_upstream_calls} extra), {t.priced_out} guesses priced out")


@app.command()
def config(
    client: Annotated[str, typer.Option(help=f"One of {', '.join(CLIENTS)}.")],
    command: Annotated[list[str] | None, typer.Argument(help="The server's command, after --.")] = None,
    name: Annotated[str | None, typer.Option(help="The server's entry name (default: from the command).")] = None,
    trust: Annotated[bool | None, typer.Option("--trust/--no-trust", help="Write --trust into the entry: the "
                                               "server's readOnlyHint annotations are believed, so its read-only "
                                               "tools run early (without it, only a policy can make them).")] = None,
    policy: Annotated[Path | None, typer.Option(help="A policy file for the proxy (written as an absolute path).")]
        = None,
    store: Annotated[Path | None, typer.Option(help="The proxy's store (written as an absolute path).")] = None,
    in_process: Annotated[bool, typer.Option("--in-process", help="Write --in-process into the entry.")] = False,
) -> None:
    """Print the snippet that puts the proxy in front of a server in a client's configuration."""
    options = ["--trust"] if trust else []
    options += ["--policy", str(policy.absolute())] if policy is not None else []
    options += ["--store", str(store.absolute())] if store is not None else []
    options += ["--in-process"] if in_process else []
    try:
        if policy is not None:
            load_mcp_policy(policy)  # a policy the proxy would refuse is refused now, not when the client starts it
        text = snippet(client, command or [], name, options)
    except ForethoughtError as exc:
        raise _fail(exc) from None
    print(f"# {CLIENTS[client].title}: paste into {CLIENTS[client].where}", file=sys.stderr)
    if trust is None:
        print("# no --trust: this server's tools run early only where a policy (--policy) trusts them; add --trust "
              "to believe its readOnlyHint annotations (or --no-trust to say you chose not to)", file=sys.stderr)
    relative = relative_paths(command or [])
    if relative:
        print(f"# the server's relative path{'s' if len(relative) > 1 else ''} {', '.join(relative)} will be "
              f"resolved in the directory {CLIENTS[client].title} starts it in: give absolute paths if that is "
              "not the project", file=sys.stderr)
    print(text, end="")
