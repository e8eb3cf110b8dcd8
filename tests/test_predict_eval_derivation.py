"""predict-eval's derivation shares: every rule key the argument model can report is named by its kind,
the date re-spellings apart, and no key (pseudo rules added later, malformed text) makes it fail."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from forethought.bench.predict_eval import derivation
from forethought.predictors.patterns.args import PSEUDO_RULES
from forethought.predictors.patterns.derive_rules import Rule
from forethought.predictors.patterns.derive_time import WHEN


def test_rules_count_as_their_source_and_dates_apart() -> None:
    assert derivation(Rule("user", ("q", "0"), "id").key) == "user"
    assert derivation(Rule("out", ("1", "items"), "id", wrap=True).key) == "out"
    assert derivation(Rule("user", (WHEN, "0"), "id").key) == "user+date"
    assert derivation(Rule("arg", ("p",), "date:%Y-%m-%d").key) == "arg+date"
    assert derivation("constant") == "constant" and derivation("absent") == "absent"


def test_every_pseudo_rule_counts_as_its_kind() -> None:
    for key in PSEUDO_RULES:
        assert derivation(key) == json.loads(key)[0]
    assert derivation('["enum","gloss unused"]') == "enum"
    assert derivation('["newkind","x","y"]') == "newkind"  # a pseudo rule named later: still its kind
    assert derivation("[" * 100_000) == "other"  # nested past the JSON parser's depth


@given(st.one_of(st.text(max_size=40), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4), max_leaves=10).map(json.dumps)))
def test_no_key_makes_it_fail(key: str) -> None:
    kind = derivation(key)
    assert isinstance(kind, str) and kind
