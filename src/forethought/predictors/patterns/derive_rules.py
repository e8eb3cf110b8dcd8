"""Derivation rules: where an argument value comes from, stated so that it can be replayed.

A :class:`Rule` names a source, a locator inside it and a transform, for example "the user's message,
the second quoted string, as is", "the output of ``book_flight``, field ``booking_id``", "the argument
``folder`` of the previous call", or "every hashtag of the user's message, as a list". :class:`Sources`
holds what a rule may read at one point of a session (the latest and previous user messages, the calls so
far with their outputs). :meth:`Sources.explain` lists every rule that reproduces a given value (learning);
:meth:`Sources.apply` replays one rule (prediction). Nothing here knows about any particular tool.

Sources and their locators:

* ``user`` / ``prev`` / ``sys`` (latest / previous user message, system and developer messages): an
  atom kind (:mod:`pattern_text`) and a
  selector: ``i`` n-th, ``r`` n-th from the end, ``u`` n-th not yet used by a call of this turn, ``b`` /
  ``a`` the one just after / before a cue word.
* ``all``: every atom of a kind in the latest user message, as a list; or one *enumeration* of them (a
  run of atoms joined by separators only: "'Travel' and 'Adventure'"; :func:`derive_index.atom_runs`):
  the n-th from the start or end, or the one just after a cue word.
* ``arg``: an earlier call's argument: of the latest call of a tool, of the latest call having a
  parameter of that name, or of the call n steps back.
* ``out``: a field of an earlier call's JSON output (a path such as ``invoice.booking_id`` or
  ``files[-1]``): of the latest call of a tool, of the latest output holding that field, or n steps back.
* ``tok``: an atom inside a text field of the latest output of a tool (a path or id in a listing).
* ``ord``: the item of a list in an earlier output (a path pattern such as ``watchlist[#]`` or
  ``items[#].id``) at the position the user message names by an ordinal ("the second file", "the last
  one"; :mod:`derive_ordinal`): of the latest call of a tool, or n steps back.
* ``walk``: the next item, not yet used this turn, of the list (an array in a recent output, or the
  same field of its items) that the latest value of a parameter came from: one call per item.

The pieces: the rule as a value (:mod:`derive_rule`), what it reads (:mod:`derive_sources`, with what is
worked out once per call in :mod:`derive_calls`), learning which rules give a value (:mod:`derive_explain`);
replaying them is here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forethought.predictors.patterns.derive_calls import MAX_ARGUMENT_KEYS, MAX_LISTED_CODES
from forethought.predictors.patterns.derive_explain import LIST_TRANSFORMS, MAX_EXPLAINED_LEAVES, Explaining
from forethought.predictors.patterns.derive_index import atom_value
from forethought.predictors.patterns.derive_ordinal import at_ordinal, message_ordinal
from forethought.predictors.patterns.derive_outputs import first_leaf_by_name, first_leaf_by_path, output_index
from forethought.predictors.patterns.derive_rule import Rule
from forethought.predictors.patterns.derive_sources import (
    MAX_BACK,
    MAX_UNUSED,
    MAX_WALK_OUTPUTS,
    atom_transform,
    pick,
)
from forethought.predictors.patterns.derive_values import apply_transform, value_key
from forethought.predictors.patterns.text import Atom

__all__ = [
    "LIST_TRANSFORMS",
    "MAX_ARGUMENT_KEYS",
    "MAX_BACK",
    "MAX_EXPLAINED_LEAVES",
    "MAX_LISTED_CODES",
    "MAX_UNUSED",
    "MAX_WALK_OUTPUTS",
    "Rule",
    "Sources",
]


class Sources(Explaining):
    """What derivation rules may read at one point of a session."""

    __slots__ = ()

    def forget_values(self) -> None:
        """Drop what this point worked out and remembered (the values of rules, the atoms of its messages
        merged, the lists walked), keeping what a rule replayed here later reads: a kept point of a session
        stays small and leaves few objects for the garbage collector to visit; it works them out again if
        asked."""
        self._applied = {}
        self._merged = {}
        self._unused_atoms = {}
        self._walks = {}
        self._used = None
        self._used_by = None
        self._indexes = {}

    def apply(self, rule: Rule) -> Any:
        """The value ``rule`` gives here, or None when it does not apply."""
        found = self.apply_keyed(rule)
        return None if found is None else found[0]

    def apply_keyed(self, rule: Rule) -> tuple[Any, str] | None:
        """:meth:`apply` with the value's :func:`value_key`, or None."""
        return self.apply_all((rule,))[0]

    def apply_all(self, rules: Sequence[Rule | None]) -> list[tuple[Any, str] | None]:
        """:meth:`apply_keyed` of each rule (None for None), in one call.

        Each rule is worked out once here; one that reads only a user message, once per message.
        """
        applied = self._applied
        memos: dict[str, tuple[Mapping[tuple[str, ...], Any], dict[str, Any]]] = {}
        out: list[tuple[Any, str] | None] = [None] * len(rules)
        for i, rule in enumerate(rules):
            if rule is None:
                continue
            key = rule.key
            if key in applied:
                found = applied[key]
            elif rule.message_only:
                text = self._text(rule.source)
                index, memo = memos[text] if text in memos else memos.setdefault(text, self.message_index(text))
                if key in memo:
                    found = memo[key]
                elif rule.source != "all" and rule.locator in index:
                    atom = index[rule.locator]
                    found = memo[key] = None if atom is None else atom_value(
                        atom.text, atom.date, rule.transform, rule.wrap)
                elif rule.source != "all" and rule.locator[1:2] in (("b",), ("a",)):
                    found = memo[key] = None  # the index lists every cue word that has an atom
                else:
                    found = memo[key] = self._apply_loaded(rule)
                applied[key] = found
            else:
                found = applied[key] = self._apply_loaded(rule)
            if found is not None and found[0].__class__ in (list, dict):
                # Remembered values are shared: every caller gets its own (shallow) container.
                found = (list(found[0]) if found[0].__class__ is list else dict(found[0])), found[1]
            out[i] = found
        return out

    def _apply_loaded(self, rule: Rule) -> tuple[Any, str] | None:
        """:meth:`_apply_new`, giving nothing for a rule whose locator this model never writes (a rule of the
        right shape from a store another program wrote: a missing part, a position that is no number)."""
        try:
            return self._apply_new(rule)
        except (LookupError, ValueError, TypeError):
            return None

    def _apply_new(self, rule: Rule) -> tuple[Any, str] | None:
        """The value ``rule`` gives here and its value key, worked out (nothing remembered)."""
        if rule.source in ("user", "prev", "sys", "tok"):
            atom = self._token_atom(rule) if rule.source == "tok" else self._locate_atom(rule.source, rule.locator)
            return None if atom is None else atom_value(atom.text, atom.date, rule.transform, rule.wrap)
        if rule.source == "out":
            value = self._apply_output(rule)
        elif rule.source == "ord":
            value = self._apply_ordinal(rule)
        elif rule.source == "arg":
            value = self._apply_argument(rule)
        elif rule.source == "walk":
            following = self._walk_next(rule.locator[1])
            value = None if following is None else apply_transform(rule.transform, following)
        elif rule.source == "all":
            if len(rule.locator) == 4 and rule.locator[1] == "run":
                atoms = self._run_at(rule.locator) or ()
            else:
                atoms = self._atoms("all").get(rule.locator[0], ())
            values = [atom_transform(a, rule.transform) for a in atoms]
            value = values if atoms and all(v is not None for v in values) else None
        else:
            value = None
        if value is not None and rule.wrap and rule.source != "all":
            value = [value]
        return None if value is None else (value, value_key(value))

    def _apply_argument(self, rule: Rule) -> Any:
        locator = rule.locator
        if locator[0] == "name":
            index = self._last_with_param.get(locator[1])
            observed = None if index is None else self.history[index]
        else:
            observed = self._call_at(locator[:-1])
        if observed is None or locator[-1] not in observed.call.arguments:
            return None
        return apply_transform(rule.transform, observed.call.arguments[locator[-1]])

    def _token_atom(self, rule: Rule) -> Atom | None:
        """The atom a ``tok`` rule points at, in a text field of the latest output of a tool."""
        _, tool, path, kind, selector, n = rule.locator
        observed = self._call_at(("tool", tool))
        if observed is None:
            return None
        index = output_index(observed.output)
        atoms = index.tokens.get(path, {}).get(kind, ())
        if selector == "r" and path in index.truncated:
            return None
        return pick(atoms, selector, int(n))

    def _apply_ordinal(self, rule: Rule) -> Any:
        """The item an ``ord`` rule points at: its list, at the position the user message names."""
        ordinal = message_ordinal(self.user_message)
        observed = None if ordinal is None else self._call_at(rule.locator[:-1])
        if observed is None or ordinal is None:
            return None
        leaves = first_leaf_by_path(observed.output)
        path = at_ordinal(rule.locator[-1], ordinal)
        return apply_transform(rule.transform, leaves[path]) if path in leaves else None

    def _apply_output(self, rule: Rule) -> Any:
        locator = rule.locator
        if locator[0] == "key":
            for earlier in reversed(self.history):
                named = first_leaf_by_name(earlier.output)
                if locator[1] in named:
                    return apply_transform(rule.transform, named[locator[1]])
            return None
        observed = self._call_at(locator[:-1])
        if observed is None:
            return None
        leaves = first_leaf_by_path(observed.output)
        return apply_transform(rule.transform, leaves[locator[-1]]) if locator[-1] in leaves else None
