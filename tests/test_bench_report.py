"""The bench's report files: modes like any other file, the headline first, plots that can be read."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from forethought.bench import report
from forethought.bench.verdict import verdict

ARMS: dict[str, dict[str, Any]] = {
    "serial": {"time_saved": 0.0, "time_saved_spread": [0.0, 0.0], "hits": 0, "misses": 40, "efficiency": 1.0},
    "spec-model": {"time_saved": -0.076, "time_saved_spread": [-0.31, 0.01], "hits": 36, "misses": 8,
                   "wasted_tool_s": 3.5, "efficiency": 0.75, "speedup": 0.93},
    "pattern+stream": {"time_saved": 0.12, "time_saved_spread": [0.05, 0.2], "hits": 44, "misses": 0,
                       "early_dispatched": 3, "wasted_tool_s": 1.4, "efficiency": 0.84, "speedup": 1.14},
    "oracle": {"time_saved": 0.33, "time_saved_spread": [0.3, 0.4], "hits": 44, "misses": 0, "efficiency": 0.97,
               "speedup": 1.49},
}
IDLE = {"cores": 2, "load_1m_start": 0.3, "load_1m_end": 0.4, "lag_p99_ms": 3.0}


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_report_file_gets_the_mode_of_any_new_file(tmp_path: Path, umask_022: None) -> None:
    """bench.json used to be 0600 (a private temporary file renamed) while the rest were 0644."""
    doc = report.document("bench", {"seed": 0}, {"arms": ARMS, "equivalent": True,
                                                 "verdict": verdict(ARMS, True, IDLE, 3)})
    files = [report.write_json(tmp_path / "bench.json", doc),
             report.plot_time_saved(tmp_path / "time_saved.png", ARMS),
             report.plot_outcomes(tmp_path / "outcomes.png", ARMS),
             report.plot_efficiency(tmp_path / "efficiency.png", ARMS),
             report.plot_latency_sweep(tmp_path / "sweep.png", {"all": {"0.5": 0.1, "1.0": 0.2}})]
    files.append(report.write_html(tmp_path / "report.html", doc, files[1:]))
    assert {f.name: oct(_mode(f)) for f in files} == {f.name: oct(0o644) for f in files}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in files)  # no temporary left
    assert json.loads((tmp_path / "bench.json").read_text()) == json.loads(json.dumps(doc))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    target = report.write_json(tmp_path / "bench.json", {"old": True})

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        report.write_json(target, {"new": True})
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]


def test_the_page_opens_with_the_headline(tmp_path: Path) -> None:
    words = verdict(ARMS, True, IDLE, 3)
    doc = report.document("bench", {}, {"arms": ARMS, "equivalent": True, "verdict": words})
    page = report.write_html(tmp_path / "report.html", doc, []).read_text()
    body = page.split("<body>", 1)[1]
    first = re.sub(r"<[^>]+>", "", body.strip().splitlines()[0])
    assert first == words[0] and first.startswith("Speculation paid on this run: pattern+stream")


def _figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    saved: list[Figure] = []
    monkeypatch.setattr(report, "_save", lambda fig, path: saved.append(fig) or path)
    return saved


def test_every_plot_has_a_title_and_no_legend_over_its_bars(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """A legend used to cover the outcome bars and the efficiency plot had no title."""
    figures = _figures(monkeypatch)
    report.plot_time_saved(tmp_path / "a.png", ARMS)
    report.plot_outcomes(tmp_path / "b.png", ARMS)
    report.plot_efficiency(tmp_path / "c.png", ARMS)
    report.plot_latency_sweep(tmp_path / "d.png", {"all": {"0.5": 0.1, "1.0": 0.2}, "x": {"0.5": -0.1}})
    assert len(figures) == 4
    for fig in figures:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        axes = fig.get_axes()
        assert all(ax.get_title() for ax in axes), [ax.get_title() for ax in axes]
        legends = [*fig.legends, *[ax.get_legend() for ax in axes if ax.get_legend() is not None]]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes), "a legend over the plot"
        for ax in axes:  # the arms are named on the bars' axis, every one readable (no overlapping names)
            labels = [t for t in ax.get_yticklabels() if t.get_text()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
