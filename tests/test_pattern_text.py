"""Atoms and value transforms: the raw material of argument derivation."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from forethought.predictors.patterns.derive_values import apply_transform, json_variants, string_variants, value_key
from forethought.predictors.patterns.text import content_words, name_words, parse_number, text_atoms


def _kinds(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for atom in text_atoms(text):
        out.setdefault(atom.kind, []).append(atom.text)
    return out


def test_quoted_strings_ignore_apostrophes_in_words() -> None:
    kinds = _kinds("I'd like to move 'final report.pdf' to 'temp', don't you think? Let's go.")
    assert kinds["quoted"] == ["final report.pdf", "temp"]


def test_quoted_strings_keep_inner_apostrophes_and_mixed_quotes() -> None:
    kinds = _kinds("Send 'I've decided to drop those stocks.' to 'USR002', say 'Done?'now, title it "
                   "'Urgent Change in Travel Plans’ and tag Bob's 'x'.")
    assert kinds["quoted"] == ["I've decided to drop those stocks.", "USR002", "Done?",
                               "Urgent Change in Travel Plans", "x"]
    assert "quoted" not in _kinds("it's Bob's and Ann's")  # apostrophes in words open no quote


def test_compound_names_and_sentence_openers() -> None:
    kinds = _kinds("Set navigation to 123 Pine St, San Francisco, CA 94016. Could you? I think Paris, France "
                   "is nice. Determine the route.")
    assert kinds["compound"] == ["123 Pine St, San Francisco, CA 94016", "Paris, France"]
    assert "Could" not in kinds["proper"] and "I" not in kinds["proper"] and "Determine" not in kinds["proper"]
    assert "San Francisco" in kinds["proper"] and "Paris" in kinds["proper"]
    assert "compound" not in _kinds("no names here, none at all")
    assert "compound" not in _kinds("Paris France")  # a comma joins the parts


def test_the_pronoun_i_is_never_part_of_a_name() -> None:
    kinds = _kinds("Before I start packing, Michael Thompson said so. As I map out a trip from Rivermist, "
                   "Anna and I fly. Tell I Am Legend. The Bank of I Paris.")
    proper = kinds["proper"]
    assert "Before I" not in proper and "As I" not in proper and "Before" not in proper and "As" not in proper
    assert {"Michael Thompson", "Rivermist", "Anna", "Am Legend", "The Bank", "Paris"} <= set(proper)
    assert "Bank of" not in " | ".join(proper)  # no connector left at a piece's end
    assert "proper" not in _kinds("I. I I, I")


@given(st.lists(st.sampled_from(["I", "Anna", "of", "New", "York", "the", "said", ".", ",", "Before"]),
                max_size=12))
def test_names_never_hold_the_pronoun_and_sit_where_they_say(words: list[str]) -> None:
    text = " ".join(words)
    for atom in text_atoms(text):
        if atom.kind == "proper":
            assert "I" not in atom.text.split()
            assert text[atom.start:atom.start + len(atom.text)] == atom.text
            assert atom.text[0].isupper() and atom.text.split()[-1][0].isupper()


def test_files_numbers_ids_tags_and_urls() -> None:
    text = ("Copy notes.txt, pay $20,000.50 or 15% to USR003 via travel_card_12345; tweet #RoadTrip to "
            "@AutoUpdates and see https://example.com/a?b=1 or /var/log/syslog")
    kinds = _kinds(text)
    assert "notes.txt" in kinds["file"]
    numbers = {a.text: a.number for a in text_atoms(text) if a.kind == "number"}
    assert numbers["$20,000.50"] == 20000.5
    assert numbers["15%"] == 15
    assert {"USR003", "travel_card_12345"} <= set(kinds["id"])
    assert kinds["hashtag"] == ["#RoadTrip"]
    assert kinds["mention"] == ["@AutoUpdates"]
    assert kinds["url"] == ["https://example.com/a?b=1"]
    assert "/var/log/syslog" in kinds["path"]


def test_ids_do_not_start_inside_a_password() -> None:
    assert "v3lB00ks2023" not in _kinds("password 'Tr@v3lB00ks2023' please").get("id", [])


def test_dates_in_words_and_digits() -> None:
    dates = {a.date for a in text_atoms("Fly on October 15th, 2026 or 2026-11-03, or 3 March 2027.") if a.date}
    assert dates == {dt.date(2026, 10, 15), dt.date(2026, 11, 3), dt.date(2027, 3, 3)}
    slashed = [(a.text, a.date) for a in text_atoms("this Thursday 09/10, 2026, then 10/15/2026 or 3/4,2027") if a.date]
    assert slashed == [("09/10, 2026", dt.date(2026, 9, 10)), ("10/15/2026", dt.date(2026, 10, 15)),
                       ("3/4,2027", dt.date(2027, 3, 4))]
    assert not [a for a in text_atoms("scores 13/40, 2026 points") if a.date]  # no 13th month


def test_cues_are_the_neighbouring_words() -> None:
    atom = next(a for a in text_atoms("search for the keyword 'Error' in logs") if a.kind == "quoted")
    assert (atom.before, atom.after) == ("keyword", "in")


def test_word_helpers() -> None:
    assert name_words("post_tweet") == {"post", "tweet"} == name_words("postTweets")
    assert "the" not in content_words("Show the files")
    assert "file" in content_words("Show the files")
    assert parse_number("twelve") == 12
    assert parse_number("1,234") == 1234
    assert parse_number("abc") is None


def test_transforms_cover_case_numbers_dates_and_tags() -> None:
    variants = dict(string_variants("Zeta Corp"))
    assert variants["first.upper"] == "ZETA"
    assert variants["all.lower"] == "zeta corp"
    assert dict(string_variants("20,000"))["num.id"] == 20000
    assert dict(string_variants("RoadTrip"))["hash"] == "#RoadTrip"
    assert apply_transform("date:%Y-%m-%d", "Oct 5, 2026", dt.date(2026, 10, 5)) == "2026-10-05"
    assert dict(json_variants(3.9625))["round2"] == 3.96


def test_value_key_equates_integral_floats() -> None:
    assert value_key(5) == value_key(5.0)
    assert value_key({"a": [1.0, "x"]}) == value_key({"a": [1, "x"]})
    assert value_key(True) != value_key(1)


@given(st.text(max_size=300))
def test_atoms_are_substrings_of_their_text(text: str) -> None:
    for atom in text_atoms(text):
        assert atom.text in text


@given(st.text(max_size=40))
def test_every_listed_variant_is_reproduced_by_name(text: str) -> None:
    for name, value in string_variants(text):
        assert value_key(apply_transform(name, text)) == value_key(value)
