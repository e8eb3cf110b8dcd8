"""The proxy's stats store: a session start reads one tool set's totals, the same as the whole table gives for it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought.mcp.stats import ProxyStats, StatsStore, ToolStats

_sessions = st.lists(st.tuples(st.sampled_from(["fp1", "fp2", "fp3"]), st.integers(0, 50), st.integers(0, 50),
                               st.dictionaries(st.sampled_from(["ls", "cat", "grep"]),
                                               st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=3)),
                     max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=_sessions)
def test_one_tool_set_s_totals_equal_the_whole_table_s(tmp_path_factory: pytest.TempPathFactory, sessions: list[
        tuple[str, int, int, dict[str, tuple[int, int]]]]) -> None:
    path = tmp_path_factory.mktemp("stats") / "s.sqlite"
    store = StatsStore(path)
    try:
        for fingerprint, calls, hits, tools in sessions:
            store.add(fingerprint, ProxyStats(sessions=1, calls=calls, hits=hits, tools={
                tool: ToolStats(calls=c, hits=h) for tool, (c, h) in tools.items()}))
        whole = store.by_fingerprint()
        for fingerprint in ("fp1", "fp2", "fp3", "never"):
            assert store.of(fingerprint) == whole.get(fingerprint, ProxyStats())
    finally:
        store.close()
