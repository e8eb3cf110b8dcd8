"""The micro benchmark runs end to end and writes the documented JSON (figures are not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from forethought.bench import micro

FIELDS = {"key_us", "hit_claim_us", "miss_claim_us", "speculate_us", "claim_us", "miss_execute_us",
          "tool_direct_us", "hit_claim_cold_us", "hit_claim_dict_us"}


async def test_run_micro_measures_every_field() -> None:
    results = await micro.run_micro(rounds=5, batch=4)
    assert set(results) == FIELDS
    assert all(value >= 0 for value in results.values())
    assert results["hit_claim_us"] > 0 and results["key_us"] > 0


def test_the_command_writes_json_and_prints_a_table(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "micro.json"
    result = CliRunner().invoke(micro.app, ["--json", str(out), "--rounds", "5", "--batch", "4"])
    assert result.exit_code == 0, result.output
    assert "hit_claim_us" in result.output and "target" in result.output
    doc = json.loads(out.read_text())
    assert doc["command"] == "micro" and doc["version"]
    assert doc["params"]["rounds"] == 5 and doc["params"]["batch"] == 4 and doc["params"]["cpus"] >= 1
    assert set(doc["results"]) == FIELDS
