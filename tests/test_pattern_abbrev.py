"""Codes that abbreviate a name of the message ("MSFT" for "Microsoft", "CRH" for "Crescent Hollow")."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.derive_rules import MAX_LISTED_CODES, Sources
from forethought.predictors.patterns.mentions import abbreviated, abbreviation_fit, is_code
from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train

CODES = ("AAPL", "GOOG", "MSFT", "NVDA", "RMS", "SBK", "CRH", "PHV", "SFO", "LAX", "ATV", "SSV")


def test_codes_abbreviate_names_from_their_first_letter() -> None:
    expected = {"Microsoft": "MSFT", "Nvidia": "NVDA", "Crescent Hollow": "CRH", "Pinehaven": "PHV",
                "San Francisco": "SFO", "Rivermist": "RMS", "Stonebrook": "SBK"}
    for name, code in expected.items():
        assert abbreviated(CODES, (name,)) == code, name
    for name in ("Apple", "Los Angeles", "New York", "Kelly", "Tokyo"):
        assert abbreviated(CODES, (name,)) is None, name  # no code spells them in order from the start


def test_a_code_is_not_its_own_abbreviation_and_capitals_are_codes() -> None:
    assert abbreviation_fit("SFO", "SFO") is None and abbreviation_fit("LA", "La") is None
    assert abbreviated(("LA", "LX"), ("LAX",)) is None  # "LAX" written in capitals is a code, not a name
    assert abbreviated(CODES, ()) is None and abbreviated((), ("Microsoft",)) is None


def test_last_or_first_name_and_best_fit() -> None:
    names = ("Crescent Hollow", "Rivermist")
    assert abbreviated(CODES, names) == "RMS" and abbreviated(CODES, names, first=True) == "CRH"
    # Both spell "Crescent Hollow" in order; the one whose letters start its words fits better; on a tie
    # (as many word starts, as long a span) the first listed.
    assert abbreviated(("CRT", "CH"), ("Crescent Hollow",)) == "CH"
    assert abbreviation_fit("CH", "Crescent Hollow") == (2, -8) == abbreviation_fit("CSH", "Crescent Hollow")
    assert abbreviated(("CSH", "CH"), ("Crescent Hollow",)) == "CSH"


def test_what_counts_as_a_code() -> None:
    assert is_code("SFO") and is_code("A1") and is_code("USR005")
    assert not any(is_code(v) for v in ("S", "sfo", "Sfo", "TOOLONGX", "S-F", 12, None, "12"))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ABCMNORSTX", min_size=2, max_size=5),
       st.text(alphabet="abcmnorstx ", min_size=1, max_size=20))
def test_an_abbreviation_is_an_ordered_subsequence_from_the_first_letter(code: str, name: str) -> None:
    name = name.strip().capitalize()
    fit = abbreviation_fit(code, name)
    letters = "".join(name.lower().split())
    if fit is None:
        return
    assert letters[0] == code[0].lower() and letters != code.lower()
    it = iter(letters)
    assert all(ch in it for ch in code.lower())  # in order
    assert abbreviated((code,), (name,)) == code


TOOLS = {
    "list_places": {"type": "object", "properties": {}},
    "weather": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}},
}
PLACES = {"Rivermist": "RMS", "Stonebrook": "SBK", "Crescent Hollow": "CRH", "Pinehaven": "PHV",
          "Autumnville": "ATV"}


def _session(n: int, place: str) -> RecordedSession:
    listing = json.dumps({"places": sorted(PLACES.values())})
    calls = (ObservedCall(ToolCall("list_places", {}), listing),
             ObservedCall(ToolCall("weather", {"code": PLACES[place]}), json.dumps({"sky": "clear"})))
    return RecordedSession(f"s{n}", (RecordedTurn(f"What is the weather like in {place} today?", calls),), TOOLS)


def test_the_code_of_a_place_never_seen_comes_from_a_listing() -> None:
    predictor = PatternPredictor(config=PatternConfig(top_k=3))
    train(predictor, [_session(0, "Rivermist"), _session(1, "Stonebrook"), _session(2, "Crescent Hollow")])
    steps = list(contexts(_session(9, "Pinehaven")))  # PHV was never an argument: only listed
    predictor.observe(steps[0][0], steps[0][1])
    best = predictor.predict_now(steps[1][0])[0]
    assert best.call == ToolCall("weather", {"code": "PHV"}) and best.executable


def test_listed_codes_are_bounded_however_many_lists_an_output_holds() -> None:
    records = [{"id": i, "tags": [f"C{i:04d}", "lower", 7]} for i in range(3000)]
    history = (ObservedCall(ToolCall("dump", {}), json.dumps({"records": records, "codes": ["SFO", "LAX"]})),)
    codes = Sources("fly to San Francisco", history).listed_codes()
    assert 0 < len(codes) <= MAX_LISTED_CODES
    assert codes[:2] == ("SFO", "LAX")  # the output's own list before the lists inside its records
    assert "C0000" in codes and all(is_code(c) for c in codes)
    assert Sources("nothing", (ObservedCall(ToolCall("t", {}), "not json at all"),)).listed_codes() == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8), max_size=6), st.lists(st.text(max_size=24), max_size=4), st.booleans())
def test_abbreviated_returns_one_of_the_codes_or_nothing(codes: list[str], names: list[str], first: bool) -> None:
    found = abbreviated(tuple(codes), tuple(names), first)
    assert found is None or (found in codes and is_code(found))
