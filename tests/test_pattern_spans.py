"""Values copied from the message whole: e-mail addresses, names with apostrophes, names after a verb.

A value the user wrote must be an atom of its own, not cut: an e-mail address (not the file name
"example.org" inside it), "O'Brien" (not "O" and "Brien"), and the name in "Send Ana Ortiz a note" (the
sentence's first word may be a verb: the run is also offered without it, and the rules learn which one a
parameter takes).
"""

from __future__ import annotations

from typing import Any

import pytest

from forethought import ToolCall
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.predictor import PatternPredictor
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn, contexts, train
from forethought.predictors.patterns.text import text_atoms


def _kinds(text: str, kind: str) -> list[str]:
    return [a.text for a in text_atoms(text) if a.kind == kind]


@pytest.mark.parametrize(("text", "emails"), [
    ("Share it with fendun.monithith@example.org.", ["fendun.monithith@example.org"]),
    ("cc a.b+tag@mail.example.co.uk and x_y@host.io, thanks", ["a.b+tag@mail.example.co.uk", "x_y@host.io"]),
    ("ping @alice on the board", []),
])
def test_email_addresses_are_atoms_whole(text: str, emails: list[str]) -> None:
    assert _kinds(text, "email") == emails


@pytest.mark.parametrize(("text", "names"), [
    ("Ask O'Brien about it.", ["Ask O'Brien", "O'Brien"]),
    ("Then call D'Angelo.", ["D'Angelo"]),
    ("I've asked Sam. I'm sure.", ["Sam"]),
    ("Meet at McDonald's.", ["McDonald"]),  # a possessive is not part of the name
    ("Send Ana Ortiz a note.", ["Send Ana Ortiz", "Ana Ortiz"]),
    ("Please tell Jean-Luc Picard.", ["Jean-Luc Picard"]),
])
def test_names_keep_their_apostrophes_and_are_offered_without_an_opening_verb(text: str, names: list[str]) -> None:
    assert _kinds(text, "proper") == names


_TOOLS: dict[str, Any] = {
    "share": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
    "lookup": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
}


def _session(n: int, email: str, name: str) -> RecordedSession:
    return RecordedSession(f"s{n}", (
        RecordedTurn(f"Share the file with {email}.", (ObservedCall(ToolCall("share", {"email": email}), "ok"),)),
        RecordedTurn(f"Send {name} a message.", (ObservedCall(ToolCall("lookup", {"name": name}), "ok"),)),
    ), _TOOLS)


def test_a_predictor_copies_addresses_and_names_whole() -> None:
    predictor = PatternPredictor()
    train(predictor, [_session(n, f"user{n}.x@corp{n}.example.com", f"Ana{n} Ortiz{n}") for n in range(4)])
    steps = list(contexts(_session(9, "kim.lee@research.example.org", "Ilse O'Neill")))
    first = predictor.predict_now(steps[0][0])[0]
    assert first.call == ToolCall("share", {"email": "kim.lee@research.example.org"})
    predictor.observe(steps[0][0], steps[0][1])
    second = predictor.predict_now(steps[1][0])[0]
    assert second.call == ToolCall("lookup", {"name": "Ilse O'Neill"})
