"""``forethought model`` as a function: its JSON document, its figures, and the heatmap grids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forethought.bench.perfmodel import ModelCommandParams, engine_times, run_model_command, speedup
from forethought.bench.perfmodel.heatmaps import engine_grid, plot_speedup_heatmaps, speedup_grid

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ModelCommandParams(agents=(1, 4), turns=3, tasks_per_agent=1, alphas=(0.5, 1.0))


def test_document_shape_and_files(tmp_path: Path) -> None:
    json_path = tmp_path / "out" / "model.json"
    doc = run_model_command(SMALL, json_path=json_path, out_dir=tmp_path / "figs")
    assert set(doc) == {"command", "version", "params", "results"}
    assert doc["command"] == "model"
    assert json.loads(json_path.read_text(encoding="utf-8")) == doc
    assert doc["params"]["agents"] == [1, 4]
    results = doc["results"]
    for key in ("speedup_heatmaps", "engine_heatmaps"):
        assert Path(results["figures"][key]).read_bytes()[:8] == PNG_MAGIC
    for m in ("1", "4"):
        assert set(results["agents"][m]) == {"serial", "client-side", "engine-side"}
        for arm in results["agents"][m].values():
            assert set(arm) == {"tokens_per_s", "time_saved"}
            assert arm["tokens_per_s"] > 0
        assert results["simulation"][m]["serial"]["time_saved"] == 0.0
    assert list(tmp_path.joinpath("out").iterdir()) == [json_path]  # no temporary file left behind


def test_closed_form_and_engine_sections_use_the_models() -> None:
    doc = run_model_command(ModelCommandParams(simulate=False, generation_s=2.0, tool_s=2.0, alpha=0.5))
    closed = doc["results"]["closed_form"]
    assert closed["speedup"] == pytest.approx(speedup(0.5, 2.0, 0.3, 2.0))
    assert closed["lemma1_bound"] < closed["supremum"] == 2.0
    engine = doc["results"]["engine"]
    expected = engine_times(ModelCommandParams(alpha=0.5, tool_s=2.0).engine_params())
    assert engine["speedup_engine"] == pytest.approx(expected.speedup_engine)
    assert "simulation" not in doc["results"]
    assert doc["results"]["figures"] == {}


def test_generation_time_defaults_to_the_token_model() -> None:
    p = ModelCommandParams(simulate=False)
    doc = run_model_command(p)
    assert doc["results"]["closed_form"]["G"] == pytest.approx(p.engine_params().generation_s)


@pytest.mark.parametrize(
    "overrides",
    [{"agents": ()}, {"agents": (0,)}, {"alpha": -0.5}, {"generation_s": -1.0}, {"cache_tokens": 10}],
)
def test_bad_parameters_raise(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ModelCommandParams(**overrides)  # type: ignore[arg-type]


def test_grids() -> None:
    grid = speedup_grid(1.0, [0.0, 0.5], [0.5, 1.0, 2.0])
    assert grid == [
        [pytest.approx(1.5), pytest.approx(2.0), pytest.approx(1.5)],
        [pytest.approx(1.5 / 1.0), pytest.approx(2.0 / 1.5), pytest.approx(3.0 / 2.5)],
    ]
    engine = engine_grid(1.0, 0.1, [0.0, 0.5], [0.5, 1.0], 0.05)
    assert len(engine) == 2 and len(engine[0]) == 2
    assert engine[1][0] > engine[0][0]  # a costlier round trip makes the engine-side arm gain more


def test_plot_rejects_empty_axes(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_speedup_heatmaps(tmp_path / "x.png", alphas=())
    with pytest.raises(ValueError):
        plot_speedup_heatmaps(tmp_path / "x.png", t_ratios=(1.0,))
