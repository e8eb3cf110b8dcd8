"""New value sources of the pattern predictor: whole outputs, walking a list, times and dates, the system
prompt, and calls-only contexts; each learned on constructed sessions and replayed on a new one."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.patterns.derive_lists import MAX_LIST_INDEX
from forethought.predictors.patterns.derive_lookup import MAX_KEYED_BYTES, target_keys
from forethought.predictors.patterns.derive_outputs import first_leaf_by_path, output_index
from forethought.predictors.patterns.derive_time import Reference, reference_now, when_atoms
from forethought.predictors.patterns.derive_values import apply_transform, date_variants, json_variants, value_key
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor, system_text
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train


def _schema(*required: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"} for name in required},
            "required": list(required)}


def _session(sid: str, tools: Mapping[str, Any], *turns: tuple[str, list[tuple[ToolCall, str]]]) -> RecordedSession:
    return RecordedSession(sid, tuple(RecordedTurn(user, tuple(ObservedCall(c, out) for c, out in calls))
                                      for user, calls in turns), tools)


def _predictions_at(predictor: PatternPredictor, session: RecordedSession, position: int,
                    system: str = "") -> tuple[list[Prediction], ToolCall]:
    """Replay ``session`` (with a system message if given) up to call ``position``; predict it."""
    for i, (context, observed, _) in enumerate(contexts(session)):
        if system:
            context = PredictionContext(context.session_id, ({"role": "system", "content": system},
                                                             *context.messages),
                                        context.user_message, context.history, context.tools)
        if i == position:
            return predictor.predict_now(context), observed.call
        predictor.observe(context, observed)
    raise AssertionError("no such position")


# --- whole outputs ----------------------------------------------------------------------------------

_SCALARS = st.one_of(st.text(min_size=1, max_size=12), st.integers(-10**6, 10**6),
                     st.floats(-1e6, 1e6, allow_nan=False), st.booleans(), st.none())
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                        st.dictionaries(st.text(min_size=1, max_size=6), inner,
                                                                        max_size=5)), max_leaves=30)


@settings(max_examples=60, deadline=None)
@given(_JSON)
def test_every_value_a_leaf_gives_is_found_by_its_lookup_keys(document: Any) -> None:
    # The index replaces a scan of every leaf: it may return leaves that give nothing, but it must never
    # miss one that gives the value.
    index = output_index(json.dumps(document))
    for position, (_, leaf) in enumerate(index.leaves):
        if not index.addressable[position]:
            continue
        if isinstance(leaf, list | dict) and len(json.dumps(leaf)) > MAX_KEYED_BYTES // 2:
            continue  # large containers are not filed whole
        for _, variant in json_variants(leaf):
            assert position in index.candidates(target_keys(variant)), (leaf, variant)


def test_deep_and_long_outputs_are_indexed_by_bytes_not_nodes() -> None:
    items = [{"id": f"R-{i:04d}", "name": f"room {i}"} for i in range(2000)]
    output = json.dumps({"meta": {"count": 2000}, "rooms": items, "tail": {"cursor": "NEXT-99"}})
    index = output_index(output)
    assert first_leaf_by_path(output)["tail.cursor"] == "NEXT-99"  # after 2,000 items: the old 300-node cap lost it
    assert first_leaf_by_path(output)["rooms[-1].id"] == "R-1999"
    assert f"rooms[{MAX_LIST_INDEX}].id" not in index.first_by_path  # no rule names deep positions
    assert index.in_lists['"r-1500"'] == ("rooms", 1500, "id")  # but the whole list can be walked


# --- walking a list ---------------------------------------------------------------------------------

WALK_TOOLS = {"list_rooms": _schema(), "inspect": _schema("room_id")}


def _walk_session(n: int) -> RecordedSession:
    rooms = [f"RM-{n}{k}{k}" for k in range(5)]
    listing = json.dumps({"rooms": rooms})
    calls = [(ToolCall("list_rooms", {}), listing)]
    calls += [(ToolCall("inspect", {"room_id": room}), json.dumps({"ok": True})) for room in rooms]
    return _session(f"w{n}", WALK_TOOLS, ("Inspect every room, one by one.", calls))


def test_one_call_per_item_walks_the_list_an_output_gave() -> None:
    predictor = PatternPredictor()
    train(predictor, [_walk_session(n) for n in range(4)])
    test = _walk_session(7)
    for position in (2, 3, 4, 5):  # the calls after the first inspect
        predictions, truth = _predictions_at(predictor.copy(), test, position)
        assert predictions[0].call == truth, position
        assert predictions[0].executable


# --- times and dates --------------------------------------------------------------------------------

def test_clock_times_weekdays_and_relative_dates_resolve_against_today() -> None:
    today = dt.date(2026, 3, 2)  # a Monday
    found = {a.text: a.date for a in when_atoms(
        "From November 5th to 10th at 9 AM, then tomorrow at 14:30, and Friday, and in 3 days",
        Reference(today, today))}
    assert found["November 5th"] == dt.date(2026, 11, 5)
    assert found["10th"] == dt.date(2026, 11, 10)
    assert found["9 AM"] == dt.time(9, 0)
    assert found["10th at 9 AM"] == dt.datetime(2026, 11, 10, 9, 0)
    assert found["tomorrow at 14:30"] == dt.datetime(2026, 3, 3, 14, 30)
    assert found["Friday"] == dt.date(2026, 3, 6)
    assert found["in 3 days"] == dt.date(2026, 3, 5)


def test_a_past_year_less_date_rolls_over_only_against_a_real_today() -> None:
    assert when_atoms("on March 1", Reference(dt.date(2026, 3, 2), dt.date(2026, 3, 2)))[0].date == dt.date(2027, 3, 1)
    assert when_atoms("on March 1", Reference(None, dt.date(2026, 3, 2)))[0].date == dt.date(2026, 3, 1)
    assert not [a for a in when_atoms("tomorrow", Reference(None, dt.date(2026, 3, 2)))]  # no today: unresolved


def test_the_reference_comes_from_the_system_text_then_metadata_then_user_text() -> None:
    assert reference_now("Today is 2025-07-04.", {}, ["flying on 2030-01-01"], ()).today == dt.date(2025, 7, 4)
    assert reference_now("", {"now": "2025-07-04T10:00"}, [], ()).today == dt.date(2025, 7, 4)
    from_user = reference_now("", {}, ["flying on 2030-01-01"], ())
    assert from_user.today is None and from_user.year_of == dt.date(2030, 1, 1)


@settings(max_examples=60, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2100, 1, 1)))
def test_every_spelling_of_a_date_or_time_replays_by_name(moment: dt.datetime) -> None:
    for value in (moment.replace(microsecond=0), moment.date(), moment.time().replace(microsecond=0)):
        for name, spelled in date_variants(value):
            assert apply_transform(name, "", value) == spelled
    assert apply_transform("date:%H:%M", "", moment.date()) is None  # a plain date has no time


TIME_TOOLS = {"book_table": {"type": "object", "required": ["day", "time"],
                             "properties": {"day": {"type": "string"}, "time": {"type": "string"}}}}


def _table(n: int, day: str, words: str) -> RecordedSession:
    clock = f"{7 + n % 4}"
    call = ToolCall("book_table", {"day": day, "time": f"{int(clock) + 12:02d}:00"})
    return _session(f"t{n}", TIME_TOOLS, (f"Book a table {words} at {clock} pm please.", [(call, "booked")]))


def test_relative_days_and_12_hour_times_become_the_spelling_each_parameter_wants() -> None:
    system = "You are a booking assistant. Today is 2026-03-02."
    predictor = PatternPredictor()
    for n, words in enumerate(["tomorrow", "tomorrow", "tomorrow"]):
        for context, observed, _ in contexts(_table(n, "2026-03-03", words)):
            context = PredictionContext(context.session_id, ({"role": "system", "content": system},
                                                             *context.messages), context.user_message,
                                        context.history, context.tools)
            predictor.observe(context, observed)
    predictions, truth = _predictions_at(predictor, _table(5, "2026-03-03", "tomorrow"), 0, system)
    assert predictions[0].call == truth == ToolCall("book_table", {"day": "2026-03-03", "time": "20:00"})


# --- the system prompt ------------------------------------------------------------------------------

PROFILE_TOOLS = {"lookup_account": _schema("username")}


def test_a_value_stated_only_in_the_system_prompt_is_derived() -> None:
    predictor = PatternPredictor()
    for n, name in enumerate(["ada_l", "alan_t", "grace_h"]):
        session = _session(f"p{n}", PROFILE_TOOLS, ("Show my account.", [
            (ToolCall("lookup_account", {"username": name}), "{}")]))
        for context, observed, _ in contexts(session):
            context = PredictionContext(context.session_id, ({"role": "system", "content": f"User: '{name}'."},
                                                             *context.messages), context.user_message,
                                        context.history, context.tools)
            predictor.observe(context, observed)
    test = _session("p9", PROFILE_TOOLS, ("Show my account.", [(ToolCall("lookup_account", {"username": "edsger_d"}),
                                                                "{}")]))
    predictions, truth = _predictions_at(predictor, test, 0, "User: 'edsger_d'.")
    assert predictions[0].call == truth and predictions[0].executable
    assert system_text([{"role": "developer", "content": [{"type": "text", "text": "A"}]},
                        {"role": "user", "content": "B"}, {"role": "system", "content": "C"}]) == "A\nC"


# --- determinism --------------------------------------------------------------------------------------

_DETERMINISM = """
import json
from forethought.bench.predict_cost import generate_sessions
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import contexts, train
sessions = generate_sessions(6, output_kb=4)
predictor = PatternPredictor()
train(predictor, sessions[:4])
out = []
for session in sessions[4:]:
    for context, observed, _ in contexts(session):
        predictions = predictor.predict_now(context)
        out.append([[p.call.name, dict(p.call.arguments), round(p.confidence, 12)] for p in predictions])
        predictor.observe(context, observed)
print(json.dumps(out, sort_keys=True))
"""


def test_predictions_are_the_same_whatever_the_hash_seed() -> None:
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        runs.append(subprocess.run([sys.executable, "-c", _DETERMINISM], env=env, capture_output=True, text=True,
                                   check=True, timeout=120).stdout)
    assert runs[0] == runs[1] and json.loads(runs[0])


def test_value_keys_used_by_the_index_match_the_schema_aware_keys() -> None:
    assert target_keys("Los Angeles") == target_keys("los_angeles")[:1] + target_keys("Los Angeles")[1:]
    assert value_key(1.0) == value_key(1)


def test_an_untrained_predictor_copes_with_an_empty_context() -> None:
    context = PredictionContext("s", [], "", (), {"x": _schema("a")})
    assert all(not p.executable for p in PatternPredictor(config=PatternConfig(top_k=2)).predict_now(context))


def test_a_message_value_used_for_another_parameter_this_turn_is_marked() -> None:
    from forethought.predictors.patterns.derive_rules import Sources

    login = ObservedCall(ToolCall("login", {"username": "mthompson"}), "ok")
    earlier = ObservedCall(ToolCall("note", {"title": "Old"}), "ok")
    sources = Sources("log in as 'mthompson' and file 'Urgent'", (earlier, login), turn_start=1)
    assert sources.used_elsewhere("MThompson", "title")  # case aside, the same value
    assert not sources.used_elsewhere("mthompson", "username")  # the same parameter may repeat it
    assert not sources.used_elsewhere("Old", "body")  # used, but in an earlier turn
    assert not sources.used_elsewhere(["mthompson"], "title")


# --- calls only ---------------------------------------------------------------------------------------

STATE_TOOLS = {"check": _schema(), "set_mode": _schema("mode")}


def _state_session(n: int, state: str) -> RecordedSession:
    mode = "warm" if state == "frozen" else "cold"
    return _session(f"c{n}", STATE_TOOLS, ("", [(ToolCall("check", {}), json.dumps({"status": state})),
                                                (ToolCall("set_mode", {"mode": mode}), "done")]))


def test_without_user_text_the_latest_output_words_cue_remembered_values() -> None:
    # Both values follow the same call: only the words of its output tell them apart.
    predictor = PatternPredictor()
    train(predictor, [_state_session(n, "frozen" if n % 2 else "melted") for n in range(12)])
    for state, mode in (("frozen", "warm"), ("melted", "cold")):
        predictions, truth = _predictions_at(predictor.copy(), _state_session(99, state), 1)
        assert truth == ToolCall("set_mode", {"mode": mode}) and predictions[0].call == truth
