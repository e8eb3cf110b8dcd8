"""Glosses: a value a parameter's description explains ("'l' for lines") is offered when the message
names its meaning, even a value no call has used yet."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forethought import ObservedCall, PatternPredictor, PredictionContext, ToolCall
from forethought.predictors.patterns.mentions import glosses, mentioned

MODE = {"type": "string", "description": "Mode of operation ('l' for lines, 'w' for words, 'c' for characters)."}
TOOLS: dict[str, Any] = {"count": {"type": "object", "required": ["file", "mode"],
                                   "properties": {"file": {"type": "string"}, "mode": MODE}}}


def _context(sid: str, text: str, history: tuple[ObservedCall, ...] = ()) -> PredictionContext:
    return PredictionContext(sid, [{"role": "user", "content": text}], text, history, TOOLS)


def test_glosses_read_quoted_values_and_their_meaning() -> None:
    found = glosses(str(MODE["description"]))
    assert found == (("l", " lines "), ("w", " words "), ("c", " characters "))
    assert glosses('Access ("r" = read only or "w" = write).') == (("r", " read only "), ("w", " write "))
    assert glosses("Start date (format: 'YYYY-MM-DD').") == ()  # a quoted example glosses nothing
    assert glosses("The sector (e.g., 'Technology').") == ()
    assert mentioned(found, "Tally up the characters and the words.") == "w"
    assert mentioned(found, "Tally up the characters and the words.", first=True) == "c"


def test_a_glossed_value_is_offered_when_the_message_names_its_meaning() -> None:
    predictor = PatternPredictor()
    for n, (unit, mode) in enumerate((("lines", "l"), ("words", "w"), ("lines", "l"), ("words", "w"))):
        predictor.observe(_context(f"s{n}", f"How long is 'f{n}.txt' in {unit}?"),
                          ObservedCall(ToolCall("count", {"file": f"f{n}.txt", "mode": mode}), "12"))
    best = predictor.predict_now(_context("live", "How long is 'g.txt' in characters?"))[0]
    assert best.call == ToolCall("count", {"file": "g.txt", "mode": "c"})  # 'c' never used before
    assert best.executable


def test_the_glossed_values_a_message_lists_are_taken_one_call_each() -> None:
    predictor = PatternPredictor()
    for n in range(3):
        text = f"Give me the lines, words and characters of 'f{n}.txt'."
        history: tuple[ObservedCall, ...] = ()
        for mode in ("l", "w", "c"):
            observed = ObservedCall(ToolCall("count", {"file": f"f{n}.txt", "mode": mode}), "12")
            predictor.observe(_context(f"s{n}", text, history), observed)
            history = (*history, observed)
    text = "Give me the lines, words and characters of 'g.txt'."
    history = ()
    for mode in ("l", "w", "c"):
        best = predictor.predict_now(_context("live", text, history))[0]
        assert best.call == ToolCall("count", {"file": "g.txt", "mode": mode})
        observed = ObservedCall(best.call, "12")
        predictor.observe(_context("live", text, history), observed)
        history = (*history, observed)


@given(st.text(max_size=200))
def test_any_description_glosses_without_error(text: str) -> None:
    for value, words in glosses(text):
        assert value and words.strip()
