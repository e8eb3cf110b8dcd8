"""Properties of the gateway's all-or-nothing matching (:func:`forethought.gateway.cache.match`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.gateway.cache import CachedEntry, ResponseScope, match

TOOLS = [{"type": "function", "name": name, "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}} for name in ("f", "g")]
NOW = 100.0

calls_st = st.lists(st.builds(lambda n, x: ToolCall(n, {"x": x}), st.sampled_from("fg"), st.integers(0, 3)),
                    min_size=1, max_size=4)


def _scope(segment: int = 0) -> ResponseScope:
    return ResponseScope("ftg-test", "token", TOOLS, 0.0, segment=segment)


@st.composite
def entries_st(draw: st.DrawFn) -> list[CachedEntry]:
    scope = _scope()
    out = []
    for _ in range(draw(st.integers(0, 6))):
        call = ToolCall(draw(st.sampled_from("fg")), {"x": draw(st.integers(0, 3))})
        out.append(CachedEntry(call.name, draw(st.sampled_from([scope.key(call), None])),
                               f"out-{len(out)}", draw(st.sampled_from([NOW - 1, NOW, NOW + 5])),
                               draw(st.booleans()), draw(st.sampled_from([0, 0, 1]))))
    return out


@given(calls_st, entries_st())
def test_a_match_serves_every_call_from_a_distinct_live_entry_of_its_name(calls: list[ToolCall],
                                                                          entries: list[CachedEntry]) -> None:
    scope = _scope()
    outputs = match(scope, entries, calls, NOW)
    if outputs is None:
        return
    assert len(outputs) == len(calls)
    used = [next(e for e in entries if e.output == out) for out in outputs]
    assert len({e.output for e in used}) == len(used)
    for call, entry in zip(calls, used, strict=True):
        assert entry.name == call.name and entry.expires > NOW and entry.segment == scope.segment
        assert entry.key in (scope.key(call), None)
        assert not entry.exclusive or len(calls) == 1
        if entry.key is None:
            assert sum(c.name == call.name for c in calls) == 1  # by name only when the name is unique


@given(calls_st, st.booleans())
def test_one_live_keyed_entry_per_call_always_matches_in_order(calls: list[ToolCall], reverse: bool) -> None:
    scope = _scope()
    entries = [CachedEntry(c.name, scope.key(c), f"out-{i}", NOW + 1, False, 0) for i, c in enumerate(calls)]
    outputs = match(scope, entries[::-1] if reverse else entries, calls, NOW)
    assert outputs is not None
    assert [entries[[e.output for e in entries].index(o)].key for o in outputs] == [scope.key(c) for c in calls]


@given(calls_st)
def test_entries_of_another_segment_or_expired_never_match(calls: list[ToolCall]) -> None:
    scope = _scope(segment=1)
    stale = [CachedEntry(c.name, scope.key(c), "old", NOW + 1, False, 0) for c in calls]
    expired = [CachedEntry(c.name, scope.key(c), "gone", NOW, False, 1) for c in calls]
    assert match(scope, stale + expired, calls, NOW) is None
    assert match(scope, [], calls, NOW) is None
    assert match(scope, stale, [*calls, None], NOW) is None
