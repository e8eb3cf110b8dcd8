"""Benchmark reports: a rich table on the terminal, the JSON document, and an HTML page with PNG plots.

The JSON document has the shape docs/design.md ("Public surface") promises: ``{"command", "version",
"params", "results"}`` with ``results.arms[ARM]`` and ``results.equivalent``. Plots are drawn with
matplotlib's Agg backend (no screen needed); the HTML page embeds them by relative path and shows every
parameter used.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from forethought._version import __version__

ARM_COLUMNS = (("wall_s", "wall s", "{:.2f}"), ("time_saved", "saved", "{:.1%}"), ("speedup", "speedup", "{:.2f}x"),
               ("hits", "hits", "{}"), ("partial_hits", "partial", "{}"), ("misses", "misses", "{}"),
               ("early_dispatched", "early", "{}"), ("alpha", "alpha", "{:.2f}"),
               ("wasted_tool_s", "wasted tool s", "{:.2f}"), ("efficiency", "efficiency", "{:.2f}"),
               ("state_changing_hits", "write hits", "{}"), ("state_changing_saved_s", "write hits saved s", "{:.2f}"))


def document(command: str, params: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable result every command writes with ``--json``."""
    return {"command": command, "version": __version__, "params": dict(params), "results": dict(results)}


def write_json(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write ``doc`` atomically (temporary file, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")
    os.replace(tmp, target)
    return target


def arms_table(title: str, arms: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title=title)
    table.add_column("arm", style="bold")
    for _, header, _ in ARM_COLUMNS:
        table.add_column(header, justify="right")
    for name, values in arms.items():
        table.add_row(name, *[fmt.format(values.get(key, 0)) for key, _, fmt in ARM_COLUMNS])
    return table


def print_arms(console: Console, title: str, arms: Mapping[str, Mapping[str, Any]]) -> None:
    console.print(arms_table(title, arms))


def plot_latency_sweep(path: Path, sweep: Mapping[str, Mapping[str, float]]) -> Path:
    """Time saved (%) by mean tool latency, one line per arm. ``sweep[arm][latency] = time_saved``."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for arm, points in sweep.items():
        xs = sorted(points, key=float)
        ax.plot([float(x) for x in xs], [100 * points[x] for x in xs], marker="o", label=arm)
    ax.set_xlabel("mean tool latency (s, before time scaling)")
    ax.set_ylabel("time saved vs serial (%)")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_outcomes(path: Path, arms: Mapping[str, Mapping[str, Any]]) -> Path:
    """Hits, partial hits, early dispatches and misses per arm (stacked), with wasted tool seconds."""
    names = list(arms)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.0))
    bottom = [0.0] * len(names)
    columns = {"hits": "hits", "partial_hits": "partial hits", "early_dispatched": "early dispatch (miss)",
               "late_misses": "misses, run after the message"}
    for key, label in columns.items():
        if key == "late_misses":  # early-dispatched calls are misses of the store too: count them once
            values = [float(arms[n].get("misses", 0)) - float(arms[n].get("early_dispatched", 0)) for n in names]
        else:
            values = [float(arms[n].get(key, 0)) for n in names]
        left.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.set_title("authoritative calls by outcome")
    left.tick_params(axis="x", rotation=30)
    left.legend(fontsize="small")
    right.bar(names, [float(arms[n].get("wasted_tool_s", 0)) for n in names], color="tab:red")
    right.set_title("wasted tool seconds")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_efficiency(path: Path, arms: Mapping[str, Mapping[str, Any]]) -> Path:
    names = list(arms)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.bar(names, [float(arms[n].get("efficiency", 0)) for n in names], color="tab:green")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("achieved speedup / model bound")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _html_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_html(path: Path, doc: Mapping[str, Any], images: Sequence[Path], notes: Sequence[str] = ()) -> Path:
    """A self-contained report page next to its PNG plots."""
    results = doc["results"]
    arms = results.get("arms", {})
    rows = [[name, *[fmt.format(values.get(key, 0)) for key, _, fmt in ARM_COLUMNS]] for name, values in arms.items()]
    params = [[k, json.dumps(v, default=str)] for k, v in doc["params"].items()]
    verdict = "equivalent to serial" if results.get("equivalent") else "NOT equivalent to serial"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>forethought bench</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}</style></head><body>",
        f"<h1>forethought bench {html.escape(str(doc.get('version')))}</h1>",
        f"<p><b>Verdict:</b> every arm {html.escape(verdict)}.</p>",
        _html_table(rows, ["arm", *[h for _, h, _ in ARM_COLUMNS]]),
        *[f"<p>{html.escape(n)}</p>" for n in notes],
        *[f"<p><img src='{html.escape(img.name)}' alt='{html.escape(img.stem)}'></p>" for img in images],
        "<h2>Parameters</h2>", _html_table(params, ["parameter", "value"]),
        "</body></html>",
    ]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
