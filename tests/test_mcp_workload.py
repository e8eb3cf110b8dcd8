"""The BFCL MCP server's read-only hints are measured, never guessed from names."""

from __future__ import annotations

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make installs it)")

from forethought.bench.workloads.bfcl import load_bfcl
from forethought.bench.workloads.mcp_bfcl import measured_read_only, tool_entries


def test_read_only_means_never_changed_state_in_the_ground_truth() -> None:
    entries = load_bfcl()[::10]
    read_only = measured_read_only(entries)
    called = {call.name for e in entries for calls in e.ground_truth for call in calls}
    assert read_only <= called
    assert {"ls", "cat"} & called <= read_only
    # state changers, including one that only advances a random generator
    assert not read_only & {"cd", "mkdir", "mv", "touch", "get_flight_cost", "book_flight"}
    hinted = {t["name"] for t in tool_entries(entries[0].tools, read_only) if t.get("annotations")}
    assert hinted == {s["function"]["name"] for s in entries[0].tools} & read_only
