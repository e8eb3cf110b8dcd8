"""Benchmark reports: a rich table on the terminal, the JSON document, and an HTML page with PNG plots.

The JSON document has the shape docs/design.md ("Public surface") promises: ``{"command", "version",
"params", "results"}`` with ``results.arms[ARM]`` and ``results.equivalent``. Plots are drawn with
matplotlib's Agg backend (no screen needed; matplotlib is imported when the first plot is drawn); each has
a title, horizontal bars named by arm, and its legend outside the bars. The HTML page opens with the
verdict's headline (did speculation pay, by how much, how busy the machine was), embeds the plots by
relative path and shows every parameter used. Every file is written whole (a temporary file, then a
rename) with the mode the umask gives any new file (0644 under the usual 022).
"""

from __future__ import annotations

import html
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from forethought._version import __version__

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ARM_COLUMNS = (("wall_s", "wall s", "{:.2f}"), ("time_saved", "saved", "{:.1%}"), ("speedup", "speedup", "{:.2f}x"),
               ("hits", "hits", "{}"), ("partial_hits", "partial", "{}"), ("misses", "misses", "{}"),
               ("early_dispatched", "early", "{}"), ("alpha", "alpha", "{:.2f}"),
               ("wasted_tool_s", "wasted tool s", "{:.2f}"), ("efficiency", "efficiency", "{:.2f}"),
               ("state_changing_hits", "write hits", "{}"), ("state_changing_saved_s", "write hits saved s", "{:.2f}"))


def document(command: str, params: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable result every command writes with ``--json``."""
    return {"command": command, "version": __version__, "params": dict(params), "results": dict(results)}


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` whole or not at all: a temporary file beside ``path`` (created like any new file, so
    with the umask's mode), then renamed over it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def write_json(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write ``doc`` as indented JSON, atomically (:func:`write_text`)."""
    return write_text(path, json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


def arms_table(title: str, arms: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title=title)
    table.add_column("arm", style="bold", no_wrap=True, min_width=max([3, *(len(name) for name in arms)]))
    for _, header, _ in ARM_COLUMNS:
        table.add_column(header, justify="right")
    for name, values in arms.items():
        table.add_row(name, *[fmt.format(values.get(key, 0)) for key, _, fmt in ARM_COLUMNS])
    return table


def print_arms(console: Console, title: str, arms: Mapping[str, Mapping[str, Any]]) -> None:
    console.print(arms_table(title, arms))


PLOT_DPI = 110
GAIN, MIXED, LOSS, LIMIT = "tab:green", "tab:orange", "tab:red", "tab:gray"
"""Bar colours: faster than serial in every repeat, on the median only, not faster; the oracle (a limit)."""
WASTE = "tab:purple"


def _figure(width: float, height: float, columns: int = 1) -> tuple[Figure, list[Axes]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=(width, height), layout="constrained", squeeze=False)
    return fig, list(axes[0])


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
    return path


def _arm_height(count: int) -> float:
    return 1.6 + 0.42 * max(1, count)


def plot_latency_sweep(path: Path, sweep: Mapping[str, Mapping[str, float]]) -> Path:
    """Time saved (%) by mean tool latency, one line per arm. ``sweep[arm][latency] = time_saved``."""
    fig, (ax,) = _figure(7.6, 4.2)
    for arm, points in sweep.items():
        xs = sorted(points, key=float)
        ax.plot([float(x) for x in xs], [100 * points[x] for x in xs], marker="o", label=arm)
    ax.set_title("Wall time saved against serial, by mean tool latency")
    ax.set_xlabel("mean tool latency (s, before time scaling)")
    ax.set_ylabel("time saved vs serial (%)")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize="small", frameon=False)
    return _save(fig, path)


def plot_time_saved(path: Path, arms: Mapping[str, Mapping[str, Any]]) -> Path:
    """Median wall time saved against serial per arm, whiskers from the lowest to the highest repeat."""
    names = [n for n in arms if n != "serial"][::-1]  # the first arm on top
    fig, (ax,) = _figure(8.0, _arm_height(len(names)))
    medians, lows, highs, colours = [], [], [], []
    for name in names:
        arm = arms[name]
        saved = 100.0 * float(arm.get("time_saved", 0.0))
        low, high = (100.0 * float(v) for v in (arm.get("time_saved_spread") or [saved / 100, saved / 100]))
        medians.append(saved)
        lows.append(saved - low)
        highs.append(high - saved)
        colours.append(LIMIT if name == "oracle" else GAIN if low > 0 else MIXED if saved > 0 else LOSS)
    ax.barh(names, medians, xerr=[lows, highs], color=colours, capsize=3, error_kw={"elinewidth": 1})
    for y, value in enumerate(medians):  # beyond the whisker, so the figure never sits on a line
        end = value + highs[y] if value >= 0 else value - lows[y]
        ax.annotate(f"{value:+.1f}%", (end, y), xytext=(5 if value >= 0 else -5, 0), textcoords="offset points",
                    ha="left" if value >= 0 else "right", va="center", fontsize="small")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.margins(x=0.2)
    ax.set_xlabel("wall time saved against serial (%; median, whiskers: range over repeats)")
    ax.set_title("Did speculation pay? Time saved per arm (green: every repeat faster; orange: the median "
                 "only;\nred: not faster; grey: the oracle, a limit)", fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_outcomes(path: Path, arms: Mapping[str, Mapping[str, Any]]) -> Path:
    """Hits, partial hits, early dispatches and misses per arm (stacked), with wasted tool seconds."""
    names = list(arms)[::-1]
    fig, (left, right) = _figure(10.0, _arm_height(len(names)) + 0.6, columns=2)
    start = [0.0] * len(names)
    columns = {"hits": "hits", "partial_hits": "partial hits", "early_dispatched": "early dispatch (miss)",
               "late_misses": "misses, run after the message"}
    for key, label in columns.items():
        if key == "late_misses":  # early-dispatched calls are misses of the store too: count them once
            values = [float(arms[n].get("misses", 0)) - float(arms[n].get("early_dispatched", 0)) for n in names]
        else:
            values = [float(arms[n].get(key, 0)) for n in names]
        left.barh(names, values, left=start, label=label)
        start = [b + v for b, v in zip(start, values, strict=True)]
    left.set_title("Authoritative calls by outcome")
    left.set_xlabel("calls (median over repeats)")
    right.barh(names, [float(arms[n].get("wasted_tool_s", 0)) for n in names], color=WASTE)
    right.set_title("Wasted tool seconds (guesses never claimed)")
    right.set_xlabel("tool seconds")
    right.tick_params(axis="y", labelleft=False)
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize="small",
               frameon=False)
    return _save(fig, path)


def plot_efficiency(path: Path, arms: Mapping[str, Mapping[str, Any]]) -> Path:
    """Achieved speedup over the performance model's bound per arm (1.0: the runtime costs nothing)."""
    names = list(arms)[::-1]
    values = [float(arms[n].get("efficiency", 0)) for n in names]
    fig, (ax,) = _figure(8.0, _arm_height(len(names)))
    ax.barh(names, values, color="tab:blue")
    for y, value in enumerate(values):
        ax.annotate(f"{value:.2f}", (value, y), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize="small")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, max([1.0, *values]) * 1.15)
    ax.set_xlabel("achieved speedup / the model's bound for the measured alpha, g, G, T")
    ax.set_title("Efficiency: how close each arm came to the performance model's bound (1.0 = the bound)",
                 fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def _html_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_html(path: Path, doc: Mapping[str, Any], images: Sequence[Path], notes: Sequence[str] = ()) -> Path:
    """A self-contained report page next to its PNG plots; its first line is the verdict's headline."""
    results = doc["results"]
    arms = results.get("arms", {})
    rows = [[name, *[fmt.format(values.get(key, 0)) for key, _, fmt in ARM_COLUMNS]] for name, values in arms.items()]
    params = [[k, json.dumps(v, default=str)] for k, v in doc["params"].items()]
    words = list(results.get("verdict") or [])
    if not words:
        words = ["every arm equivalent to serial" if results.get("equivalent") else "NOT equivalent to serial"]
    head, rest = words[0], words[1:]
    warn = "color:#b00020" if head.startswith(("Speculation did not", "NOT")) else ""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>forethought bench</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}"
        ".headline{font-size:1.15em;font-weight:bold}.warn{color:#b00020}</style></head><body>",
        f"<p class='headline' style='{warn}'>{html.escape(head)}</p>",
        f"<h1>forethought bench {html.escape(str(doc.get('version')))}</h1>",
        "<ul>" + "".join(f"<li{' class=warn' if w.startswith(('WARNING', 'NOT')) else ''}>{html.escape(w)}</li>"
                         for w in rest) + "</ul>",
        _html_table(rows, ["arm", *[h for _, h, _ in ARM_COLUMNS]]),
        *[f"<p>{html.escape(n)}</p>" for n in notes],
        *[f"<p><img src='{html.escape(img.name)}' alt='{html.escape(img.stem)}'></p>" for img in images],
        "<h2>Parameters</h2>", _html_table(params, ["parameter", "value"]),
        "</body></html>",
    ]
    return write_text(path, "\n".join(parts) + "\n")
