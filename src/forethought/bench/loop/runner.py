"""``forethought bench --workload loop``: the whole loop, direct, through the MCP proxy and through the daemon.

One scripted upstream serves every task (the conversation's user text picks its script; the speculator's
model name gets a faster, imperfect copy: :func:`~forethought.bench.loop.workload.noisy_script`), behind a
recorder. Each arm (:mod:`forethought.bench.loop.arms`) keeps its servers and its daemon for the whole run;
tasks run one at a time, every arm on every task, the arms' order rotated per task, the whole repeated.
Server start-up is not timed; a task's time is its loop's (first request to last answer).

Checked on every run, against the direct arm of the same task and repeat: every tool answer and the final
text equal, the server's final state equal (notes file, or repository files, HEAD and status), no early run
of a tool that is not a read (the shim's and the proxy's own records), and for the daemon arms the client
received exactly the bytes the upstream sent, request by request (recorders at both ends).

Reported per arm (:func:`run_loop_bench`): total seconds per repeat and time saved against direct (median
and range over repeats), the median of the per-task savings, hits, early non-read runs, equivalence; and the
ratios the issue asks for (daemon's saving over the proxy's, over the oracle's). The load average is read at
the start and the end.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from starlette.types import Receive, Scope, Send

from forethought._core.policy import Policy, ServerPolicy, ToolPolicy
from forethought._core.tools import Effect
from forethought.bench.loop.agent import LoopRun, run_loop
from forethought.bench.loop.arms import ARMS, DAEMON_ARMS, SPECULATOR_MODEL, ArmStack, Router, edit_notes, open_arm
from forethought.bench.loop.recording import RecordingApp, RecordingTransport
from forethought.bench.loop.workload import GIT_READS, Task, noisy_script, notes_state, notes_tasks, repo_tasks
from forethought.daemon.transcript import read_request
from forethought.daemon.wire import Wire
from forethought.serve.http import buffered_request, serve_in_process
from forethought.serve.scripted import create_scripted_server, parse_script

__all__ = ["LoopBenchConfig", "run_loop_bench"]

MAIN_MODEL = "main"


@dataclass(frozen=True, slots=True)
class LoopBenchConfig:
    suite: str = "notes"
    """``notes`` (the notes server, with latency) or ``repo`` (real filesystem and git servers)."""
    tasks: int = 6
    training: int = 12
    """Tasks (of other seeds) every learning arm runs first, untimed: the proxy and the daemons learn online,
    as in use, and start the timed tasks having seen these."""
    repeats: int = 2
    seed: int = 0
    latency_s: float = 0.3
    """The notes server's latency per call."""
    time_scale: float = 1.0
    """Multiplies the scripted model's timing (first token, fragments)."""
    speculator_error_rate: float = 0.3
    speculator_speedup: float = 3.0
    arms: tuple[str, ...] = ARMS
    project: str = "."
    """Where ``make mcp-servers`` installed the repo suite's servers."""

    def __post_init__(self) -> None:
        if self.suite not in ("notes", "repo"):
            raise ValueError("suite must be notes or repo")
        unknown = set(self.arms) - set(ARMS)
        if unknown or "direct" not in self.arms:
            raise ValueError(f"arms must include direct and be among {', '.join(ARMS)}")


class _TaskUpstream:
    """The scripted upstream of every task: the request's user text picks the task, its model the script."""

    def __init__(self, tasks: Sequence[Task], config: LoopBenchConfig, training: Sequence[Task] = (),
                 training_scale: float = 0.1) -> None:
        self._main: dict[str, Any] = {}
        self._speculator: dict[str, Any] = {}
        for i, task in enumerate([*tasks, *training]):
            scale = config.time_scale * (training_scale if i >= len(tasks) else 1.0)
            self._main[task.user_text] = create_scripted_server(parse_script(task.script), scale)
            self._speculator[task.user_text] = create_scripted_server(
                parse_script(noisy_script(task.script, config.speculator_error_rate, config.seed + i)),
                scale / config.speculator_speedup)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, replay = await buffered_request(receive)
        wire = Wire.of_path(scope["path"]) or Wire.CHAT
        parsed = json.loads(body) if body else {}
        text = read_request(wire, parsed).user_message
        apps = self._speculator if parsed.get("model") == SPECULATOR_MODEL else self._main
        app = apps.get(text) or next(iter(self._main.values()))
        await app(scope, replay, send)


@dataclass
class _Outcome:
    run: LoopRun
    state: str
    hits: int
    early_non_read: int
    stream_unchanged: bool | None


@dataclass
class _ArmTotals:
    seconds: list[float] = field(default_factory=list)
    per_task_saved: list[float] = field(default_factory=list)
    hits: int = 0
    calls: int = 0
    early_non_read: int = 0
    equivalent: bool = True
    stream_unchanged: bool = True
    differences: list[str] = field(default_factory=list)
    """Where a run differed from direct (the call's index and tool, never its content)."""
    events: dict[str, int] = field(default_factory=dict)
    """The daemon's speculation events by kind over the whole run, training included."""


async def _one(stack: ArmStack, task: Task, recorder: RecordingApp, reset: Callable[[], None],
               state_of: Callable[[], str], edit: Callable[[str, str], None] | None,
               reads: frozenset[str]) -> _Outcome:
    reset()
    before_requests = len(recorder.exchanges)
    hits_before = stack.daemon.desk.counts.hits if stack.daemon is not None else 0
    shim_calls_before = {name: len(shim.calls) for name, shim in stack.shims.items()}
    proxy_hits_before = sum(p.finished.hits for p in stack.proxies.values())  # a session's stats land at its end
    transport = RecordingTransport()
    async with stack.connections() as connections:
        run = await run_loop(task.wire, stack.model_url(task), MAIN_MODEL, task.user_text, task.tools,
                             Router(connections, edit), http_client=httpx2.AsyncClient(transport=transport))
    early_non_read = sum(1 for name, shim in stack.shims.items() for c in shim.calls[shim_calls_before[name]:]
                         if c.early and c.tool not in reads)
    hits = (stack.daemon.desk.counts.hits - hits_before) if stack.daemon is not None else 0
    for proxy in stack.proxies.values():
        early_non_read += sum(1 for tool in proxy.links[-1].speculative_tools if tool not in reads)
    hits += sum(p.finished.hits for p in stack.proxies.values()) - proxy_hits_before
    unchanged = None
    if stack.daemon is not None:
        sent = [e.sent for e in recorder.exchanges[before_requests:] if json.loads(e.body).get("model") == MAIN_MODEL]
        unchanged = sent == [b"".join(chunks) for chunks in transport.received]
    return _Outcome(run, state_of(), hits, early_non_read, unchanged)


def _difference(outcome: _Outcome, base: _Outcome) -> str:
    """Where ``outcome`` differs from the direct arm's ``base`` ('' if nowhere)."""
    ours, theirs = outcome.run, base.run
    for i, (a, b) in enumerate(zip(ours.answers, theirs.answers, strict=False)):
        if a != b:
            return f"answer {i} ({theirs.calls[i]}) differs"
    if len(ours.answers) != len(theirs.answers) or ours.calls != theirs.calls:
        return f"{len(ours.answers)} calls, direct made {len(theirs.answers)}"
    if ours.final_text != theirs.final_text:
        return "the final text differs"
    return "the final state differs" if outcome.state != base.state else ""


def _spread(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0}
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


async def run_loop_bench(config: LoopBenchConfig, progress: Callable[[str], None] = lambda _: None
                         ) -> dict[str, Any]:
    """Run the bench; returns ``{"command", "version", "params", "results"}`` (results per arm)."""
    from forethought._version import __version__

    load_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="forethought-loop-") as tmp:
        work = Path(tmp)
        suite = _NotesSuite(config, work) if config.suite == "notes" else _RepoSuite(config, work)
        tasks, training = await suite.prepare()
        recorder = RecordingApp(_TaskUpstream(tasks, config, training))
        totals = {arm: _ArmTotals() for arm in config.arms}
        async with serve_in_process(recorder) as upstream, _Stacks(config, upstream, suite, tasks, work) as stacks:
            learning = [arm for arm in config.arms if arm in ("proxy", "daemon", "daemon+speculator")]
            for i, task in enumerate(training):
                for arm in learning:
                    await _one(stacks[arm], task, recorder, suite.reset(arm), suite.state(arm), suite.edit(arm),
                               suite.reads)
                progress(f"trained {', '.join(learning)} on {i + 1}/{len(training)} tasks")
            for repeat in range(config.repeats):
                per_arm = {arm: 0.0 for arm in config.arms}
                for i, task in enumerate(tasks):
                    shift = (i + repeat) % len(config.arms)
                    order = config.arms[shift:] + config.arms[:shift]
                    outcomes = {arm: await _one(stacks[arm], task, recorder, suite.reset(arm), suite.state(arm),
                                                suite.edit(arm), suite.reads) for arm in order}
                    base = outcomes["direct"]
                    for arm, outcome in outcomes.items():
                        t = totals[arm]
                        per_arm[arm] += outcome.run.seconds
                        t.hits += outcome.hits
                        t.calls += len(outcome.run.answers)
                        t.early_non_read += outcome.early_non_read
                        difference = _difference(outcome, base)
                        if difference:
                            t.equivalent = False
                            t.differences.append(f"repeat {repeat + 1}, {task.name}: {difference}")
                        t.stream_unchanged &= outcome.stream_unchanged is not False
                        t.per_task_saved.append(1 - outcome.run.seconds / base.run.seconds)
                    progress(f"repeat {repeat + 1}, {task.name} ({task.wire}): " + ", ".join(
                        f"{arm} {outcomes[arm].run.seconds:.2f}s" for arm in config.arms))
                for arm in config.arms:
                    totals[arm].seconds.append(per_arm[arm])
            for arm in config.arms:
                daemon = stacks[arm].daemon
                if daemon is not None:
                    totals[arm].events = {str(kind.value): n for kind, n in sorted(
                        daemon.runtime.telemetry.counts.items(), key=lambda item: item[0].value)}
        load_end = list(os.getloadavg())
    return _document(config, totals, tasks, load_start, load_end, __version__)


def _document(config: LoopBenchConfig, totals: Mapping[str, _ArmTotals], tasks: Sequence[Task],
              load_start: list[float], load_end: list[float], version: str) -> dict[str, Any]:
    direct = totals["direct"].seconds
    arms: dict[str, Any] = {}
    for arm, t in totals.items():
        saved = [1 - s / d for s, d in zip(t.seconds, direct, strict=True)]
        arms[arm] = {"seconds": _spread(t.seconds), "time_saved": _spread(saved),
                     "per_task_saved_median": round(statistics.median(t.per_task_saved), 4),
                     "hits": t.hits, "calls": t.calls, "early_non_read_runs": t.early_non_read,
                     "equivalent": t.equivalent, "stream_unchanged": t.stream_unchanged if arm in DAEMON_ARMS else None,
                     "speculation_events": t.events, "differences": t.differences}
    ratios: dict[str, float | None] = {}
    daemon = arms.get("daemon", {}).get("time_saved", {}).get("median")
    for other in ("proxy", "oracle"):
        theirs = arms.get(other, {}).get("time_saved", {}).get("median")
        ratios[f"daemon_over_{other}"] = round(daemon / theirs, 3) if daemon is not None and theirs else None
    equivalent = all(a["equivalent"] and a["early_non_read_runs"] == 0 and a["stream_unchanged"] is not False
                     for a in arms.values())
    return {"command": "bench", "version": version,
            "params": {**asdict(config), "workload": "loop", "tasks_calls": sum(t.calls for t in tasks),
                       "python": sys.version.split()[0], "load_average": {"start": load_start, "end": load_end}},
            "results": {"arms": arms, "ratios": ratios, "equivalent": equivalent}}


class _Stacks:
    """Every arm's stack, opened together for the run (so arms can alternate task by task)."""

    def __init__(self, config: LoopBenchConfig, upstream: str, suite: Any, tasks: Sequence[Task], work: Path) -> None:
        self._args = (config, upstream, suite, tasks, work)
        self._exits: Any = None

    async def __aenter__(self) -> dict[str, ArmStack]:
        import contextlib

        config, upstream, suite, tasks, work = self._args
        self._exits = contextlib.AsyncExitStack()
        stacks = {}
        for arm in config.arms:
            (work / arm).mkdir(exist_ok=True)
            stacks[arm] = await self._exits.enter_async_context(
                open_arm(arm, upstream, suite.commands(arm), suite.policy, tasks, work / arm, suite.env))
        return stacks

    async def __aexit__(self, *exc: object) -> None:
        await self._exits.aclose()


class _NotesSuite:
    def __init__(self, config: LoopBenchConfig, work: Path) -> None:
        self.config = config
        self.work = work
        self.env: Mapping[str, str] | None = None
        self.policy = Policy(servers={"notes": ServerPolicy(trusted=True)})
        self.reads = frozenset({"read_note", "list_notes", "search_notes", "note_info"})
        self._initial = json.dumps(notes_state(config.seed), sort_keys=True)

    async def prepare(self) -> tuple[list[Task], list[Task]]:
        every = notes_tasks(self.config.tasks + self.config.training, self.config.seed)
        return every[:self.config.tasks], every[self.config.tasks:]

    def _state_file(self, arm: str) -> Path:
        return self.work / f"{arm}-notes.json"

    def commands(self, arm: str) -> dict[str, list[str]]:
        return {"notes": [sys.executable, "-m", "forethought.bench.loop.notes_server", str(self._state_file(arm)),
                          "--latency", str(self.config.latency_s)]}

    def reset(self, arm: str) -> Callable[[], None]:
        def reset() -> None:
            self._state_file(arm).write_text(self._initial)

        return reset

    def state(self, arm: str) -> Callable[[], str]:
        return lambda: self._state_file(arm).read_text()

    def edit(self, arm: str) -> Callable[[str, str], None]:
        return edit_notes(self._state_file(arm))


class _RepoSuite:
    def __init__(self, config: LoopBenchConfig, work: Path) -> None:
        from forethought.bench.mcp.repo import git_env

        self.config = config
        self.work = work
        self.env = git_env()
        self.template, self.root = work / "template", work / "repo" / "project"
        self.reads: frozenset[str] = frozenset()
        self.policy = Policy()

    async def prepare(self) -> tuple[list[Task], list[Task]]:
        from forethought.bench.loop.shim import open_server
        from forethought.bench.mcp.repo import RepoShape, make_repository
        from forethought.bench.mcp.repo_bench import server_commands

        files = make_repository(self.template, RepoShape(seed=self.config.seed))
        self.root.parent.mkdir(parents=True)
        self._reset()
        self._commands = server_commands(self.config.project, self.root)
        schemas: dict[str, Any] = {}
        reads = set(GIT_READS)
        for server, command in self._commands.items():
            async with open_server(command, self.env) as (_, tools, _name):
                for tool in tools:
                    schemas[f"mcp__{server}__{tool['name']}"] = tool.get("inputSchema") or {"type": "object"}
                    if (tool.get("annotations") or {}).get("readOnlyHint"):
                        reads.add(tool["name"])
        self.reads = frozenset(reads)
        overrides = {name: ToolPolicy(effect=Effect.READ_ONLY) for name in GIT_READS}
        self.policy = Policy(servers={"fs": ServerPolicy(trusted=True),
                                      "git": ServerPolicy(trusted=True, tools=overrides)})
        model_reads = frozenset(n for n in schemas if n.split("__")[-1] in self.reads)
        every = repo_tasks(self.root, files, self.config.tasks + self.config.training, self.config.seed, schemas,
                           model_reads)
        return every[:self.config.tasks], every[self.config.tasks:]

    def _reset(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        shutil.copytree(self.template, self.root, symlinks=True)

    def commands(self, arm: str) -> dict[str, list[str]]:
        return self._commands

    def reset(self, arm: str) -> Callable[[], None]:
        return self._reset

    def state(self, arm: str) -> Callable[[], str]:
        from forethought.bench.mcp.repo_bench import repository_state

        return lambda: repository_state(self.root)

    def edit(self, arm: str) -> Callable[[str, str], None] | None:
        return None
