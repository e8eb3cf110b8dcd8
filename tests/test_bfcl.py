"""The BFCL workload: entries, parsing, schemas, splits, trajectories, live sessions and fingerprints."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from forethought import Effect, Runtime, ToolCall
from forethought.bench.workloads.bfcl import (
    DOMAINS,
    build_session,
    fingerprint_value,
    function_docs,
    load_bfcl,
    parse_call,
    render_bfcl_output,
    split_interleaved,
    state_fingerprint,
    to_trajectory,
)
from forethought.bench.workloads.latency import LatencyModel
from forethought.errors import WorkloadError
from forethought.sandbox.objects import ObjectState

ENTRIES = load_bfcl()
BY_ID = {e.id: e for e in ENTRIES}


def test_counts_match_the_published_dataset() -> None:
    assert len(ENTRIES) == 200
    assert sum(len(e.turns) for e in ENTRIES) == 734
    assert sum(len(e.calls) for e in ENTRIES) == 1142
    assert len(function_docs()) == 128
    assert len({c.name for e in ENTRIES for c in e.calls}) == 81
    assert [e.index for e in ENTRIES] == list(range(200))


def test_domains_follow_blocks_of_fifty() -> None:
    assert Counter(e.domain for e in ENTRIES) == {d: 50 for d in DOMAINS}
    assert BY_ID["multi_turn_base_0"].domain == "file_system"
    assert BY_ID["multi_turn_base_199"].domain == "travel"
    assert all("VehicleControlAPI" in e.involved_classes for e in ENTRIES if e.domain == "vehicle")


def test_positional_arguments_are_named_from_the_signature() -> None:
    entry = BY_ID["multi_turn_base_0"]
    assert entry.ground_truth[2] == (ToolCall("sort", {"file_name": "final_report.pdf"}),)
    assert all(not c.positional for e in ENTRIES for c in e.calls)
    owners = {"message_login": "MessageAPI"}
    assert parse_call("message_login('USR001')", owners) == ToolCall("message_login", {"user_id": "USR001"})


@pytest.mark.parametrize("text", ["os.system('x')", "f(x=open('y'))", "f(*a)", "f(**k)", "f(", "x + 1",
                                  "f(a=1, a=2)"])
def test_call_strings_are_parsed_never_evaluated(text: str) -> None:
    with pytest.raises(WorkloadError):
        parse_call(text, {"f": "GorillaFileSystem"})


def test_tool_schemas_are_openai_json_schema() -> None:
    types: Counter[str] = Counter()

    def walk(schema: object) -> None:
        if isinstance(schema, dict):
            if "type" in schema:
                for t in schema["type"] if isinstance(schema["type"], list) else [schema["type"]]:
                    types[t] += 1
            for value in schema.values():
                walk(value)

    for entry in ENTRIES:
        for tool in entry.tools:
            assert tool["type"] == "function"
            assert tool["function"]["parameters"]["type"] == "object"
            walk(tool["function"]["parameters"])
    assert set(types) <= {"object", "number", "integer", "string", "array", "boolean"}
    assert types["number"] > 0
    echo = dict(function_docs()["echo"][1]["function"]["parameters"]["properties"]["file_name"])
    assert "default" not in echo  # BFCL's doc default 'None' (a string) disagrees with the method's None


def test_offered_tools_are_the_involved_classes_minus_excluded() -> None:
    entry = BY_ID["multi_turn_base_0"]
    assert entry.excluded_function == ("cp",)
    names = set(entry.tool_names)
    assert "cp" not in names and "mv" in names and "post_tweet" in names
    assert "get_stock_info" not in names
    for e in ENTRIES:
        assert {c.name for c in e.calls} <= set(e.tool_names)


def test_every_ground_truth_call_keys_under_its_schema() -> None:
    for entry in ENTRIES:
        tools = {t.name: t for t in build_session(entry).tools}
        for call in entry.calls:
            tools[call.name].key(call)


def test_interleaved_split_never_by_halves() -> None:
    for fold in (0, 1):
        train, test = split_interleaved(ENTRIES, fold)
        assert len(train) == len(test) == 100
        assert not {e.id for e in train} & {e.id for e in test}
        assert Counter(e.domain for e in test) == {d: 25 for d in DOMAINS}
    assert split_interleaved(ENTRIES, 0)[1] == split_interleaved(ENTRIES, 1)[0]
    with pytest.raises(ValueError):
        split_interleaved(ENTRIES, 2)


def test_trajectory_groupings() -> None:
    entry = BY_ID["multi_turn_base_0"]
    step = to_trajectory(entry, "step")
    turn = to_trajectory(entry, "turn")
    assert step.calls == turn.calls == entry.calls
    assert [len(t.steps) for t in step.turns] == [len(g) for g in entry.ground_truth]
    assert [len(t.steps) for t in turn.turns] == [1 if g else 0 for g in entry.ground_truth]
    assert step.turns[0].user == entry.turns[0] and step.domain == "file_system"
    assert step.tools == entry.tools


def test_sessions_get_fresh_isolated_backends() -> None:
    entry = BY_ID["multi_turn_base_0"]
    first, second = build_session(entry), build_session(entry)
    assert state_fingerprint(first.state) == state_fingerprint(second.state)
    tools = {t.name: t for t in first.tools}
    assert all(t.effect is Effect.ISOLATED_WRITE and isinstance(t.state, ObjectState) and not t.threaded
               for t in first.tools)
    mkdir = tools["mkdir"]
    assert mkdir.state is not None
    mkdir.fn(mkdir.state.live, dir_name="new_dir")
    assert state_fingerprint(first.state) != state_fingerprint(second.state)
    assert state_fingerprint(build_session(entry).state) == state_fingerprint(second.state)


async def test_session_runs_ground_truth_through_the_runtime() -> None:
    entry = BY_ID["multi_turn_base_0"]
    tools, state = build_session(entry)
    runtime = Runtime()
    session = runtime.session(tools=tools)
    outputs = [await session.execute(call) for call in entry.ground_truth[0]]
    assert render_bfcl_output(outputs[1]) == "None"  # mkdir, as BFCL's executor renders it
    assert outputs[0] == {"current_working_directory": "document"}
    assert "temp" in state_fingerprint(state)
    await session.close()
    runtime.close()


def test_fingerprint_is_canonical_and_cycle_safe() -> None:
    class Node:
        def __init__(self) -> None:
            self.parent: Node | None = None
            self.children: dict[str, Node] = {}

    root, child = Node(), Node()
    child.parent = root
    root.children["c"] = child
    assert fingerprint_value(root) == fingerprint_value(root)
    other = Node()
    other.children["c"] = Node()
    assert fingerprint_value(root) != fingerprint_value(other)
    assert fingerprint_value({"b": 1, "a": 2.0}) == fingerprint_value({"a": 2.0, "b": 1})
    assert fingerprint_value({"a": 1}) != fingerprint_value({"a": 1.0})


def test_fingerprint_covers_hidden_random_state() -> None:
    entry = next(e for e in ENTRIES if "TravelAPI" in e.involved_classes)
    state = build_session(entry).state
    before = state_fingerprint(state)
    state.instance("TravelAPI")._random.random()
    assert state_fingerprint(state) != before


def test_render_bfcl_output() -> None:
    assert render_bfcl_output("x") == "x"
    assert render_bfcl_output({"a": 1}) == json.dumps({"a": 1})
    assert render_bfcl_output(None) == "None"
    assert render_bfcl_output([1]) == "[1]"


async def test_latency_sleeps_before_touching_state() -> None:
    entry = BY_ID["multi_turn_base_0"]
    tools, state = build_session(entry, LatencyModel(mean_s=0.05, jitter=0.0))
    cd = next(t for t in tools if t.name == "cd")
    assert cd.state is not None
    before = state_fingerprint(state)
    task = asyncio.ensure_future(cd.fn(cd.state.live, folder="document"))
    await asyncio.sleep(0.01)
    assert state_fingerprint(state) == before and not task.done()
    assert await task == {"current_working_directory": "document"}
    assert state_fingerprint(state) != before
