"""A guess is spelt as the client spells its calls: arguments at their schema default are left out unless the
client's latest call of the tool gave them, and ones it gave but the prediction lacks take their default.

"At its default" means the same JSON: ``0`` is not ``false`` and ``3.0`` is not ``3`` (a server can tell them
apart, so the core keys them apart)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forethought.mcp.guessing import spelt_as_client

SCHEMA = {"type": "object", "properties": {
    "repo_path": {"type": "string"}, "context_lines": {"type": "integer", "default": 3},
    "exclude": {"type": "array", "default": []}, "dry_run": {"type": "boolean", "default": False}}}
DEFAULTS = {"context_lines": 3, "exclude": [], "dry_run": False}
NAMES = ("repo_path", "context_lines", "exclude", "dry_run")
values = st.one_of(st.integers(0, 4), st.booleans(), st.just([]), st.text(max_size=3))


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


def test_the_git_server_case() -> None:
    predicted = {"repo_path": "/r", "context_lines": 3}
    assert spelt_as_client(predicted, SCHEMA, frozenset({"repo_path"})) == {"repo_path": "/r"}
    assert spelt_as_client(predicted, SCHEMA, frozenset({"repo_path", "context_lines"})) == predicted
    assert spelt_as_client({"repo_path": "/r"}, SCHEMA, frozenset({"repo_path", "dry_run"})) == {
        "repo_path": "/r", "dry_run": False}
    assert spelt_as_client(predicted, {"type": "object"}, frozenset()) == predicted


@given(st.dictionaries(st.sampled_from(NAMES), values), st.frozensets(st.sampled_from(NAMES)))
def test_spelling_changes_only_defaults(arguments: dict[str, Any], client: frozenset[str]) -> None:
    spelt = spelt_as_client(arguments, SCHEMA, client)
    for k, v in arguments.items():  # what differs from the default is kept as predicted
        if k not in DEFAULTS or not _same(DEFAULTS[k], v):
            assert _same(spelt[k], v)
    for k, v in spelt.items():  # nothing new but defaults the client spells out
        assert (k in arguments and _same(arguments[k], v)) or (k in client and _same(v, DEFAULTS[k]))
    for k in DEFAULTS:
        if k in spelt and _same(spelt[k], DEFAULTS[k]):
            assert k in client
    assert spelt_as_client(spelt, SCHEMA, client) == spelt
