"""How long ``import forethought`` takes: fresh interpreters, median and spread, against the 0.3 s target.

``python -m forethought.bench.import_time --json PATH`` starts ``--runs`` fresh interpreters one after the
other (the same ``sys.executable``, ``PYTHONDONTWRITEBYTECODE`` unset so the bytecode caches are warm, as
they are for a user after the first run). Each child times its own ``import MODULE`` with
``time.perf_counter`` (interpreter start-up excluded) and reports which of the heavy third-party
packages the import pulled in. One more child runs with ``-X importtime`` to name the slowest imports.

The document: ``{"command": "import-time", "version", "params", "results"}`` with ``results = {"median_s",
"min_s", "max_s", "runs_s", "target_s", "meets_target", "heavy_loaded", "slowest", "machine"}``; the
machine's load average before and after is recorded beside the figure, since a busy machine makes
imports several times slower (the target is for an idle one).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from forethought.bench.lag import machine_snapshot
from forethought.bench.report import document, write_json

TARGET_S = 0.3
"""``import forethought`` on an idle machine should take less than this."""
DEFAULT_RUNS = 15
HEAVY = ("prometheus_client", "openai", "httpx", "httpx2", "anthropic", "numpy", "matplotlib", "rich", "typer",
         "starlette", "uvicorn", "pydantic", "mcp", "redis", "jiter")
"""Third-party packages that ``import forethought`` should not need (each costs tens of milliseconds or more)."""
CHILD_TIMEOUT_S = 120.0

_CHILD = """
import sys, time, json
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
heavy = sorted(name for name in {heavy!r} if name in sys.modules)
print(json.dumps({{"seconds": elapsed, "heavy": heavy}}))
"""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def time_import(module: str = "forethought") -> dict[str, Any]:
    """One fresh interpreter's ``import module``: ``{"seconds", "heavy"}``."""
    done = subprocess.run([sys.executable, "-c", _CHILD.format(module=module, heavy=HEAVY)], capture_output=True,
                          text=True, env=_child_env(), timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"import {module} failed in a fresh interpreter:\n{done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def slowest_imports(module: str = "forethought", count: int = 10) -> list[dict[str, Any]]:
    """The ``count`` imports with the largest self time under ``-X importtime`` (one fresh interpreter)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                          text=True, env=_child_env(), timeout=CHILD_TIMEOUT_S, check=False)
    rows: list[tuple[float, float, str]] = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            rows.append((int(parts[0]) / 1000, int(parts[1]) / 1000, parts[2].strip()))
    rows.sort(reverse=True)
    return [{"module": name, "self_ms": own, "cumulative_ms": total} for own, total, name in rows[:count]]


def measure(runs: int = DEFAULT_RUNS, module: str = "forethought") -> dict[str, Any]:
    """Time ``runs`` fresh imports (after one discarded warm-up) and summarise them."""
    time_import(module)  # warm the bytecode and filesystem caches
    before = machine_snapshot()
    samples = [time_import(module) for _ in range(runs)]
    after = machine_snapshot()
    seconds = [s["seconds"] for s in samples]
    median = statistics.median(seconds)
    return {"median_s": median, "min_s": min(seconds), "max_s": max(seconds), "runs_s": seconds,
            "target_s": TARGET_S, "meets_target": median < TARGET_S,
            "heavy_loaded": sorted({name for s in samples for name in s["heavy"]}),
            "slowest": slowest_imports(module),
            "machine": {"cores": before.cores, "load_avg_start": [before.load_1m, before.load_5m, before.load_15m],
                        "load_avg_end": [after.load_1m, after.load_5m, after.load_15m]}}


app = typer.Typer(add_completion=False, help="Time `import forethought` in fresh interpreters.")


@app.command()
def main(json_path: Annotated[Path | None, typer.Option("--json", help="Write machine-readable results here.")]
         = None,
         runs: Annotated[int, typer.Option(min=1, help="Fresh interpreters (the figure is their median).")]
         = DEFAULT_RUNS,
         module: Annotated[str, typer.Option(help="The module to import.")] = "forethought") -> None:
    """Print the median import time with its spread and the load average; optionally write JSON."""
    console = Console()
    results = measure(runs, module)
    params = {"runs": runs, "module": module, "python": platform.python_version(), "executable": sys.executable}
    doc = document("import-time", params, results)
    load = results["machine"]["load_avg_start"][0]
    verdict = "[green]meets[/green]" if results["meets_target"] else "[red]misses[/red]"
    console.print(f"import {module}: median {results['median_s']:.3f} s over {runs} fresh interpreters "
                  f"(range {results['min_s']:.3f} to {results['max_s']:.3f} s), load average {load:.2f} on "
                  f"{results['machine']['cores']} cores: {verdict} the {TARGET_S:g} s target (idle machine)")
    heavy = results["heavy_loaded"]
    console.print(f"heavy packages imported: {', '.join(heavy) if heavy else 'none'}")
    console.print("slowest imports (self ms): " + ", ".join(f"{row['module']} {row['self_ms']:.1f}"
                                                           for row in results["slowest"][:5]))
    if json_path is not None:
        console.print(f"json: {write_json(json_path, doc)}")


if __name__ == "__main__":
    sys.exit(app())
