"""Hostile inputs to the pattern predictor: numbers no float holds (ints past 1.8e308, inf, nan) in
arguments and outputs, and tool descriptions built to make a regular expression backtrack. None of them
makes learning or predicting raise, and a long run of spaces in a description costs linear time."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import ObservedCall, PatternPredictor, PredictionContext, ToolCall
from forethought.predictors.patterns.derive_values import finite_float, json_variants, value_key
from forethought.predictors.patterns.mentions import _GLOSS, glosses
from forethought.predictors.patterns.numbers import NumberSpelling

HUGE = 10 ** 400
NUMBERS = st.one_of(st.integers(min_value=-10 ** 400, max_value=10 ** 400), st.sampled_from([HUGE, -HUGE]),
                    st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.recursive(st.none() | st.booleans() | NUMBERS | st.text(max_size=12),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                   max_size=3),
                      max_leaves=8)
SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "n": {"type": "number"}, "i": {"type": "integer"}, "x": {},
    "mode": {"type": "string", "description": "Mode ('l' for lines, 'w' for words)" + " " * 300 + "x"}}}
TOOLS: dict[str, Any] = {"get": SCHEMA, "put": SCHEMA}


def _context(sid: str, text: str, history: tuple[ObservedCall, ...]) -> PredictionContext:
    return PredictionContext(sid, [{"role": "user", "content": text}], text, history, TOOLS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["get", "put"]), st.dictionaries(st.sampled_from(["n", "i", "x", "mode"]),
                                                                           VALUES, max_size=3), VALUES),
                min_size=1, max_size=5),
       st.sampled_from(["", "Count the lines of 1e400 then 99999999999999999999.", "inf and nan, 10 words"]))
def test_no_number_or_output_makes_the_predictor_raise(calls: list[tuple[str, dict[str, Any], Any]],
                                                       text: str) -> None:
    predictor = PatternPredictor()
    history: tuple[ObservedCall, ...] = ()
    for session in ("a", "b"):
        history = ()
        for name, arguments, output in calls:
            context = _context(session, text, history)
            predictor.predict_now(context)
            observed = ObservedCall(ToolCall(name, arguments), json.dumps(output))
            predictor.observe(context, observed)
            history = (*history, observed)
    for prediction in predictor.predict_now(_context("live", text, history)):
        assert prediction.call.name in TOOLS


def test_numbers_no_float_holds_offer_only_themselves() -> None:
    for value in (HUGE, -HUGE, math.inf, -math.inf):
        assert finite_float(value) is None and list(json_variants(value)) == [("id", value)]
    assert finite_float(2 ** 1023) == float(2 ** 1023) and finite_float(7) == 7.0
    assert value_key(HUGE) != value_key(HUGE + 1)  # still told apart
    spelling = NumberSpelling()
    spelling.learn("t", {"p": HUGE, "q": math.inf}, "Use 1e400.")
    assert spelling.spell("t", "p", {"type": "number"}, HUGE, "Use 1e400.") == HUGE  # left as it is
    assert spelling.other_spelling("t", "p", None, HUGE) is None


def test_a_long_run_of_spaces_in_a_description_is_read_in_linear_time() -> None:
    # Quadratic backtracking made 8,000 spaces take ~6 s and 16,000 ~23 s; this is 200,000 (well past the
    # cap on what glosses() reads, so the expression itself is tried).
    spaces = " " * 200_000
    assert _GLOSS.findall("'a' for a" + spaces + "x") == []
    assert _GLOSS.findall("'a' for lines" + spaces + ", 'b' for words") == [("a", "lines"), ("b", "words")]
    assert _GLOSS.findall("'r' = read" + spaces + "or 'w' = write") == [("r", "read"), ("w", "write")]
    assert glosses("Mode ('l' for lines" + spaces + ")") == (("l", " lines "),)
