"""Derivation rules on constructed sessions: where each argument comes from, learned and replayed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall, Prediction
from forethought.predictors.patterns.derive_rules import Sources
from forethought.predictors.patterns.derive_schema import schema_checker
from forethought.predictors.patterns.derive_values import value_key
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train


def _schema(*required: str, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    props = {name: {"type": "string"} for name in (*required, *optional)}
    return {"type": "object", "properties": props, "required": list(required)}


def _session(sid: str, tools: Mapping[str, Any], *turns: tuple[str, list[tuple[ToolCall, str]]]) -> RecordedSession:
    return RecordedSession(sid, tuple(RecordedTurn(user, tuple(ObservedCall(c, out) for c, out in calls))
                                      for user, calls in turns), tools)


def _predict_last(train_sessions: list[RecordedSession], test: RecordedSession,
                  top_k: int = 3) -> tuple[list[Prediction], ToolCall]:
    """Train on ``train_sessions``, replay ``test`` up to its last call, and predict that call."""
    predictor = PatternPredictor(config=PatternConfig(top_k=top_k))
    train(predictor, train_sessions)
    steps = list(contexts(test))
    for context, observed, _ in steps[:-1]:
        predictor.observe(context, observed)
    context, observed, _ = steps[-1]
    return predictor.predict_now(context), observed.call


BOOKING_TOOLS = {"book": _schema("city"), "invoice": _schema("booking_id"), "weather": _schema("city")}


def _booking(n: int, city: str, booking: str) -> RecordedSession:
    return _session(f"b{n}", BOOKING_TOOLS, (f"Book me a trip to {city} and fetch the invoice.", [
        (ToolCall("book", {"city": city}), json.dumps({"status": "ok", "booking_id": booking})),
        (ToolCall("invoice", {"booking_id": booking}), json.dumps({"total": 100 + n})),
    ]))


def test_argument_from_a_json_output_field() -> None:
    training = [_booking(i, city, f"BK-{i}{i}7") for i, city in enumerate(["Paris", "Rome", "Oslo"])]
    predictions, truth = _predict_last(training, _booking(9, "Lima", "ZX-4410"))
    assert predictions[0].call == truth == ToolCall("invoice", {"booking_id": "ZX-4410"})
    assert predictions[0].executable


SEARCH_TOOLS = {"search": _schema("query"), "open": _schema("path")}


def _search(n: int, topic: str, path: str) -> RecordedSession:
    listing = f"Found 2 results:\n  {path}  (12 KB)\n  /srv/archive/old_{n}.txt  (1 KB)\n"
    return _session(f"s{n}", SEARCH_TOOLS, (f"Find the {topic} data and open it", [
        (ToolCall("search", {"query": topic}), listing),
        (ToolCall("open", {"path": path}), "...contents..."),
    ]))


def test_argument_from_a_path_in_a_text_listing() -> None:
    training = [_search(i, topic, f"/srv/data/{topic}_{i}.csv") for i, topic in enumerate(["alpha", "beta", "gamma"])]
    predictions, truth = _predict_last(training, _search(7, "delta", "/srv/data/delta_77.csv"))
    assert predictions[0].call == truth
    assert predictions[0].executable


GREP_TOOLS = {"grep": _schema("pattern", "file_name")}


def _grep(n: int, pattern: str, file_name: str) -> RecordedSession:
    return _session(f"g{n}", GREP_TOOLS, (f"Look for the keyword '{pattern}' inside '{file_name}', thanks", [
        (ToolCall("grep", {"pattern": pattern, "file_name": file_name}), json.dumps({"lines": []})),
    ]))


def test_arguments_from_the_user_message() -> None:
    training = [_grep(0, "error", "app.log"), _grep(1, "warning", "main.py"), _grep(2, "fatal", "boot.txt")]
    predictions, truth = _predict_last(training, _grep(3, "timeout", "server.cfg"))
    assert predictions[0].call == truth
    assert predictions[0].executable


INBOX_TOOLS = {"login": _schema("user"), "inbox": _schema("user", optional=("folder",))}


def _inbox(n: int, user: str) -> RecordedSession:
    return _session(f"i{n}", INBOX_TOOLS,
                    (f"Log me in as {user}.", [(ToolCall("login", {"user": user}), json.dumps({"ok": True}))]),
                    ("Now show my inbox please.", [(ToolCall("inbox", {"user": user}), json.dumps({"mails": 3}))]))


def test_argument_from_a_previous_call() -> None:
    training = [_inbox(i, name) for i, name in enumerate(["alice", "bob", "carol"])]
    predictions, truth = _predict_last(training, _inbox(5, "dmitri"))
    assert predictions[0].call == truth == ToolCall("inbox", {"user": "dmitri"})


def test_derived_values_survive_case_changes_coercion_and_dates() -> None:
    tools = {"quote": {"type": "object", "required": ["symbol", "amount", "day"], "properties": {
        "symbol": {"type": "string"}, "amount": {"type": "number"}, "day": {"type": "string"}}}}

    def quote(n: int, company: str, amount: str, day: str, iso: str) -> RecordedSession:
        user = f"Buy {amount} worth of {company} Corp on {day}."
        call = ToolCall("quote", {"symbol": company.upper(), "amount": float(amount.replace(",", "")), "day": iso})
        return _session(f"q{n}", tools, (user, [(call, "{}")]))

    training = [quote(0, "Zeta", "1,500", "March 3, 2026", "2026-03-03"),
                quote(1, "Omega", "20,000", "July 14th, 2026", "2026-07-14"),
                quote(2, "Nova", "3,250", "Jan 2, 2027", "2027-01-02")]
    predictions, truth = _predict_last(training, quote(3, "Quasar", "12,000", "October 15, 2026", "2026-10-15"))
    assert predictions[0].call == truth


PAY_TOOLS = {"pay": _schema("amount", "nonce")}


def _missing_required(prediction: Prediction, tools: Mapping[str, Any]) -> list[str]:
    return [p for p in tools[prediction.call.name]["required"] if p not in prediction.call.arguments]


def test_no_executable_prediction_with_a_missing_required_argument() -> None:
    tools = {"refund_ticket": _schema("ticket_code"), "list_tickets": _schema(optional=("status",))}
    test = _session("r", tools, ("Refund my ticket, please", [(ToolCall("refund_ticket", {"ticket_code": "Q7"}), "")]))
    predictions, _ = _predict_last([], test)
    by_name = {p.call.name: p for p in predictions}
    assert not by_name["refund_ticket"].executable, "nothing gives ticket_code: a hint only"
    assert by_name["list_tickets"].executable, "no required argument: executable"


def test_executable_exactly_when_every_required_argument_is_there() -> None:
    training = [_session(f"p{i}", PAY_TOOLS, (f"Pay {10 + i} dollars", [
        (ToolCall("pay", {"amount": str(10 + i), "nonce": f"n{i}"}), "{}")])) for i in range(3)]
    tools = {**PAY_TOOLS, "refund_ticket": _schema("ticket_code"), "cancel": _schema("order", "reason")}
    test = _session("p9", tools, ("Refund or cancel? Pay 5 dollars", [(ToolCall("pay", {"amount": "5"}), "")]))
    predictions, _ = _predict_last(training, test, top_k=20)
    assert {p.executable for p in predictions} == {True, False}
    for prediction in predictions:
        assert prediction.executable == (not _missing_required(prediction, tools))


def test_values_are_coerced_to_the_parameter_schema() -> None:
    integer = schema_checker({"type": "integer"})
    assert (integer("12"), integer(7), integer("seven"), integer("x")) == (12, 7, 7, None)
    assert schema_checker({"type": "array", "items": {"type": "string"}})("a") == ["a"]
    assert schema_checker({"type": "string"})(5) == "5"
    assert schema_checker({"type": "boolean"})("True") is True
    assert schema_checker({"type": "string", "enum": ["on", "off"]})("dim") is None


_WORDS = st.sampled_from(["alpha", "Beta", "gamma_7", "USR042", "report.txt", "12", "3.5", "1,200", "#Tag",
                          "@bob", "New York", "2026-10-15", "May 4, 2026", "x"])


@st.composite
def _sources_and_value(draw: st.DrawFn) -> tuple[Sources, Any]:
    pieces = draw(st.lists(_WORDS, min_size=1, max_size=6))
    quote = draw(st.booleans())
    message = " and ".join(f"'{p}'" if quote and i % 2 else p for i, p in enumerate(pieces))
    history = []
    for i in range(draw(st.integers(0, 3))):
        args = {f"p{j}": draw(_WORDS) for j in range(draw(st.integers(0, 2)))}
        output = json.dumps({"value": draw(_WORDS), "items": draw(st.lists(_WORDS, max_size=3))})
        history.append(ObservedCall(ToolCall(f"t{i % 2}", args), output))
    value = draw(st.one_of(_WORDS, st.sampled_from(pieces), st.integers(0, 20), st.lists(_WORDS, max_size=2)))
    return Sources(message, tuple(history), draw(st.integers(0, len(history)))), value


@settings(max_examples=150, deadline=None)
@given(_sources_and_value())
def test_every_explaining_rule_reproduces_the_value(case: tuple[Sources, Any]) -> None:
    sources, value = case
    for rule in sources.explain(value):
        assert value_key(sources.apply(rule)) == value_key(value), rule
