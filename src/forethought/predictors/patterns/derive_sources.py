"""What a rule may read at one point of a session, and how its locators address it.

:class:`SourceView` holds the latest and previous user messages, the system and developer messages and the
calls so far with their outputs. It finds a message's atoms by kind (times and dates included) and by
locator (n-th, n-th from the end, n-th not yet used by a call of this turn, just after or before a cue
word), an enumeration of the latest message, a call by tool or by steps back, and the next item of a list
being walked. Learning (:mod:`derive_explain`) and replaying (:mod:`derive_rules`) rules build on it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.derive_calls import argument_keys, output_codes
from forethought.predictors.patterns.derive_index import (
    MAX_FROM_END,
    MAX_ORDINAL,
    atom_index,
    atom_keys,
    atom_runs,
    atoms_by_kind,
    message_memo,
)
from forethought.predictors.patterns.derive_lists import walk_key
from forethought.predictors.patterns.derive_outputs import output_index
from forethought.predictors.patterns.derive_time import WHEN, Reference, when_atoms
from forethought.predictors.patterns.derive_values import apply_transform
from forethought.predictors.patterns.text import ORDINAL_KINDS, Atom

MAX_UNUSED = 2
MAX_WALK_OUTPUTS = 16
"""A list being walked is looked for in this many of the latest outputs."""
MAX_BACK = 2
"""Calls are addressed as up to this many steps back."""


def atom_transform(atom: Atom, transform: str) -> Any:
    """What ``transform`` makes of ``atom`` (of its date too, when it has one)."""
    return apply_transform(transform, atom.text, atom.date)


def pick(atoms: Sequence[Atom], selector: str, n: int) -> Atom | None:
    """The n-th atom from the start (``i``) or from the end (``r``)."""
    if n >= len(atoms):
        return None
    return atoms[n] if selector == "i" else atoms[-1 - n]


@dataclass(slots=True)
class SourceView:
    """What derivation rules may read at one point of a session: the messages and calls, by locator."""

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
    _indexes: dict[str, tuple[Mapping[tuple[str, ...], Atom | None], dict[str, Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    """Message text -> its locator index and the memo of message-only rules: taken from the shared caches
    once while this point is worked on (dropped when it is kept to score new rules on, :meth:`forget_values`:
    held by every kept point, old messages' indexes were most of the objects young collections visited)."""
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
                self._used.update(argument_keys(observed))
        return self._used

    def states_when(self) -> tuple[bool, bool]:
        """Whether the latest user message states a date (a datetime too), and a time of day."""
        atoms = self._atoms("user").get(WHEN, ())
        return (any(isinstance(a.date, dt.date) for a in atoms),
                any(isinstance(a.date, dt.time | dt.datetime) for a in atoms))

    def outputs_indexed(self) -> bool:
        """Whether the index of every output of the calls so far is still kept (:func:`output_index`): a
        rule reading outputs then costs lookups here, not the indexing of outputs since forgotten."""
        holds = output_index.holds
        return all(holds(observed.output) for observed in self.history)

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
                codes.update(dict.fromkeys(output_codes(observed)))
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
        first = self.message_index(self._text(source))[0]
        if atom.before and first.get((kind, "b", atom.before)) == atom:
            yield (kind, "b", atom.before)
        if atom.after and first.get((kind, "a", atom.after)) == atom:
            yield (kind, "a", atom.after)

    def _locate_atom(self, source: str, locator: tuple[str, ...]) -> Atom | None:
        kind, selector, arg = locator
        if selector == "u":
            return pick(self._unused(source, kind), "i", int(arg))
        if selector in ("i", "r"):
            return pick(self._atoms(source).get(kind, ()), selector, int(arg))
        return self.message_index(self._text(source))[0].get((kind, "b" if selector == "b" else "a", arg))

    def message_index(self, text: str) -> tuple[Mapping[tuple[str, ...], Atom | None], dict[str, Any]]:
        """The locator index of a message (:func:`derive_index.atom_index`) and the memo of what message-only
        rules give on it (:func:`derive_index.message_memo`), held by this point of the session."""
        found = self._indexes.get(text)
        if found is None:
            found = self._indexes[text] = (atom_index(text), message_memo(text))
        return found

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
            found = outputs.in_list(previous)
            if found is None:
                continue
            path, position, name = found
            for value in outputs.walk_values(path, name)[position + 1:]:
                key = walk_key(value) if value is not None else None
                if key is not None and key not in used:
                    self._walks[param] = value
                    return value
        return None
