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
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.derive_index import (
    MAX_FROM_END,
    MAX_ORDINAL,
    MAX_RUNS,
    atom_index,
    atom_keys,
    atom_runs,
    atom_value,
    atoms_by_kind,
    message_memo,
)
from forethought.predictors.patterns.derive_ordinal import at_ordinal, message_ordinal, ordinal_path
from forethought.predictors.patterns.derive_outputs import (
    alnum,
    first_leaf_by_name,
    first_leaf_by_path,
    leaf_name,
    output_index,
    target_keys,
    walk_key,
)
from forethought.predictors.patterns.derive_time import WHEN, Reference, when_atoms
from forethought.predictors.patterns.derive_values import (
    apply_transform,
    date_variants,
    json_variants,
    string_variants,
    value_key,
)
from forethought.predictors.patterns.mentions import is_code
from forethought.predictors.patterns.text import ORDINAL_KINDS, Atom, parse_number

MAX_UNUSED = 2
MAX_WALK_OUTPUTS = 16
"""A list being walked is looked for in this many of the latest outputs."""
MAX_EXPLAINED_LEAVES = 6
"""A value found in more leaves of one output is credited to the first ones only (a value found all
over an output says little about where it came from, and every rule credited is replayed from then on)."""
MAX_LISTED_CODES = 256
"""Items of an output's lists looked at, in all, for codes that abbreviate a name
(:meth:`Sources.listed_codes`)."""
MAX_BACK = 2
"""Calls are addressed as up to this many steps back."""
LIST_TRANSFORMS = ("all.id", "untag", "hash", "at", "num.id", "all.lower", "all.upper")
_TOKEN_KINDS = ("quoted", "file", "id", "url", "path", "number", "date", "hashtag", "mention")


@dataclass(frozen=True, slots=True)
class Rule:
    """One way to obtain an argument value: a source, a locator inside it, a transform, maybe a list wrap."""

    source: str
    locator: tuple[str, ...]
    transform: str
    wrap: bool = False
    key: str = field(init=False, repr=False, compare=False)
    """A stable text form, used to store the rule's statistics (computed once)."""
    message_only: bool = field(init=False, repr=False, compare=False)
    """Whether the value depends on a user message alone (not on the calls made so far)."""

    def __post_init__(self) -> None:
        key = json.dumps([self.source, list(self.locator), self.transform, self.wrap], separators=(",", ":"))
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "message_only",
                           self.source in ("user", "prev", "sys", "all") and self.locator[1:2] != ("u",)
                           and self.locator[:1] != (WHEN,))

    @classmethod
    def from_key(cls, key: str) -> Rule:
        source, locator, transform, wrap = json.loads(key)
        return cls(str(source), tuple(str(x) for x in locator), str(transform), bool(wrap))

    @property
    def generic(self) -> bool:
        """Whether the rule names no tool, so its record carries over to tools never seen."""
        return not (self.source in ("out", "tok", "arg", "ord") and self.locator[:1] == ("tool",))


def _atom_values(atom: Atom) -> Iterator[tuple[str, Any]]:
    yield from string_variants(atom.text)
    if atom.date is not None:
        yield from date_variants(atom.date)


def _atom_transform(atom: Atom, transform: str) -> Any:
    return apply_transform(transform, atom.text, atom.date)


_ARGUMENT_KEYS: dict[int, tuple[ObservedCall, frozenset[str]]] = {}
"""id of an observed call -> (the call, :func:`_argument_keys`): every later step reads the same calls."""
MAX_ARGUMENT_KEYS = 8192


def _argument_keys(observed: ObservedCall) -> frozenset[str]:
    """The value keys of every scalar in a call's arguments (strings lower-cased), remembered per call."""
    known = _ARGUMENT_KEYS.get(id(observed))
    if known is not None and known[0] is observed:
        return known[1]
    keys = frozenset(_scalar_keys(dict(observed.call.arguments)))
    if len(_ARGUMENT_KEYS) >= MAX_ARGUMENT_KEYS:
        _ARGUMENT_KEYS.clear()
    _ARGUMENT_KEYS[id(observed)] = (observed, keys)
    return keys


_OUTPUT_CODES: dict[int, tuple[ObservedCall, tuple[str, ...]]] = {}
"""id of an observed call -> (the call, :func:`_output_codes`): every later step reads the same outputs."""


def _output_codes(observed: ObservedCall) -> tuple[str, ...]:
    """The codes among the scalar items of an output's lists, shallow lists first, the first
    :data:`MAX_LISTED_CODES` items looked at in all (remembered per call)."""
    known = _OUTPUT_CODES.get(id(observed))
    if known is not None and known[0] is observed:
        return known[1]
    codes: dict[str, None] = {}
    budget = MAX_LISTED_CODES
    lists = output_index(observed.output).lists
    # Shallow lists first (a listing's own list before the lists inside its records); lists of containers
    # hold no codes and cost nothing.
    for path in sorted(lists, key=lambda p: p.count("[") + p.count(".")):
        items = lists[path]
        if not items or isinstance(items[0], list | dict):
            continue
        for item in items[:budget]:
            if is_code(item):
                codes.setdefault(item)
        budget -= min(budget, len(items))
        if budget <= 0:
            break
    if len(_OUTPUT_CODES) >= MAX_ARGUMENT_KEYS:
        _OUTPUT_CODES.clear()
    _OUTPUT_CODES[id(observed)] = (observed, found := tuple(codes))
    return found


def _scalar_keys(value: Any) -> Iterator[str]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _scalar_keys(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _scalar_keys(item)
    else:
        yield value_key(value.lower() if isinstance(value, str) else value)


def _pick(atoms: Sequence[Atom], selector: str, n: int) -> Atom | None:
    """The n-th atom from the start (``i``) or from the end (``r``)."""
    if n >= len(atoms):
        return None
    return atoms[n] if selector == "i" else atoms[-1 - n]


_alnum = functools.lru_cache(maxsize=1 << 14)(alnum)
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
        """The lookup keys of the leaves that may give the target (:func:`derive_outputs.target_keys`)."""
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


@dataclass(slots=True)
class Sources:
    """What derivation rules may read at one point of a session."""

    user_message: str
    history: Sequence[ObservedCall] = ()
    turn_start: int = 0
    previous_message: str = ""
    system_message: str = ""
    """The text of the system and developer messages (context: today's date, the user's name...)."""
    reference: Reference = field(default_factory=Reference)
    """What relative and year-less dates are resolved against (:func:`derive_time.reference_now`)."""
    _merged: dict[str, Mapping[str, tuple[Atom, ...]]] = field(default_factory=dict, init=False, repr=False,
                                                               compare=False)
    _used: set[str] | None = field(default=None, init=False, repr=False, compare=False)
    _last_of_tool: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _last_with_param: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _unused_atoms: dict[tuple[str, str], list[Atom]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)
    _applied: dict[str, tuple[Any, str] | None] = field(default_factory=dict, init=False, repr=False,
                                                        compare=False)
    _walks: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _used_by: dict[str, set[str]] | None = field(default=None, init=False, repr=False, compare=False)
    _listed_codes: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """Rule key -> the value it gives here and its value key: every rule is replayed at most once here."""

    def __post_init__(self) -> None:
        for i, observed in enumerate(self.history):
            self._last_of_tool[observed.call.name] = i
            for param in observed.call.arguments:
                self._last_with_param[param] = i

    # --- atoms of the user's messages -------------------------------------------------------------

    def _text(self, source: str) -> str:
        if source == "sys":
            return self.system_message
        return self.user_message if source in ("user", "all") else self.previous_message

    def _atoms(self, source: str) -> Mapping[str, tuple[Atom, ...]]:
        """The atoms of a message by kind, its times and dates (:data:`WHEN`) included."""
        merged = self._merged.get(source)
        if merged is None:
            text = self._text(source)
            merged = self._merged[source] = {**atoms_by_kind(text), WHEN: when_atoms(text, self.reference)}
        return merged

    def _used_keys(self) -> set[str]:
        """Value keys of every argument used by a call of this turn (worked out on first need)."""
        if self._used is None:
            self._used = set()
            for observed in self.history[self.turn_start:]:
                self._used.update(_argument_keys(observed))
        return self._used

    def used_elsewhere(self, value: Any, param: str) -> bool:
        """Whether a call of this turn already used ``value`` (strings compared lower-cased) for a
        parameter other than ``param``."""
        if self._used_by is None:
            self._used_by = {}
            for observed in self.history[self.turn_start:]:
                for name, argument in observed.call.arguments.items():
                    key = walk_key(argument)
                    if key is not None:
                        self._used_by.setdefault(key, set()).add(name)
        key = walk_key(value)
        names = self._used_by.get(key) if key is not None else None
        return bool(names) and param not in names  # type: ignore[operator]

    def used_for(self, value: Any, param: str) -> bool:
        """Whether a call of this turn already passed ``value`` (strings compared lower-cased) to ``param``."""
        self.used_elsewhere(value, param)  # builds the index
        key = walk_key(value)
        return key is not None and param in (self._used_by or {}).get(key, ())

    def names(self) -> tuple[str, ...]:
        """The proper names of the user message, in order."""
        return tuple(atom.text for atom in self._atoms("user").get("proper", ()))

    def listed_codes(self) -> tuple[str, ...]:
        """The codes (:func:`mentions.is_code`) among the scalar items of the lists in the latest outputs,
        newest output first (worked out once)."""
        if self._listed_codes is None:
            codes: dict[str, None] = {}
            for observed in reversed(self.history[-MAX_WALK_OUTPUTS:]):
                codes.update(dict.fromkeys(_output_codes(observed)))
            self._listed_codes = tuple(codes)
        return self._listed_codes

    def _unused(self, source: str, kind: str) -> list[Atom]:
        """The atoms of ``kind`` in ``source`` that no call of this turn has used yet."""
        found = self._unused_atoms.get((source, kind))
        if found is None:
            used = self._used_keys()
            found = self._unused_atoms[(source, kind)] = [
                atom for atom in self._atoms(source).get(kind, ()) if not atom_keys(atom.text, atom.number) & used]
        return found

    def _atom_locators(self, source: str, kind: str, atoms: Sequence[Atom], index: int
                       ) -> Iterator[tuple[str, ...]]:
        atom = atoms[index]
        if kind in ORDINAL_KINDS or kind == WHEN:
            if index < MAX_ORDINAL:
                yield (kind, "i", str(index))
            if len(atoms) - 1 - index < MAX_FROM_END:
                yield (kind, "r", str(len(atoms) - 1 - index))
            unused = self._unused(source, kind)
            if atom in unused and unused.index(atom) < MAX_UNUSED:
                yield (kind, "u", str(unused.index(atom)))
        first = atom_index(self._text(source))
        if atom.before and first.get((kind, "b", atom.before)) == atom:
            yield (kind, "b", atom.before)
        if atom.after and first.get((kind, "a", atom.after)) == atom:
            yield (kind, "a", atom.after)

    def _locate_atom(self, source: str, locator: tuple[str, ...]) -> Atom | None:
        kind, selector, arg = locator
        if selector == "u":
            return _pick(self._unused(source, kind), "i", int(arg))
        if selector in ("i", "r"):
            return _pick(self._atoms(source).get(kind, ()), selector, int(arg))
        return atom_index(self._text(source)).get((kind, "b" if selector == "b" else "a", arg))

    # --- calls and outputs ---------------------------------------------------------------------------

    def _call_locators(self, index: int) -> Iterator[tuple[str, ...]]:
        name = self.history[index].call.name
        if self._last_of_tool.get(name) == index:
            yield ("tool", name)
        back = len(self.history) - index
        if back <= MAX_BACK:
            yield ("back", str(back))

    def _call_at(self, locator: tuple[str, ...]) -> ObservedCall | None:
        if locator[0] == "tool":
            index = self._last_of_tool.get(locator[1])
            return None if index is None else self.history[index]
        if locator[0] == "back":
            back = int(locator[1])
            return self.history[-back] if back <= len(self.history) else None
        return None

    # --- learning: which rules give this value? ---------------------------------------------------------

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
                        values = [_atom_transform(a, transform) for a in atoms]
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
                    values = [_atom_transform(a, transform) for a in run]
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

    def _run_at(self, locator: tuple[str, ...]) -> tuple[Atom, ...] | None:
        """The enumeration an ``all`` rule's run locator names in the user message, or None."""
        kind, _, selector, arg = locator
        runs = atom_runs(self.user_message).get(kind, ())
        if selector == "b":
            return next((run for run in runs if run[0].before == arg), None)
        n = int(arg)
        if n >= len(runs):
            return None
        return runs[n] if selector == "i" else runs[-1 - n]

    def _explain_output(self, i: int, call_locators: Sequence[tuple[str, ...]], target: _Target,
                        add: Any) -> None:
        """Credit the rules reading output ``i`` that give the target: only the leaves and atoms filed
        under the target's lookup keys are tried (:mod:`derive_outputs`)."""
        observed = self.history[i]
        index = output_index(observed.output)
        keys = target.lookup_keys()
        ordinal = message_ordinal(self.user_message)
        for position in index.candidates(keys)[:MAX_EXPLAINED_LEAVES]:
            path, leaf = index.leaves[position]
            name = leaf_name(path)
            locators = [(*loc, path) for loc in call_locators]
            if index.first_path_by_name.get(name) == path and not any(
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

    # --- prediction: what does this rule give here? ------------------------------------------------------

    def forget_values(self) -> None:
        """Drop the remembered values of rules (a kept point of a session stays small; it works them out
        again if asked)."""
        self._applied = {}

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
        memos: dict[str, dict[str, tuple[Any, str] | None]] = {}
        out: list[tuple[Any, str] | None] = [None] * len(rules)
        for i, rule in enumerate(rules):
            if rule is None:
                continue
            key = rule.key
            if key in applied:
                found = applied[key]
            elif rule.message_only:
                text = self._text(rule.source)
                memo = memos[text] if text in memos else memos.setdefault(text, message_memo(text))
                if key in memo:
                    found = memo[key]
                elif rule.source != "all" and rule.locator in (index := atom_index(text)):
                    atom = index[rule.locator]
                    found = memo[key] = None if atom is None else atom_value(
                        atom.text, atom.date, rule.transform, rule.wrap)
                elif rule.source != "all" and rule.locator[1:2] in (("b",), ("a",)):
                    found = memo[key] = None  # the index lists every cue word that has an atom
                else:
                    found = memo[key] = self._apply_new(rule)
                applied[key] = found
            else:
                found = applied[key] = self._apply_new(rule)
            if found is not None and found[0].__class__ in (list, dict):
                # Remembered values are shared: every caller gets its own (shallow) container.
                found = (list(found[0]) if found[0].__class__ is list else dict(found[0])), found[1]
            out[i] = found
        return out

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
            values = [_atom_transform(a, rule.transform) for a in atoms]
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

    def _walk_next(self, param: str) -> Any:
        """The next item not yet used this turn of the list the latest value of ``param`` sits in (in the
        newest of the last outputs holding it in a list with such an item), or None."""
        if param in self._walks:
            return self._walks[param]
        self._walks[param] = None
        index = self._last_with_param.get(param)
        previous = None if index is None else walk_key(self.history[index].call.arguments.get(param))
        if previous is None:
            return None
        used = self._used_keys()
        for observed in reversed(self.history[-MAX_WALK_OUTPUTS:]):
            outputs = output_index(observed.output)
            found = outputs.in_lists.get(previous)
            if found is None:
                continue
            path, position, name = found
            for item in outputs.lists[path][position + 1:]:
                value = item.get(name) if name is not None and item.__class__ is dict else item
                key = None if name is not None and item.__class__ is not dict else walk_key(value)
                if key is not None and key not in used and value is not None:
                    self._walks[param] = value
                    return value
        return None

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
        return _pick(atoms, selector, int(n))

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
