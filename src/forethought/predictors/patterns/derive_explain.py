"""Learning rules: every derivation rule that reproduces a given value at one point of a session.

A value is explained by every atom of a message, every enumeration, every argument of an earlier call,
every leaf and text atom of an earlier output, and the next item of a list being walked, that gives it
under some transform (only the simplest transform that works is credited). A cheap test on the value
(:class:`_Target`) rules out most sources before any transform, and only the output leaves filed under
the value's lookup keys (:mod:`derive_outputs`) are tried.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from forethought.predictors.patterns.derive_index import MAX_FROM_END, MAX_ORDINAL, MAX_RUNS, atom_runs
from forethought.predictors.patterns.derive_lookup import alnum, target_keys
from forethought.predictors.patterns.derive_ordinal import message_ordinal, ordinal_path
from forethought.predictors.patterns.derive_outputs import leaf_name, output_index
from forethought.predictors.patterns.derive_rule import Rule
from forethought.predictors.patterns.derive_sources import SourceView, atom_transform
from forethought.predictors.patterns.derive_values import date_variants, json_variants, string_variants, value_key
from forethought.predictors.patterns.text import Atom, parse_number

MAX_EXPLAINED_LEAVES = 6
"""A value found in more leaves of one output is credited to the first ones only (a value found all
over an output says little about where it came from, and every rule credited is replayed from then on)."""
LIST_TRANSFORMS = ("all.id", "untag", "hash", "at", "num.id", "all.lower", "all.upper")
_TOKEN_KINDS = ("quoted", "file", "id", "url", "path", "number", "date", "hashtag", "mention", "email")


def _atom_values(atom: Atom) -> Iterator[tuple[str, Any]]:
    yield from string_variants(atom.text)
    if atom.date is not None:
        yield from date_variants(atom.date)


_alnum = functools.lru_cache(maxsize=4096)(alnum)
"""Source texts repeat at every step of a session: each is reduced once."""


class _Target:
    """A value being explained, with a cheap test that rules out most sources before any transform."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._keys: tuple[str, ...] | None = None
        self.key = value_key(value)
        single = value[0] if isinstance(value, list) and len(value) == 1 else None
        self.wrapped_key = None if single is None or isinstance(single, list | dict) else value_key(single)
        scalars = [single] if self.wrapped_key is not None else [value]
        self._texts = [_alnum(s) for s in scalars if isinstance(s, str)]
        self._numbers = any(isinstance(s, int | float) and not isinstance(s, bool) for s in scalars)
        self._other = any(s is None or isinstance(s, bool | list | dict) for s in scalars)

    def lookup_keys(self) -> tuple[str, ...]:
        """The lookup keys of the leaves that may give the target (:func:`derive_lookup.target_keys`)."""
        if self._keys is None:
            self._keys = target_keys(self.value)
        return self._keys

    def may_come_from(self, source: Any, is_date: bool = False) -> bool:
        """False when no transform can turn ``source`` into the target."""
        if isinstance(source, str):
            if self._numbers and any(ch.isdigit() for ch in source):
                return True
            if is_date and self._texts:
                return True
            flat = _alnum(source)
            return any(t in flat for t in self._texts) or (self._numbers and parse_number(source) is not None)
        if isinstance(source, int | float) and not isinstance(source, bool):
            return self._numbers or bool(self._texts)
        return self._other

    def hit(self, candidate: Any) -> bool | None:
        """True (wrapped in a list), False (as is) when ``candidate`` gives the target, else None."""
        key = value_key(candidate)
        if key == self.key:
            return False
        if key == self.wrapped_key:
            return True
        return None


class Explaining(SourceView):
    """What derivation rules may read, with the rules that reproduce a value there (:meth:`explain`)."""

    __slots__ = ()

    def explain(self, value: Any, param: str | None = None) -> list[Rule]:
        """Every rule that reproduces ``value`` here (compared as schema-aware keys compare); with
        ``param``, the parameter it is a value of, also the rules that walk a list by that parameter."""
        target = _Target(value)
        found: dict[str, Rule] = {}

        def add(source: str, locators: Sequence[tuple[str, ...]], variants: Iterator[tuple[str, Any]]) -> None:
            # Only the simplest transform that works is credited: "as is" before a case change, and so on.
            for transform, candidate in variants:
                wrap = target.hit(candidate)
                if wrap is None:
                    continue
                for locator in locators:
                    rule = Rule(source, locator, transform, wrap)
                    found.setdefault(rule.key, rule)
                return

        for source in ("user", "prev", "sys"):
            for kind, atoms in self._atoms(source).items():
                for i, atom in enumerate(atoms):
                    if target.may_come_from(atom.text, atom.date is not None):
                        add(source, list(self._atom_locators(source, kind, atoms, i)), _atom_values(atom))
        if isinstance(value, list) and value:
            for kind in _TOKEN_KINDS:
                atoms = self._atoms("all").get(kind, ())
                if len(atoms) == len(value):
                    for transform in LIST_TRANSFORMS:
                        values = [atom_transform(a, transform) for a in atoms]
                        if value_key(values) == target.key:
                            rule = Rule("all", (kind,), transform, wrap=True)
                            found.setdefault(rule.key, rule)
            if len(value) > 1:
                self._explain_runs(target, len(value), found)
        for i, observed in enumerate(self.history):
            call_locators = list(self._call_locators(i))
            for param, arg in observed.call.arguments.items():
                if not target.may_come_from(arg):
                    continue
                locators = [(*loc, param) for loc in call_locators]
                if self._last_with_param.get(param) == i:
                    locators.append(("name", param))
                add("arg", locators, json_variants(arg))
            self._explain_output(i, call_locators, target, add)
        if param is not None:
            following = self._walk_next(param)
            if following is not None and target.may_come_from(following):
                add("walk", [("name", param)], json_variants(following))
        return list(found.values())

    def _explain_runs(self, target: _Target, length: int, found: dict[str, Rule]) -> None:
        """Credit the rules giving an enumeration of the user message (:func:`derive_index.atom_runs`) as
        the target list: the n-th from the start or end, or the one just after a cue word."""
        for kind, runs in atom_runs(self.user_message).items():
            cued: dict[str, int] = {}
            for i, run in enumerate(runs):
                cued.setdefault(run[0].before, i)
            for i, run in enumerate(runs):
                if len(run) != length:
                    continue
                for transform in LIST_TRANSFORMS:
                    values = [atom_transform(a, transform) for a in run]
                    if value_key(values) != target.key:
                        continue
                    locators = [(kind, "run", "i", str(i))] if i < MAX_RUNS else []
                    if len(runs) - 1 - i < MAX_RUNS:
                        locators.append((kind, "run", "r", str(len(runs) - 1 - i)))
                    if run[0].before and cued[run[0].before] == i:
                        locators.append((kind, "run", "b", run[0].before))
                    for locator in locators:
                        rule = Rule("all", locator, transform, wrap=True)
                        found.setdefault(rule.key, rule)
                    break

    def _explain_output(self, i: int, call_locators: Sequence[tuple[str, ...]], target: _Target,
                        add: Any) -> None:
        """Credit the rules reading output ``i`` that give the target: only the leaves and atoms filed
        under the target's lookup keys are tried (:mod:`derive_outputs`)."""
        observed = self.history[i]
        index = output_index(observed.output)
        keys = target.lookup_keys()
        ordinal = message_ordinal(self.user_message)
        for position in index.candidates(keys)[:MAX_EXPLAINED_LEAVES]:
            path, leaf = index.paths[position], index.node(position)
            name = leaf_name(path)
            locators = [(*loc, path) for loc in call_locators]
            if index.first_path_with_name(name) == path and not any(
                    name in output_index(later.output).first_by_name for later in self.history[i + 1:]):
                locators.append(("key", name))
            add("out", locators, json_variants(leaf))
            if ordinal is not None and (pattern := ordinal_path(path, ordinal)) is not None:
                add("ord", [(*loc, pattern) for loc in call_locators], json_variants(leaf))
        if self._last_of_tool.get(observed.call.name) != i:
            return
        for token in index.token_candidates(keys):
            selectors = [("i", str(token.index))] if token.index < MAX_ORDINAL else []
            if token.from_end is not None and token.from_end < MAX_FROM_END:
                selectors.append(("r", str(token.from_end)))
            add("tok", [("tool", observed.call.name, token.path, token.kind, *sel) for sel in selectors],
                _atom_values(token.atom))
