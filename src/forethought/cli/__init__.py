"""The ``forethought`` command line: bench, serve-model, gateway, predict-eval, model.

Configuration enters here (flags, a policy file) and flows inward as values. Every command takes
``--json PATH`` for machine-readable results. Errors of the forethought family are printed as one clear
line with exit status 2; a bench whose arms are not equivalent to serial exits with status 1. An interrupt
(Ctrl-C, or SIGINT from a script) stops the command: its workers are stopped, one line says so, and the
exit status is 130; a second interrupt while it stops changes nothing. Help is as wide as the terminal, or
:data:`PIPED_WIDTH` columns when piped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

try:
    import typer
    import typer.rich_utils
    from rich.console import Console
except ImportError as missing:  # the library installed without its command line
    print(f"error: the forethought command needs {missing.name}: pip install 'forethought[cli]'", file=sys.stderr)
    raise SystemExit(2) from None

from forethought._core.policy import Policy
from forethought._core.policy_file import load_policy
from forethought._version import __version__
from forethought.cli import exits
from forethought.cli.exits import INTERRUPTED, PIPED_WIDTH, TERMINATED, interrupted, stop_workers
from forethought.daemon.cli import app as daemon_app
from forethought.errors import ForethoughtError
from forethought.mcp.cli import app as mcp_proxy_app


def _piped() -> bool:
    return not sys.stdout.isatty()


if _piped() and typer.rich_utils.MAX_WIDTH is None:  # help boxes were cut at 80 columns when piped
    typer.rich_utils.MAX_WIDTH = PIPED_WIDTH

app = typer.Typer(help="forethought: speculative tool execution for tool-using LLM agents.",
                  no_args_is_help=True, add_completion=False, cls=exits.Commands, pretty_exceptions_enable=False)
app.add_typer(mcp_proxy_app, name="mcp-proxy")
app.add_typer(daemon_app)  # `serve` (and `serve config`) and `doctor` join the top level
console = Console(width=PIPED_WIDTH if _piped() else None)

JsonOption = Annotated[str | None, typer.Option("--json", help="Write machine-readable results here.")]
PolicyOption = Annotated[Path | None, typer.Option("--policy", help="TOML policy file.")]


def _version(value: bool) -> None:
    if value:
        console.print(f"forethought {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
         debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")] = False) -> None:
    """forethought command line."""
    exits.set_debug(debug)


def _policy(path: Path | None) -> Policy:
    return load_policy(path) if path is not None else Policy()


def _check_policy_tools(config: Any) -> None:
    """Warn (one line on stderr) about policy tool names that no tool of the workload has."""
    if not config.policy.tools:
        return
    from forethought.agent.loop import describe_unknown, unknown_policy_tools
    from forethought.bench.main import make_workload

    loaded = make_workload(config)
    names = {t.name for tr in [*loaded.trajectories(), *loaded.training()]
             for t in loaded.session_tools(tr, None).tools}
    unknown = unknown_policy_tools(config.policy, names)
    if unknown:
        typer.echo(f"warning: {describe_unknown(unknown)}", err=True)


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, got {text!r}") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise typer.BadParameter(f"expected non-negative numbers, got {text!r}")
    return values


def _counts(text: str, option: str) -> list[int]:
    """A comma-separated list of positive whole numbers (``--agents 1,8,32``)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise typer.BadParameter(f"expected positive whole numbers separated by commas, got {text!r}",
                                 param_hint=f"'{option}'")
    return values


def _finite(low: float, *, above: bool = False) -> Callable[[float | None], float | None]:
    """An option callback: a finite number ``>= low`` (``> low`` with ``above``); typer's ``min`` lets nan,
    and inf where no ``max`` is given, through."""
    def check(value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value < low or (above and value == low)):
            raise typer.BadParameter(f"expected a number {'>' if above else '>='} {low:g}, got {value!r}")
        return value
    return check


def _one_of(value: str, allowed: tuple[str, ...], option: str) -> str:
    """``value`` if it is one of ``allowed``, else a bad-parameter error that lists them."""
    if value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=f"'{option}'")
    return value


GROUPINGS = ("step", "turn")
"""How a workload groups a turn's tool calls into model messages (``--grouping``)."""
ENGINES = ("simulated", "vllm")
"""The engines ``bench --engine`` runs the multi-agent arms on."""
BENCH_STORES = ("local", "redis")
"""Where ``bench --workers`` keeps the shared patterns (``--store``)."""


@app.command()
def bench(
    workload: Annotated[str, typer.Option(help="bfcl, synthetic, sweep, paper-table, code, mcp or loop (the "
                                               "daemon on a coding agent's whole loop).")] = "bfcl",
    arms: Annotated[str, typer.Option(help="Comma-separated arms (serial is always run; oracle is the limit).")] =
        "serial,spec-model,spec-stream,spec-pattern,pattern+stream,all,oracle",
    trajectories: Annotated[int, typer.Option(min=1, help="Trajectories to run (spread over domains).")] = 8,
    full: Annotated[bool, typer.Option("--full", help="Run the whole test fold (100 BFCL trajectories).")] = False,
    agents: Annotated[str, typer.Option(help="Concurrent agents; a list such as 1,8,32 runs the multi-agent "
                                             "benchmark.")] = "4",
    tool_latency: Annotated[float, typer.Option(min=0.0, help="Mean tool latency in seconds (before scaling).")]
        = 1.0,
    latencies: Annotated[str, typer.Option(help="Extra mean latencies for the time-saved plot, e.g. 0.5,1,2 "
                                                "(one run each, not repeated).")] = "",
    time_scale: Annotated[float | None, typer.Option(min=0.0, help="Multiplies every latency and generation time "
                                                           "(default 0.1; 0.4 for the multi-agent run).")] = None,
    tasks_per_agent: Annotated[int, typer.Option(min=1, help="Multi-agent run: tasks (trajectories) per agent.")]
        = 2,
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0, help="Stand-in speculator's probability of the true "
                                                                "call.")] = 0.7,
    samples: Annotated[int, typer.Option(min=1, help="Speculator samples per step (lambda).")] = 3,
    chain_depth: Annotated[int, typer.Option(min=0, help="Chained speculation: levels of predicted successors of "
                                                         "a speculated read (0: none).")] = 1,
    offload: Annotated[bool, typer.Option("--offload/--in-process", help="The pattern predictor in a worker "
                                          "process (default) or on the agents' event loop (with --workload "
                                          "mcp: the proxies').")] = True,
    grouping: Annotated[str, typer.Option(help="step: one call per model message; turn: a turn's calls in one "
                                               "message.")] = "step",
    seed: int = 0,
    out: Annotated[str, typer.Option(help="Report directory.")] = "reports",
    code_latency: Annotated[float, typer.Option(min=0.0, help="code workload: tool latency (s).")] = 0.4,
    code_rate: Annotated[float, typer.Option(min=0.001, help="code workload: stream rate (tokens/s).")] = 60.0,
    repeats: Annotated[int, typer.Option(min=1, help="Repeats (medians with spread): of the interleaved arms, or "
                                                     "per program for the code workload.")] = 3,
    load: Annotated[int, typer.Option(min=0, help="Also run beside N bounded CPU-burning processes "
                                                  "(results.under_load).")] = 0,
    program: Annotated[list[str] | None, typer.Option(help="code workload: only these programs.")] = None,
    spec_ptc: Annotated[bool, typer.Option("--spec-ptc/--no-spec-ptc", help="code workload: spec-ptc arm.")] = True,
    sptc_python: Annotated[str | None, typer.Option(help="code workload: Python 3.12 with spec-ptc.")] = None,
    engine: Annotated[str, typer.Option(help="simulated, or vllm: the multi-agent arms on a real vLLM (CPU, "
                                             "tiny random model; `make vllm-venv`; time scale 0.3).")] = "simulated",
    workers: Annotated[int, typer.Option(min=0, help="Worker processes sharing a store (with --store redis).")] = 0,
    store: Annotated[str, typer.Option(help="redis: --workers processes share Redis vs each alone.")] = "local",
    redis_url: Annotated[str | None, typer.Option(help="--store redis: use this server (default: start one).")] = None,
    mcp_suite: Annotated[str, typer.Option(help="mcp workload: bfcl (BFCL backends as an MCP server), repo (real "
                                                "filesystem and git servers on a generated repository) or both.")] =
        "bfcl",
    mcp_arms: Annotated[str, typer.Option(help="mcp workload, bfcl suite: the arms to run, comma-separated "
                                               "(direct always runs): proxy-cold, proxy-warm, oracle.")] =
        "proxy-cold,proxy-warm,oracle",
    loop_suite: Annotated[str, typer.Option(help="loop workload: notes (a server with --tool-latency per call) or "
                                                 "repo (real filesystem and git servers; `make mcp-servers`).")] =
        "notes",
    loop_arms: Annotated[str, typer.Option(help="loop workload: the arms, comma-separated (direct always runs).")] =
        "direct,proxy,daemon,daemon+speculator,oracle",
    policy: PolicyOption = None,
    json_path: JsonOption = None,
) -> None:
    """Serial vs speculative arms on a workload; prints a table, writes JSON + HTML; checks equivalence."""
    from forethought.bench.main import WORKLOADS, BenchConfig, run_bench

    _one_of(workload, WORKLOADS, "--workload")
    _one_of(grouping, GROUPINGS, "--grouping")
    _one_of(engine, ENGINES, "--engine")
    _one_of(store, BENCH_STORES, "--store")
    agent_counts = _counts(agents, "--agents")
    Path(out).mkdir(parents=True, exist_ok=True)  # a report directory that cannot be made fails now, not at the end
    config = BenchConfig(workload=workload, arms=arms, trajectories=0 if full else trajectories,
                         agents=agent_counts[0], tool_latency_s=tool_latency, latencies=_floats(latencies),
                         time_scale=time_scale if time_scale is not None else 0.1, alpha=alpha, samples=samples,
                         grouping=grouping, seed=seed, repeats=repeats, load=load, chain_depth=chain_depth,
                         offload=offload, out_dir=out, policy=_policy(policy))
    doc: dict[str, Any]
    if workers > 0:
        from forethought.bench.workers import run_cli

        doc = run_cli(workers, agent_counts[0], tasks_per_agent, repeats, seed, store, redis_url, json_path)
    elif engine == "vllm":
        from dataclasses import replace

        from forethought.bench.vllm.bench import VllmBenchParams, run_vllm_bench

        config = replace(config, time_scale=time_scale if time_scale is not None else 0.3)
        doc = exits.run(lambda: run_vllm_bench(config, agent_counts, tasks_per_agent, VllmBenchParams(repeats=repeats),
                                          console=console, json_path=json_path))
    elif len(agent_counts) > 1:
        from forethought.bench.multi_agent import MultiAgentParams, run_multi_agent

        params = MultiAgentParams() if time_scale is None else MultiAgentParams(time_scale=time_scale)
        doc = exits.run(lambda: run_multi_agent(config, agent_counts, tasks_per_agent, params, console, json_path))
    elif workload == "sweep":
        from forethought.bench.sweep import run_sweep

        doc = exits.run(lambda: run_sweep(config, console, json_path))
    elif workload == "paper-table":
        from forethought.bench.paper_table import run_paper_table

        doc = exits.run(lambda: run_paper_table(config, console, json_path))
    elif workload == "mcp":
        from forethought.bench.mcp.command import run_mcp_bench

        if mcp_suite not in ("bfcl", "repo", "both"):
            raise typer.BadParameter("mcp-suite must be bfcl, repo or both")
        latency = tool_latency * (time_scale or 0.25)
        doc = exits.run(lambda: run_mcp_bench(trajectories, latency, seed, console, json_path, suite=mcp_suite,
                                              arms=tuple(a for a in mcp_arms.split(",") if a), in_process=not offload))
    elif workload == "loop":
        from forethought.bench.loop.command import run_loop_command

        loop_config = _loop_config(loop_suite, loop_arms, trajectories, repeats, seed, tool_latency, time_scale)
        doc = exits.run(lambda: run_loop_command(loop_config, console, json_path))
    elif workload == "code":
        from forethought.bench.code.runner import code_bench, format_code_bench, save_document

        doc = exits.run(lambda: code_bench(latency_s=code_latency, tokens_per_s=code_rate, repeats=repeats,
                                      programs=program or None, spec_ptc=spec_ptc, sptc_python=sptc_python,
                                      progress=lambda line: console.print(line, style="dim")))
        console.print(format_code_bench(doc))
        if json_path:
            save_document(doc, json_path)
    else:
        _check_policy_tools(config)
        doc = exits.run(lambda: run_bench(config, console, json_path))
    if not doc["results"].get("equivalent", True):
        console.print("[red]speculative arms differ from serial[/red]")
        raise typer.Exit(1)


LOOP_TIME_SCALE = 0.3
"""The loop workload's default time scale: its notes server answers in 0.3 s and its scripted model keeps the
timing the loop bench was measured with; --time-scale scales both from there."""


def _loop_config(suite: str, arms: str, tasks: int, repeats: int, seed: int, latency_s: float,
                 time_scale: float | None) -> Any:
    from forethought.bench.loop.runner import LoopBenchConfig

    chosen = tuple(a for a in arms.split(",") if a)
    scale = LOOP_TIME_SCALE if time_scale is None else time_scale  # the server's latency: 1.0 s x 0.3 by default
    try:
        return LoopBenchConfig(suite, tasks, repeats=repeats, seed=seed, latency_s=latency_s * scale,
                               time_scale=scale / LOOP_TIME_SCALE,
                               arms=chosen if "direct" in chosen else ("direct", *chosen))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--loop-suite' / '--loop-arms'") from None


@app.command("serve-model")
def serve_model(
    host: str = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    workload: Annotated[str, typer.Option(help="bfcl or synthetic.")] = "bfcl",
    grouping: Annotated[str, typer.Option(help="step: one call per model message; turn: a turn's calls in one "
                                               "message.")] = "step",
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.7,
    time_scale: Annotated[float, typer.Option(min=0.0)] = 1.0,
    seed: int = 0,
    script: Annotated[Path | None, typer.Option(help="Serve this script of model responses (JSON: text, tool "
                                                     "calls, timing) instead of a workload, on the Chat "
                                                     "Completions, Responses and Anthropic Messages endpoints.")]
        = None,
) -> None:
    """Run the simulated engine until interrupted: workload trajectories, or a script of your own responses."""
    from forethought.bench.engine_sim.model_server import SpeculatorConfig, create_model_server
    from forethought.bench.main import TRAJECTORY_WORKLOADS, BenchConfig, _timing, make_workload
    from forethought.serve.http import serve_forever

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise typer.BadParameter("the simulated engine binds loopback only")
    _one_of(workload, TRAJECTORY_WORKLOADS, "--workload")
    _one_of(grouping, GROUPINGS, "--grouping")
    if script is not None:
        from forethought.serve.scripted import create_scripted_server, load_script

        scripted = load_script(script)
        console.print(f"serving a script of {len(scripted.responses)} responses on http://{host}:{port}/v1 "
                      "(chat/completions, responses, messages)")
        serve_forever(create_scripted_server(scripted, time_scale), host, port)
        return
    config = BenchConfig(workload=workload, trajectories=0, grouping=grouping, alpha=alpha, time_scale=time_scale,
                         seed=seed)
    try:
        loaded = make_workload(config)
    except ForethoughtError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    trajectories = [*loaded.trajectories(), *loaded.training()]
    main_timing, spec_timing = _timing(config)
    app_ = create_model_server(trajectories, timing=main_timing,
                               speculator=SpeculatorConfig(alpha=alpha, timing=spec_timing, seed=seed))
    console.print(f"serving {len(trajectories)} trajectories on http://{host}:{port}/v1")
    serve_forever(app_, host, port)


@app.command()
def gateway(
    upstream: Annotated[str, typer.Option(help="Upstream OpenAI-compatible base URL, including /v1.")],
    host: str = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8100,
    post_wait_s: Annotated[float, typer.Option(callback=_finite(0.0), help="How long a closed call waits for a "
                                                                          "late cache post.")] = 0.05,
    max_keep_alive_s: Annotated[float, typer.Option(callback=_finite(0.0, above=True), help="Upper bound on a "
                                                    "cached entry's keep_alive.")] = 300.0,
    mark_continuations: bool = True,
    upstream_api_key: str | None = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="TOML policy file: tools it does not let "
                                                                 "speculate, or marks private, are never served "
                                                                 "from the cache.")] = None,
    log_level: Annotated[str, typer.Option(help="critical, error, warning, info, debug or trace.")] = "info",
    max_connections: Annotated[int, typer.Option(min=1, help="Connections served at once; more are answered "
                                                             "503.")] = 1000,
    header_timeout_s: Annotated[float, typer.Option(callback=_finite(0.0, above=True), help="Close a connection "
                                                    "whose request headers take longer.")] = 10.0,
    body_timeout_s: Annotated[float, typer.Option(callback=_finite(0.0, above=True), help="Answer 408 to a "
                                                  "request body that takes longer.")] = 30.0,
    max_line_bytes: Annotated[int, typer.Option(min=1, help="Longest upstream stream line; a longer one ends the "
                                                            "stream with an error chunk.")] = 16 << 20,
    check_upstream: Annotated[bool, typer.Option("--check-upstream/--no-check-upstream",
                                                 help="Check at start that the upstream (and --redis) answer.")]
        = True,
    redis: Annotated[str | None, typer.Option("--redis", help="Keep cache entries and response scopes in this "
                                              "Redis (redis://...), shared by every replica.")] = None,
    secret_file: Annotated[Path | None, typer.Option(help="With --redis: file holding the deployment secret "
                                                          "(>= 16 bytes) that authenticates what Redis holds.")] = None,
) -> None:
    """Run the engine-side tool-cache gateway in front of an OpenAI-compatible engine."""
    import logging

    from forethought.gateway.app import GatewayConfig, create_gateway, probe_upstream
    from forethought.gateway.cache import CacheLimits
    from forethought.serve.http import ServerLimits, serve_forever

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise typer.BadParameter("the gateway binds loopback only")
    levels = ("critical", "error", "warning", "info", "debug", "trace")
    if log_level.lower() not in levels:
        raise typer.BadParameter(f"--log-level must be one of {', '.join(levels)}")
    logging.basicConfig(level=logging.DEBUG if log_level.lower() == "trace" else log_level.upper())
    if check_upstream:
        probe_upstream(upstream)
    limits = CacheLimits(default_keep_alive_s=min(30.0, max_keep_alive_s), max_keep_alive_s=max_keep_alive_s)
    config = GatewayConfig(post_wait_s=post_wait_s, mark_continuations=mark_continuations,
                           upstream_api_key=upstream_api_key, limits=limits, policy=_policy(policy),
                           body_timeout_s=body_timeout_s, max_line_bytes=max_line_bytes)
    store = None
    if redis is not None:
        from forethought.gateway.replicas import load_secret, replica_store
        from forethought.stores.errors import StoreError

        if secret_file is None:
            raise StoreError("--redis needs --secret-file (the deployment secret shared by the replicas)")
        secret = load_secret(secret_file)
        if check_upstream:
            from forethought.stores.gateway_scopes import probe

            probe(redis)
        store = replica_store(redis, secret, limits)
    console.print(f"gateway on http://{host}:{port}/v1 -> {upstream}" + (" (scopes in Redis)" if store else ""))
    serve_forever(create_gateway(upstream, config, store), host, port, log_level=log_level.lower(),
                  limits=ServerLimits(limit_concurrency=max_connections, header_timeout_s=header_timeout_s))


@app.command("predict-eval")
def predict_eval(
    workload: Annotated[str, typer.Option(help="Workload to evaluate next-call prediction on.")] = "bfcl",
    no_user_text: Annotated[bool, typer.Option("--no-user-text", help="Show the predictor the calls and "
                                               "outputs only, as a tool proxy sees them.")] = False,
    policy: Annotated[Path | None, typer.Option("--policy", help="TOML policy file: predictions of tools it "
                                                "does not let speculate, or below its min_confidence, are "
                                                "not made.")] = None,
    misses_path: Annotated[Path | None, typer.Option("--misses", help="Write every position whose first "
                                                     "prediction was not exact, with its category, as JSON "
                                                     "Lines.")] = None,
    json_path: JsonOption = None,
) -> None:
    """Next-call prediction accuracy of the pattern predictor (two-fold, interleaved ids)."""
    from forethought.bench.predict_eval import print_predict_eval, run_predict_eval, write_misses
    from forethought.bench.report import document, write_json

    rules = None if policy is None else _policy(policy)  # a bad file: one line on stderr, status 2
    misses: list[dict[str, Any]] | None = [] if misses_path else None
    try:
        results = run_predict_eval(workload=workload, user_text=not no_user_text, policy=rules, misses=misses)
    except ForethoughtError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    print_predict_eval(console, results)
    if misses_path and misses is not None:
        write_misses(str(misses_path), misses)
    if json_path:
        write_json(json_path, document("predict-eval", {"workload": workload, "user_text": not no_user_text,
                                                        "policy": None if policy is None else str(policy)}, results))


@app.command("model")
def model(
    alpha: Annotated[float, typer.Option(help="Acceptance rate.")] = 0.7,
    generation_s: Annotated[float | None, typer.Option(help="Main generation time G per turn (default: from "
                                                            "token counts and rates).")] = None,
    speculator_s: Annotated[float, typer.Option(help="Speculator time g.")] = 0.3,
    tool_s: Annotated[float, typer.Option(help="Tool time T.")] = 1.0,
    turns: Annotated[int, typer.Option(help="Turns N.")] = 10,
    api_overhead_s: Annotated[float, typer.Option(help="API overhead o of a client round trip.")] = 0.05,
    prefill_tokens_per_s: Annotated[float, typer.Option(help="Prefill rate phi.")] = 5000.0,
    decode_tokens_per_s: Annotated[float, typer.Option(help="Decode rate delta.")] = 50.0,
    call_tokens: int = 40,
    reasoning_tokens: int = 60,
    agents: Annotated[str, typer.Option(help="Agent counts for the simulator, e.g. 1,8,32.")] = "1,8,32",
    slots: Annotated[int, typer.Option(help="Engine batch slots K in the simulator.")] = 16,
    simulate: Annotated[bool, typer.Option(help="Also run the multi-agent simulator.")] = True,
    out: Annotated[Path, typer.Option(help="Directory for the heatmap PNGs.")] = Path("reports/model"),
    json_path: JsonOption = None,
) -> None:
    """Closed-form and simulated speedups (Lemma 1, engine-side formula, heatmaps)."""
    from forethought.bench.perfmodel import ModelCommandParams, run_model_command

    try:
        params = ModelCommandParams(
            alpha=alpha, generation_s=generation_s, speculator_s=speculator_s, tool_s=tool_s, turns=turns,
            api_overhead_s=api_overhead_s, prefill_tokens_per_s=prefill_tokens_per_s,
            decode_tokens_per_s=decode_tokens_per_s, call_tokens=call_tokens, reasoning_tokens=reasoning_tokens,
            agents=tuple(int(a) for a in agents.split(",") if a.strip()), slots=slots, simulate=simulate)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    doc = run_model_command(params, json_path=Path(json_path) if json_path else None, out_dir=out)
    closed = doc["results"]["closed_form"]
    console.print_json(data=closed)
    console.print(f"figures: {', '.join(str(f) for f in doc['results'].get('figures', []))}")


__all__ = ["INTERRUPTED", "TERMINATED", "app", "interrupted", "stop_workers"]
